/** An in-process mesh: a node and a team's agents on one memory bus (the embedded default). */
import { AgentHost } from './agent-host.js';
import { TroupeClient } from '../sdk/client.js';
import type { Logger } from '../observability/logger.js';
import { TroupeNode } from './node.js';
import { nodeOptionsOf, type TeamDefinition } from '../sdk/team.js';
import { MemoryBus, MemoryTransport } from '../transport/memory.js';

export async function startEmbedded(team: TeamDefinition, logger: Logger, tenant = 'demo') {
  const bus = new MemoryBus();
  const nodeTransport = new MemoryTransport({ bus });
  const node = await new TroupeNode({ transport: nodeTransport, tenant, logger, ...nodeOptionsOf(team) }).start();
  const hosts = await Promise.all(team.agents.map((agent) => new AgentHost({ transport: new MemoryTransport({ bus }), agent, tenant, logger }).start()));
  await node.registry.waitFor(team.agents.map((a) => a.card.id));
  const client = new TroupeClient(new MemoryTransport({ bus }), tenant);
  return {
    node,
    client,
    stop: async () => {
      await Promise.all(hosts.map((h) => h.stop()));
      await node.stop();
    },
  };
}

