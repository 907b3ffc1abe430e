/**
 * An embedded mesh for the dormant-thread suites: a node with `dormantMs` and `idleMs` on a memory bus and
 * a memory store that counts the records it is asked for (a wake from memory reads none), `agents` each on
 * its own host, and a client. `stops` collects what to stop after the test.
 */
import { AgentHost } from '../../src/actors/agent-host.js';
import { TroupeNode } from '../../src/actors/node.js';
import type { ThreadConfig } from '../../src/machines/thread.js';
import type { AgentDefinition } from '../../src/sdk/agent.js';
import { TroupeClient } from '../../src/sdk/client.js';
import { MemoryThreadStore } from '../../src/store/memory.js';
import type { StoredThread } from '../../src/store/types.js';
import { MemoryBus, MemoryTransport } from '../../src/transport/memory.js';

export const TENANT = 'demo';

export class CountingStore extends MemoryThreadStore {
  gets = 0;
  override async get(tenant: string, threadId: string): Promise<StoredThread | undefined> {
    this.gets++;
    return super.get(tenant, threadId);
  }
}

export async function dormantMesh(
  stops: Array<() => Promise<void>>,
  agents: AgentDefinition[],
  opts: { dormantMs: number; idleMs?: number; store?: CountingStore; nodeId?: string; config: Partial<ThreadConfig> },
) {
  const bus = new MemoryBus();
  const store = opts.store ?? new CountingStore();
  const node = await new TroupeNode({
    transport: new MemoryTransport({ bus }),
    tenant: TENANT,
    store,
    idleMs: opts.idleMs ?? 0,
    dormantMs: opts.dormantMs,
    ...(opts.nodeId ? { nodeId: opts.nodeId } : {}),
    config: opts.config,
  }).start();
  stops.push(() => node.stop());
  for (const agent of agents) {
    const host = await new AgentHost({ transport: new MemoryTransport({ bus }), agent, tenant: TENANT }).start();
    stops.push(() => host.stop());
  }
  await node.registry.waitFor(agents.map((a) => a.card.id));
  const client = new TroupeClient(new MemoryTransport({ bus }), TENANT);
  return { bus, store, node, threads: node.threads, client };
}
