/** `troupe agent <module | agent.yaml>`: run agent modules, or an agent declared in YAML, and join the mesh. */
import type { Command } from 'commander';
import { AgentHost } from '../../actors/agent-host.js';
import { createLogger } from '../../observability/logger.js';
import { installProcessGuards } from '../../observability/guard.js';
import { loadModule } from '../../sdk/team.js';
import { connect, globals, onShutdown } from '../cli.js';
import { color } from '../output.js';

export async function agent(modulePath: string, opts: { replicas: number; heartbeat: number }, cmd: Command): Promise<void> {
  const g = globals(cmd);
  const logger = createLogger({ name: 'troupe-agent', ...(g.logLevel ? { level: g.logLevel } : {}) });
  installProcessGuards(logger);
  // Loaded (and, for an agent.yaml, validated with its tools and model keys) before connecting.
  const { agents } = await loadModule(modulePath);
  // A YAML agent tracks its running model loops for `ps`: each replica gets its own instance.
  const perReplica = /\.ya?ml$/i.test(modulePath);
  const transport = await connect(g, `troupe-agent-${agents.map((a) => a.card.id).join('+')}`, true);
  const hosts: AgentHost[] = [];
  for (const def of agents) {
    for (let i = 0; i < opts.replicas; i++) {
      const agent = perReplica && i > 0 ? (await loadModule(modulePath)).agents[0]! : def;
      hosts.push(await new AgentHost({ transport, agent, tenant: g.tenant, logger, heartbeatMs: opts.heartbeat, ttlMs: opts.heartbeat * 3 }).start());
    }
  }
  process.stderr.write(`${color.green('troupe')} ${hosts.length} agent instance(s) joined ${transport.name}: ${agents.map((a) => a.card.id).join(', ')}\n`);
  onShutdown(async () => {
    await Promise.all(hosts.map((h) => h.stop()));
    await transport.drain();
  });
}
