/**
 * `troupe agent <module | agent.yaml>` or `troupe agent --a2a <card-url>`: run agent modules, an agent
 * declared in YAML, or a remote A2A agent, and join the mesh.
 */
import type { Command } from 'commander';
import { AgentHost } from '../../actors/agent-host.js';
import { createLogger } from '../../observability/logger.js';
import { installProcessGuards } from '../../observability/guard.js';
import { natsCheck } from '../../observability/probes.js';
import type { AgentDefinition } from '../../sdk/agent.js';
import { remoteAgent } from '../../sdk/remote-agent.js';
import { loadModule } from '../../team/team.js';
import { connect, globals, onShutdown, startObservability, UsageError } from '../cli.js';
import { color } from '../output.js';

export interface AgentCommandOptions {
  metricsPort?: number;
  metricsHost?: string;
  replicas: number;
  heartbeat: number;
  a2a?: string;
  token?: string;
  id?: string;
  timeout?: number;
  refresh?: number;
  inspect?: boolean;
}

export async function agent(modulePath: string | undefined, opts: AgentCommandOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const logger = createLogger({ name: 'troupe-agent', ...(g.logLevel ? { level: g.logLevel } : {}) });
  installProcessGuards(logger);
  const observability = await startObservability(opts, 'troupe-agent', logger);
  if (Boolean(modulePath) === Boolean(opts.a2a))
    throw new UsageError('name an agent module or agent.yaml, or a remote A2A agent with --a2a <card-url> (one of the two)');
  if (!opts.a2a && (opts.token || opts.id || opts.timeout)) throw new UsageError('--token, --id and --timeout go with --a2a');
  // Loaded (an agent.yaml validated with its tools and model keys, a remote card fetched) before connecting.
  const agents: AgentDefinition[] = opts.a2a
    ? [
        await remoteAgent({
          card: opts.a2a,
          ...(opts.token ? { token: opts.token } : {}),
          ...(opts.id ? { id: opts.id } : {}),
          ...(opts.timeout ? { timeoutMs: opts.timeout } : {}),
          ...(opts.refresh !== undefined ? { refreshMs: opts.refresh } : {}),
        }),
      ]
    : (await loadModule(modulePath!)).agents;
  // A YAML agent tracks its running model loops for `ps`: each replica gets its own instance.
  const perReplica = modulePath !== undefined && /\.ya?ml$/i.test(modulePath);
  const transport = await connect(g, `troupe-agent-${agents.map((a) => a.card.id).join('+')}`, true, logger);
  observability.readiness.add('nats', natsCheck(transport));
  const hosts: AgentHost[] = [];
  for (const def of agents) {
    for (let i = 0; i < opts.replicas; i++) {
      const agent = perReplica && i > 0 ? (await loadModule(modulePath)).agents[0]! : def;
      hosts.push(
        await new AgentHost({
          transport,
          agent,
          tenant: g.tenant,
          logger,
          heartbeatMs: opts.heartbeat,
          ttlMs: opts.heartbeat * 3,
          ...(opts.inspect ? { inspect: true } : {}),
        }).start(),
      );
    }
  }
  observability.readiness.started();
  const work = opts.a2a ? agents[0]!.status?.() : undefined;
  // A remote agent whose endpoint is down joins all the same and says why it is not ready yet.
  const what = opts.a2a ? ` (remote A2A agent${work?.ready === false ? `, unavailable until its card can be read: ${work.reason ?? ''}` : ''})` : '';
  process.stderr.write(
    `${color.green('troupe')} ${hosts.length} agent instance(s) joined ${transport.name}: ${agents.map((a) => a.card.id).join(', ')}${what}\n`,
  );
  onShutdown(async () => {
    await Promise.all(hosts.map((h) => h.stop()));
    await transport.drain();
    await observability.stop();
  }, observability.readiness);
}
