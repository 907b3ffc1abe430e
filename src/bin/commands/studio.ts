/**
 * `troupe studio`: the local web UI. Without --nats it runs an in-process mesh (the demo agents and the
 * handoff specialists, inspection on) with an A2A gateway on a free loopback port for the chat; with
 * --nats it follows a running mesh as an operator (inspection stream, ctl) and chats through the gateway
 * named by --gateway.
 */
import type { Command } from 'commander';
import { createLogger } from '../../observability/logger.js';
import { startEmbeddedStudio } from '../../studio/embedded.js';
import { startStudio, type Studio } from '../../studio/server.js';
import { connect, globals, onShutdown } from '../cli.js';
import { studioTeam } from '../demo/studio-team.js';
import { color, printJson } from '../output.js';

export async function studio(opts: { port: number; host: string; gateway?: string; gatewayToken?: string }, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const logger = createLogger({ name: 'troupe-studio', ...(g.logLevel ? { level: g.logLevel } : { level: 'warn' }) });
  let server: Studio;
  let gatewayUrl = opts.gateway;
  let stop: () => Promise<void>;
  if (g.nats) {
    const transport = await connect(g, 'troupe-studio', true, logger);
    try {
      server = await startStudio({
        port: opts.port,
        host: opts.host,
        mode: 'nats',
        tenant: g.tenant,
        transport,
        ...(gatewayUrl ? { gatewayUrl } : {}),
        ...(opts.gatewayToken ? { gatewayToken: opts.gatewayToken } : {}),
      });
    } catch (err) {
      await transport.drain().catch(() => undefined);
      throw err;
    }
    stop = async () => {
      await server.close();
      await transport.drain();
    };
    if (server.problem)
      process.stderr.write(color.yellow(`could not switch inspection on (${server.problem}): the studio needs operator credentials (--creds)\n`));
    else process.stderr.write(color.dim(`inspection on at ${server.nodes.length} node(s); it stays on after the studio exits (\`troupe inspect --off\`)\n`));
  } else {
    const embedded = await startEmbeddedStudio({ team: studioTeam, tenant: g.tenant, port: opts.port, host: opts.host, logger });
    server = embedded.studio;
    gatewayUrl = embedded.gatewayUrl;
    stop = embedded.stop;
  }
  if (g.json) printJson({ url: server.url, gateway: gatewayUrl ?? null, mode: g.nats ? 'nats' : 'embedded' });
  process.stderr.write(
    `${color.green('troupe')} studio on ${color.bold(server.url)} (${g.nats ? `mesh ${g.nats}` : 'in-process demo mesh'}${gatewayUrl ? `; chat through ${gatewayUrl}` : '; no chat: pass --gateway <url>'})\n`,
  );
  onShutdown(stop);
}
