#!/usr/bin/env node
/**
 * The `troupe` command. Without a NATS URL (`--nats` or TROUPE_NATS_URL) everything runs in one process
 * on the in-memory transport with the demo team; with one, commands talk to the mesh over NATS.
 */
import { Command, Option } from 'commander';
import { AgentHost } from '../actors/agent-host.js';
import type { AgentDefinition } from '../sdk/agent.js';
import { TroupeClient, textOfMessage } from '../sdk/client.js';
import { createLogger, silentLogger } from '../observability/logger.js';
import { TroupeNode } from '../actors/node.js';
import { loadModule, type TeamDefinition } from '../sdk/team.js';
import demoTeam from './demo/team.js';
import type { RouteStep } from '../machines/thread.js';
import type { ThreadEvent } from '../protocol/a2a.js';
import { KvThreadStore } from '../store/kv.js';
import { NatsTransport } from '../transport/nats.js';
import { subjects } from '../transport/subjects.js';
import type { Transport } from '../transport/types.js';
import { color, colorState, printJson, reportError, table } from './output.js';
import { runDemo } from './demo/run.js';
import { startEmbedded } from '../actors/embedded.js';
import { registerGraphCommand } from './graph.js';
import { loadTokens, skillsOfAgents, startGateway } from '../gateway/index.js';

// `troupe … | head` closes the pipe early: that is not an error.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

interface GlobalOpts {
  nats?: string;
  user?: string;
  password?: string;
  tenant: string;
  json?: boolean;
  logLevel?: string;
}

const program = new Command();
program
  .name('troupe')
  .description('Actor-model runtime for multi-agent systems: XState actors exchanging A2A messages over NATS')
  .addOption(new Option('--nats <url>', 'NATS server URL; without it, an in-process mesh runs the demo team').env('TROUPE_NATS_URL'))
  .addOption(new Option('--user <user>', 'NATS user').env('TROUPE_NATS_USER'))
  .addOption(new Option('--password <password>', 'NATS password').env('TROUPE_NATS_PASSWORD'))
  .addOption(new Option('--tenant <tenant>', 'tenant (a NATS account in nats.conf)').env('TROUPE_TENANT').default('demo'))
  .addOption(new Option('--log-level <level>', 'pino log level').env('TROUPE_LOG_LEVEL'))
  .option('--json', 'machine-readable output')
  .showHelpAfterError();

function globals(cmd: Command): GlobalOpts {
  return cmd.optsWithGlobals<GlobalOpts>();
}

async function connect(g: GlobalOpts, name: string, longLived = false): Promise<NatsTransport> {
  if (!g.nats) throw new Error('this command needs a NATS server: pass --nats nats://127.0.0.1:4222 or set TROUPE_NATS_URL');
  return NatsTransport.connect({
    servers: g.nats,
    name,
    // A node or an agent rides out a NATS restart; a one-shot command fails fast.
    ...(longLived ? { maxReconnectAttempts: -1 } : {}),
    ...(g.user ? { user: g.user } : {}),
    ...(g.password ? { pass: g.password } : {}),
  });
}

/** Runs a one-shot command with a client on its own NATS connection, drained afterwards. */
async function withClient(g: GlobalOpts, fn: (client: TroupeClient) => Promise<void>): Promise<void> {
  const transport = await connect(g, 'troupe-cli');
  try {
    await fn(new TroupeClient(transport, g.tenant));
  } finally {
    await transport.drain();
  }
}

function onShutdown(fn: () => Promise<void>): void {
  let stopping = false;
  const handler = (signal: string) => {
    if (stopping) process.exit(1);
    stopping = true;
    process.stderr.write(color.dim(`\n${signal}: draining…\n`));
    fn()
      .then(() => process.exit(0))
      .catch(() => process.exit(1));
  };
  process.on('SIGINT', () => handler('SIGINT'));
  process.on('SIGTERM', () => handler('SIGTERM'));
}

program
  .command('up')
  .description('start a node (router + threads); without --nats, an in-process mesh with the demo team')
  .option('--team <file>', 'team module (default export defineTeam({...})); its agents run in this process')
  .option('--no-agents', 'with --team: use only its settings, run no agents here')
  .option('--inspect', 'publish inspection events on troupe.<tenant>.inspect.<actorId>')
  .option('--idle <ms>', 'passivate threads idle this long', (v) => Number(v))
  .option('--no-durable', 'with --nats: plain subscriptions instead of the JetStream inbound stream and partition leases')
  .option('--partitions <n>', 'thread partitions (must match the mapping in nats.conf)', (v) => Number(v), 8)
  .option('--lease-ttl <ms>', 'how long a dead node keeps its partitions before another node takes over', (v) => Number(v), 5_000)
  .option('--thread-ttl <ms>', 'drop threads not written for this long (bucket max age, set when the bucket is created)', (v) => Number(v), 24 * 60 * 60_000)
  .action(async (opts: { team?: string; agents: boolean; inspect?: boolean; idle?: number; durable: boolean; partitions: number; leaseTtl: number; threadTtl: number }, cmd: Command) => {
    const g = globals(cmd);
    const logger = createLogger({ name: 'troupe', ...(g.logLevel ? { level: g.logLevel } : {}) });
    const loaded = opts.team ? await loadModule(opts.team) : undefined;
    const team: TeamDefinition | undefined = loaded?.team ?? (loaded ? { name: opts.team ?? 'team', agents: loaded.agents } : undefined);
    if (!g.nats) {
      const mesh = await startEmbedded(team ?? demoTeam, logger, g.tenant);
      process.stderr.write(
        `${color.green('troupe')} embedded mesh up (in-memory) with ${(team ?? demoTeam).agents.map((a) => a.card.id).join(', ')}.\n` +
          `${color.dim('This mesh lives in this process only. To talk to it from other processes run nats-server and pass --nats.')}\n`,
      );
      onShutdown(mesh.stop);
      return;
    }
    const transport = await connect(g, 'troupe-node', true);
    const store = await KvThreadStore.open(transport.connection, { ttlMs: opts.threadTtl });
    if (store.ttlMs !== opts.threadTtl) logger.warn({ bucketTtlMs: store.ttlMs }, 'the thread bucket exists with another max age; it keeps its own');
    const node = await new TroupeNode({
      transport,
      tenant: g.tenant,
      logger,
      store,
      ...(team?.config ? { config: team.config } : {}),
      ...(team?.policy ? { policy: team.policy } : {}),
      ...(opts.inspect ? { inspect: true } : {}),
      ...(opts.idle ? { idleMs: opts.idle } : {}),
      ...(opts.durable ? { durable: { nc: transport.connection, partitions: opts.partitions, leaseTtlMs: opts.leaseTtl } } : {}),
    }).start();
    const hosts = opts.agents && team ? await Promise.all(team.agents.map((agent) => new AgentHost({ transport, agent, tenant: g.tenant, logger }).start())) : [];
    process.stderr.write(`${color.green('troupe')} node ${node.nodeId} up on ${transport.name} (tenant ${g.tenant})\n`);
    onShutdown(async () => {
      await Promise.all(hosts.map((h) => h.stop()));
      await node.stop();
      await store.close();
      await transport.drain();
    });
  });

program
  .command('agent <module>')
  .description('run an agent module (default export defineAgent({...})) and join the mesh')
  .option('--replicas <n>', 'instances in this process (they share the inbox queue group)', (v) => Number(v), 1)
  .option('--heartbeat <ms>', 'how often the card is announced; the registry drops the agent after 3 missed beats', (v) => Number(v), 5_000)
  .action(async (modulePath: string, opts: { replicas: number; heartbeat: number }, cmd: Command) => {
    const g = globals(cmd);
    const logger = createLogger({ name: 'troupe-agent', ...(g.logLevel ? { level: g.logLevel } : {}) });
    const { agents } = await loadModule(modulePath);
    const transport = await connect(g, `troupe-agent-${agents.map((a) => a.card.id).join('+')}`, true);
    const hosts: AgentHost[] = [];
    for (const agent of agents as AgentDefinition[]) {
      for (let i = 0; i < Math.max(1, opts.replicas); i++) {
        hosts.push(await new AgentHost({ transport, agent, tenant: g.tenant, logger, heartbeatMs: opts.heartbeat, ttlMs: opts.heartbeat * 3 }).start());
      }
    }
    process.stderr.write(`${color.green('troupe')} ${hosts.length} agent instance(s) joined ${transport.name}: ${agents.map((a) => a.card.id).join(', ')}\n`);
    onShutdown(async () => {
      await Promise.all(hosts.map((h) => h.stop()));
      await transport.drain();
    });
  });

function describeRoute(route: RouteStep[]): string {
  return route.map((s, i) => (i === 0 ? `${s.from} → ${s.to}` : `→ ${s.to}`)).join(' ');
}

function printEvent(event: ThreadEvent, json: boolean): void {
  if (json) return;
  if (event.kind === 'artifact-update') {
    const text = event.artifact.parts.flatMap((p) => (p.kind === 'text' ? [p.text] : [])).join('');
    process.stdout.write(color.cyan(text));
    return;
  }
  const step = event.metadata?.['troupe/route'] as RouteStep | undefined;
  if (step) process.stdout.write(`${color.dim(`  ↳ hop ${step.hop}: ${step.from} → ${step.to}  (${step.reason})`)}\n`);
}

program
  .command('send <text>')
  .description('send a message as the user; prints the streamed answer and the route it took')
  .option('--thread <id>', 'continue a thread (default: a new one)')
  .option('--cancel', 'cancel the thread given with --thread instead of sending')
  .option('--timeout <ms>', 'how long to wait for the answer', (v) => Number(v), 60_000)
  .action(async (text: string, opts: { thread?: string; cancel?: boolean; timeout: number }, cmd: Command) => {
    const g = globals(cmd);
    let transport: Transport | undefined;
    let embedded: Awaited<ReturnType<typeof startEmbedded>> | undefined;
    let client: TroupeClient;
    if (g.nats) {
      transport = await connect(g, 'troupe-cli');
      client = new TroupeClient(transport, g.tenant);
    } else {
      embedded = await startEmbedded(demoTeam, silentLogger(), g.tenant);
      client = embedded.client;
    }
    try {
      if (opts.cancel) {
        if (!opts.thread) throw new Error('--cancel needs --thread <id>');
        const state = await client.cancel(opts.thread, text);
        if (g.json) printJson({ threadId: opts.thread, state });
        else process.stdout.write(`thread ${opts.thread}: ${colorState(state)}\n`);
        return;
      }
      let streamed = false;
      const result = await client.send(text, {
        ...(opts.thread ? { threadId: opts.thread } : {}),
        timeoutMs: opts.timeout,
        onEvent: (e) => {
          if (e.kind === 'artifact-update') streamed = true;
          else if (streamed) {
            process.stdout.write('\n');
            streamed = false;
          }
          printEvent(e, Boolean(g.json));
        },
      });
      if (g.json) {
        printJson({ threadId: result.threadId, state: result.final.status.state, text: result.text, route: result.route, error: result.error, message: result.final.status.message });
        return;
      }
      const from = (result.final.status.message?.metadata?.['troupe/agent'] as string | undefined) ?? 'agent';
      process.stdout.write(`\n${color.bold(from)}: ${textOfMessage(result.final.status.message)}\n`);
      if (result.error) process.stdout.write(`${color.red(`${result.error.code}: ${result.error.message}`)}\n`);
      process.stdout.write(
        color.dim(`route: ${describeRoute(result.route)}  ·  hops: ${result.route.at(-1)?.hop ?? 0}  ·  state: ${result.final.status.state}  ·  thread: ${result.threadId}\n`),
      );
    } finally {
      await embedded?.stop();
      await transport?.drain();
    }
  });

program
  .command('ps')
  .description('every live actor across the mesh (nodes, threads and their children, agents)')
  .option('--window <ms>', 'how long to gather answers', (v) => Number(v), 500)
  .action(async (opts: { window: number }, cmd: Command) => {
    const g = globals(cmd);
    await withClient(g, async (client) => {
      const replies = await client.ps(opts.window);
      const actors = replies.flatMap((r) => r.actors);
      const live = actors.filter((a) => a.kind === 'thread').length;
      // Passivated = persisted threads that are still open but have no live actor on any node.
      const stored = (await client.ctl('threads', {}).catch(() => ({ threads: [] }))) as { threads: Array<{ threadId: string; state: string }> };
      const liveIds = new Set(actors.filter((a) => a.kind === 'thread').map((a) => a.id));
      const passivated = stored.threads.filter((t) => !liveIds.has(t.threadId) && !['completed', 'canceled', 'failed', 'rejected'].includes(t.state)).length;
      if (g.json) {
        printJson({ actors, live, passivated });
        return;
      }
      if (!actors.length) {
        process.stdout.write(`no actors answered on ${client.transport.name} (tenant ${g.tenant}): start a node with \`troupe up --nats ${g.nats}\`\n`);
        return;
      }
      const order = ['node', 'registry', 'agent', 'thread', 'router', 'agent-call', 'handoff', 'orchestration'];
      actors.sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind) || a.id.localeCompare(b.id));
      process.stdout.write(
        `${table(
          ['KIND', 'ID', 'STATE', 'THREAD', 'HOPS', 'NODE'],
          actors.map((a) => [a.kind, a.id, colorState(a.state), a.threadId, a.hops, a.node]),
        )}\n`,
      );
      process.stdout.write(color.dim(`${live} live threads, ${passivated} passivated, ${replies.length} processes\n`));
    });
  });

program
  .command('inspect <actorId>')
  .description("one actor's state value, context (secrets redacted) and recent events")
  .action(async (actorId: string, _opts: unknown, cmd: Command) => {
    const g = globals(cmd);
    await withClient(g, async (client) => {
      const found = await client.inspect(actorId);
      if (!found) {
        if (g.json) printJson({ found: false, actorId });
        else process.stdout.write(`no live actor "${actorId}": list them with \`troupe ps\` (a passivated thread shows with \`troupe thread ${actorId}\`)\n`);
        process.exitCode = 2;
        return;
      }
      if (g.json) {
        printJson(found);
        return;
      }
      process.stdout.write(`${color.bold(found.actor?.kind ?? 'actor')} ${actorId} on ${found.node}\n`);
      process.stdout.write(`state: ${colorState(JSON.stringify(found.value))}\n`);
      process.stdout.write(`context:\n${JSON.stringify(found.context, null, 2)}\n`);
      if (found.events.length) {
        process.stdout.write(`recent events:\n${table(['AT', 'EVENT', 'ACTOR'], found.events.map((e) => [e.at, e.type, e.summary]))}\n`);
      }
    });
  });

program
  .command('watch <actorId>')
  .description('follow inspection events of an actor (node started with --inspect); Ctrl-C to stop')
  .action(async (actorId: string, _opts: unknown, cmd: Command) => {
    const g = globals(cmd);
    const transport = await connect(g, 'troupe-cli');
    const subject = subjects.inspect(g.tenant, actorId === '*' || actorId === '>' ? '*' : actorId.replace(/[^A-Za-z0-9_-]/g, '_'));
    transport.subscribe(subject.replace(/\.\*$/, '.>'), (msg) => {
      const line = new TextDecoder().decode(msg.data);
      if (g.json) process.stdout.write(`${line}\n`);
      else {
        const e = JSON.parse(line) as { at: string; actorId: string; event: string; state: unknown };
        process.stdout.write(`${color.dim(e.at)} ${e.actorId} ${color.cyan(e.event)} → ${colorState(JSON.stringify(e.state))}\n`);
      }
    });
    process.stderr.write(color.dim(`watching ${subject} on ${transport.name}\n`));
    onShutdown(() => transport.drain());
  });

program
  .command('threads')
  .description('list persisted threads')
  .option('--state <state>', 'only threads in this task state')
  .action(async (opts: { state?: string }, cmd: Command) => {
    const g = globals(cmd);
    await withClient(g, async (client) => {
      const res = (await client.ctl('threads', opts.state ? { state: opts.state } : {})) as {
        threads: Array<{ threadId: string; state: string; updatedAt: string; revision: number; live: boolean; corrupt?: string }>;
      };
      if (g.json) printJson(res.threads);
      else
        process.stdout.write(
          `${table(
            ['THREAD', 'STATE', 'UPDATED', 'REV', 'LIVE'],
            res.threads.map((t) => [t.threadId, t.corrupt ? color.red(`corrupt: ${t.corrupt.slice(0, 60)}`) : colorState(t.state), t.updatedAt, t.revision, t.live ? 'live' : 'passivated']),
          )}\n${color.dim(`${res.threads.length} threads`)}\n`,
        );
    });
  });

program
  .command('thread <id>')
  .description('show a persisted thread record (redacted)')
  .action(async (id: string, _opts: unknown, cmd: Command) => {
    const g = globals(cmd);
    await withClient(g, async (client) => {
      const res = (await client.ctl('thread', { threadId: id })) as {
        revision: number;
        record: { task: { status: { state: string }; history?: Array<{ role: string; parts: Array<{ kind: string; text?: string }>; metadata?: Record<string, unknown> }> }; updatedAt: string; owner?: string };
      };
      if (g.json) {
        printJson(res);
        return;
      }
      const { task } = res.record;
      process.stdout.write(`thread ${id}  state ${colorState(task.status.state)}  revision ${res.revision}  updated ${res.record.updatedAt}  owner ${res.record.owner ?? '-'}\n`);
      for (const m of task.history ?? []) {
        const who = m.role === 'user' ? 'user' : String(m.metadata?.['troupe/agent'] ?? 'agent');
        process.stdout.write(`  ${color.bold(who.padEnd(12))} ${m.parts.map((p) => p.text ?? `[${p.kind}]`).join(' ')}\n`);
      }
    });
  });

program
  .command('rehydrate <id>')
  .description('drop the live actor of a thread and reload it from the store')
  .action(async (id: string, _opts: unknown, cmd: Command) => {
    const g = globals(cmd);
    await withClient(g, async (client) => {
      const state = await client.rehydrate(id);
      if (g.json) printJson({ threadId: id, state });
      else process.stdout.write(`thread ${id} rehydrated: ${colorState(state)}\n`);
    });
  });

program
  .command('demo')
  .description('run the demo team in-process and play scripted conversations (what `npm start` does)')
  .action(async (_opts: unknown, cmd: Command) => {
    await runDemo(Boolean(globals(cmd).json));
  });

program
  .command('gateway')
  .description('serve the mesh to A2A clients (JSON-RPC + SSE over HTTP); without --nats, an in-process mesh with the demo team')
  .option('--port <n>', 'port to listen on (0: any free port)', (v) => Number(v), 8080)
  .option('--host <host>', 'address to listen on', '127.0.0.1')
  .option('--tokens <file>', 'JSON {"<token>": "<tenant>"}: requests then need Authorization: Bearer <token>')
  .option('--public-url <url>', 'the URL clients reach the gateway at, for the agent card (behind a proxy)')
  .action(async (opts: { port: number; host: string; tokens?: string; publicUrl?: string }, cmd: Command) => {
    const g = globals(cmd);
    const logger = createLogger({ name: 'troupe-gateway', ...(g.logLevel ? { level: g.logLevel } : {}) });
    const tokens = opts.tokens ? loadTokens(opts.tokens) : undefined;
    const clients: Record<string, TroupeClient> = {};
    const stops: Array<() => Promise<void>> = [];
    // The gateway first, so no request reaches a mesh that is going away.
    const stopAll = async () => {
      for (const stop of stops) await stop();
    };
    try {
      if (g.nats) {
        // One tenant: the one the CLI's credentials belong to. Serving more takes one client per tenant (startGateway).
        const transport = await connect(g, 'troupe-gateway', true);
        clients[g.tenant] = new TroupeClient(transport, g.tenant);
        stops.push(() => transport.drain());
      } else {
        // Embedded: one demo mesh per tenant the tokens name, so tenancy can be tried without NATS.
        for (const tenant of new Set([g.tenant, ...Object.values(tokens ?? {})])) {
          const mesh = await startEmbedded(demoTeam, logger, tenant);
          clients[tenant] = mesh.client;
          stops.push(mesh.stop);
        }
      }
      const gateway = await startGateway({
        clients,
        defaultTenant: g.tenant,
        port: opts.port,
        host: opts.host,
        logger,
        ...(tokens ? { tokens } : {}),
        card: {
          ...(opts.publicUrl ? { url: opts.publicUrl } : {}),
          ...(g.nats ? {} : { name: 'Troupe demo', skills: skillsOfAgents(demoTeam.agents.map((a) => a.card)) }),
        },
      });
      stops.unshift(() => gateway.close());
      if (g.json) printJson({ url: gateway.url, card: `${gateway.url}/.well-known/agent-card.json`, tenants: Object.keys(clients) });
      process.stderr.write(
        `${color.green('troupe')} gateway listening on ${gateway.url} (${g.nats ?? 'embedded demo mesh'}; ${tokens ? 'bearer tokens' : `no auth, tenant ${g.tenant}`})\n` +
          `${color.dim(`agent card: ${gateway.url}/.well-known/agent-card.json`)}\n`,
      );
    } catch (err) {
      await stopAll().catch(() => undefined);
      throw err;
    }
    onShutdown(stopAll);
  });

registerGraphCommand(program);

program.parseAsync(process.argv).catch((err: unknown) => {
  process.exitCode = reportError(err, process.argv.includes('--json'));
});
