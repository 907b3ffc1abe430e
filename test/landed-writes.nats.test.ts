/**
 * A thread record write that the server took but whose answer came too late (the call timed out: a slow
 * cluster, a stalled process) is the node's own write. Retried on the revision the node knew, it is
 * refused as a conflict; the node reads the record, sees its own write, and writes on its revision. Before,
 * it took the refusal for another node's write and dropped the live thread (the turn was then redelivered
 * and the thread read back from the store).
 *
 * Real nats-server, real KV bucket; the stall is the process's own (a busy loop right after the write went
 * out, past the JetStream client's 5 s timeout), as a long GC pause or an overloaded machine makes it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { KvThreadStore } from '../src/store/kv.js';
import type { ThreadRecord, ThreadStore } from '../src/store/types.js';
import { NatsTransport } from '../src/transport/nats.js';
import { capturingLogger } from './helpers/log-lines.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { overriding, stallAfterSending } from './helpers/stall.js';

/** Past the JetStream client's default request timeout (5 s), which the thread store uses. */
const STALL_MS = 5_300;

describe('a thread write that timed out but landed', () => {
  let nats: NatsServerHandle;
  let node: TroupeNode;
  let kv: KvThreadStore;
  const transports: NatsTransport[] = [];
  const { lines, log } = capturingLogger('info');
  /** The next create or update (by name) stalls the process once it has gone out. */
  const stallNext = new Set<'create' | 'update'>();

  const stallAfter = async <T>(op: 'create' | 'update', call: Promise<T>): Promise<T> => {
    if (stallNext.delete(op)) await stallAfterSending(STALL_MS);
    return call;
  };

  beforeAll(async () => {
    nats = await startNatsServer();
    const nodeT = await NatsTransport.connect({ ...nats.as('node'), name: 'landed-node' });
    const agentT = await NatsTransport.connect({ ...nats.as('echo'), name: 'landed-echo' });
    transports.push(nodeT, agentT);
    kv = await KvThreadStore.open(nodeT.connection);
    const store: ThreadStore = overriding<ThreadStore>(kv, {
      create: (record: ThreadRecord) => stallAfter('create', kv.create(record)),
      update: (record: ThreadRecord, revision: number) => stallAfter('update', kv.update(record, revision)),
    });
    const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'Echoes' }, handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }) });
    await new AgentHost({ transport: agentT, agent: echo, heartbeatMs: 500 }).start();
    // Leases of 30 s: the stall must not outlast them (the node would give its partitions up).
    node = await new TroupeNode({
      transport: nodeT,
      store,
      logger: log,
      durable: { nc: nodeT.connection, partitions: 8, leaseTtlMs: 30_000 },
      config: { entryAgent: 'echo' },
    }).start();
    await node.registry.waitFor(['echo']);
  }, 60_000);

  afterAll(async () => {
    await node?.stop();
    await kv?.close();
    await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
    await nats?.stop();
  });

  it("is the node's own: the thread is written on, not dropped, on its first write (create) and a later one (update)", async () => {
    const client = new TroupeClient(await NatsTransport.connect({ ...nats.as('client'), name: 'landed-client' }).then((t) => (transports.push(t), t)), {
      tenant: 'demo',
      principal: 'client',
    });

    stallNext.add('create');
    const first = await client.send('one', { timeoutMs: 30_000 });
    expect(first.text).toBe('echo: one');
    stallNext.add('update');
    const second = await client.send('two', { threadId: first.threadId, timeoutMs: 30_000 });
    expect(second.text).toBe('echo: two');
    expect(stallNext.size).toBe(0);

    const msgs = lines.map((l) => l.msg);
    // Each stalled write timed out, was retried, refused, and recognised as the node's own.
    expect(msgs.filter((m) => m === 'could not commit thread state; retrying')).toHaveLength(2);
    expect(lines.filter((l) => l.msg === 'a write of this thread that timed out had landed; writing on its revision').map((l) => l.thread)).toEqual([
      first.threadId,
      first.threadId,
    ]);
    expect(msgs).not.toContain('could not commit thread state; dropping the live actor');
    // One turn each, both in the record; the live thread was never dropped and read back.
    const stored = await kv.get('demo', first.threadId);
    expect(stored?.record.task.history?.map((m) => m.parts.map((p) => (p.kind === 'text' ? p.text : '')).join(''))).toEqual([
      'one',
      'echo: one',
      'two',
      'echo: two',
    ]);
    expect(stored?.record.node).toBe(node.nodeId);
  }, 60_000);
});
