/**
 * `troupe send <text>`: one turn as the user, with the streamed answer and the route it took.
 * `troupe send --cancel --thread <id> [reason]`: cancels the thread (ends a handoff) instead; the text, if
 * any, is the reason.
 */
import { startTracing } from '../../observability/tracing.js';
import type { Command } from 'commander';
import { startEmbedded } from '../../team/embedded.js';
import { META, type RouteStep } from '../../protocol/metadata.js';
import { silentLogger } from '../../observability/logger.js';
import type { ThreadEvent } from '../../protocol/a2a.js';
import { TroupeClient, textOfMessage } from '../../sdk/client.js';
import type { Transport } from '../../transport/types.js';
import { UsageError, connect, globals, principalOf } from '../cli.js';
import demoTeam from '../demo/team.js';
import { color, colorState, printJson } from '../output.js';

function describeRoute(route: RouteStep[]): string {
  return route.map((s, i) => (i === 0 ? `${s.from} → ${s.to}` : `→ ${s.to}`)).join(' ');
}

function printEvent(event: ThreadEvent): void {
  if (event.kind === 'artifact-update') {
    const text = event.artifact.parts.flatMap((p) => (p.kind === 'text' ? [p.text] : [])).join('');
    process.stdout.write(color.cyan(text));
    return;
  }
  const step = event.metadata?.[META.route] as RouteStep | undefined;
  if (step) process.stdout.write(`${color.dim(`  ↳ hop ${step.hop}: ${step.from} → ${step.to}  (${step.reason})`)}\n`);
  // An answer before the final one: a handoff's target speaks, then its source takes the turn back.
  if (!event.final && event.status.message) {
    process.stdout.write(`${color.bold(String(event.status.message.metadata?.[META.agent] ?? 'agent'))}: ${textOfMessage(event.status.message)}\n`);
  }
  const error = event.metadata?.[META.error] as { code?: string; message?: string } | undefined;
  if (!event.final && error) process.stdout.write(`${color.red(`  ${String(error.code)}: ${String(error.message)}`)}\n`);
}

export interface SendOptions {
  thread?: string;
  to?: string;
  cancel?: boolean;
  timeout: number;
}

export async function send(text: string | undefined, opts: SendOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  if (opts.cancel && !opts.thread) throw new UsageError('--cancel needs --thread <id>');
  if (!opts.cancel && !text) throw new UsageError("missing required argument 'text' (only --cancel goes without one)");
  // With OTEL_EXPORTER_OTLP_ENDPOINT set, the message starts a trace (flushed before the command exits).
  const tracing = await startTracing({ serviceName: 'troupe-cli' });
  let transport: Transport | undefined;
  let embedded: Awaited<ReturnType<typeof startEmbedded>> | undefined;
  let client: TroupeClient;
  if (g.nats) {
    transport = await connect(g, 'troupe-cli');
    client = new TroupeClient(transport, { tenant: g.tenant, principal: await principalOf(g) });
  } else {
    embedded = await startEmbedded(demoTeam, silentLogger(), g.tenant);
    client = embedded.client;
  }
  try {
    if (opts.cancel && opts.thread) {
      const state = await client.cancel(opts.thread, text);
      if (g.json) printJson({ threadId: opts.thread, state });
      else process.stdout.write(`thread ${opts.thread}: ${colorState(state)}\n`);
      return;
    }
    if (opts.thread && !g.json && !(await client.exists(opts.thread))) {
      process.stderr.write(color.dim(`no thread ${opts.thread} yet: this message starts it\n`));
    }
    let streamed = false;
    const result = await client.send(text ?? '', {
      ...(opts.thread ? { threadId: opts.thread } : {}),
      ...(opts.to ? { to: opts.to } : {}),
      timeoutMs: opts.timeout,
      onEvent: (e) => {
        if (g.json) return;
        if (e.kind === 'artifact-update') streamed = true;
        else if (streamed) {
          process.stdout.write('\n');
          streamed = false;
        }
        printEvent(e);
      },
    });
    // A turn that ended with an error is a failure for scripts too.
    if (result.error) process.exitCode = 1;
    if (g.json) {
      printJson({
        threadId: result.threadId,
        state: result.final.status.state,
        text: result.text,
        route: result.route,
        error: result.error,
        message: result.final.status.message,
      });
      return;
    }
    const from = (result.final.status.message?.metadata?.[META.agent] as string | undefined) ?? 'agent';
    process.stdout.write(`\n${color.bold(from)}: ${textOfMessage(result.final.status.message)}\n`);
    if (result.error) process.stdout.write(`${color.red(`${result.error.code}: ${result.error.message}`)}\n`);
    const hops = result.final.status.message?.metadata?.[META.hops];
    process.stdout.write(
      color.dim(
        `route: ${describeRoute(result.route)}  ·  hops: ${typeof hops === 'number' ? hops : (result.route.at(-1)?.hop ?? 0)}  ·  state: ${result.final.status.state}  ·  thread: ${result.threadId}\n`,
      ),
    );
  } finally {
    await embedded?.stop();
    await transport?.drain();
    await tracing?.shutdown();
  }
}
