/** An in-process mesh: a node and a team's agents on one memory bus (the embedded default). */
import { AgentHost } from '../actors/agent-host.js';
import { TroupeClient } from '../sdk/client.js';
import type { Logger } from '../observability/logger.js';
import { TroupeNode } from '../actors/node.js';
import { nodeOptionsOf, type TeamDefinition } from './team.js';
import { MemoryBus, MemoryTransport } from '../transport/memory.js';

/** `opts.inspect`: the node and the agents publish inspection records from the start (the studio). */
export async function startEmbedded(team: TeamDefinition, logger: Logger, tenant = 'demo', opts: { inspect?: boolean } = {}) {
  const bus = new MemoryBus();
  const nodeTransport = new MemoryTransport({ bus });
  // No broker in-process: every principal on the bus is this process, so any may name a user.
  const node = await new TroupeNode({
    transport: nodeTransport,
    tenant,
    logger,
    userAssertion: 'any',
    ...nodeOptionsOf(team),
    ...(opts.inspect ? { inspect: true } : {}),
  }).start();
  const hosts = await Promise.all(
    team.agents.map((agent) =>
      new AgentHost({ transport: new MemoryTransport({ bus }), agent, tenant, logger, ...(opts.inspect ? { inspect: true } : {}) }).start(),
    ),
  );
  await node.registry.waitFor(team.agents.map((a) => a.card.id));
  const client = new TroupeClient(new MemoryTransport({ bus }), tenant);
  return {
    node,
    client,
    /** The mesh's bus: `new MemoryTransport({ bus })` is another connection to it (the studio's). */
    bus,
    stop: async () => {
      await Promise.all(hosts.map((h) => h.stop()));
      await node.stop();
    },
  };
}
