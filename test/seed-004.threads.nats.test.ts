/**
 * What operators see of stored threads, over a real nats-server and the gateway's diagnostics: seed 003's
 * TaskPersistenceRecord (`expiresAtUtc`: the last write plus the bucket's max age), seed 004's
 * ThreadContext in listings (when the thread began, the agent holding it, its open handoff and target, its
 * messages) and seed 003's AgentResolutionResult for local agents (`source: "local"` in `troupe ps` and in
 * the registry view). The handoff is the handoff demo team's: `main` passes the user to `skills`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { handoffTeam } from '../src/bin/demo/handoff-team.js';
import { startGateway, type Gateway } from '../src/gateway/index.js';
import { TroupeClient } from '../src/sdk/client.js';
import { KvThreadStore } from '../src/store/kv.js';
import { NatsTransport } from '../src/transport/nats.js';
import type { ThreadRow } from '../src/protocol/ctl.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { waitUntil } from './helpers/wait.js';

const OPERATOR = 'operator-token-seed-004-threads';
const TTL_MS = 2 * 60 * 60 * 1000;

let nats: NatsServerHandle;
let node: TroupeNode;
let store: KvThreadStore;
let gateway: Gateway;
let client: TroupeClient;
let operator: TroupeClient;
const hosts: AgentHost[] = [];
const transports: NatsTransport[] = [];

async function connect(name: string, user: string): Promise<NatsTransport> {
  const t = await NatsTransport.connect({ ...nats.as(user), name });
  transports.push(t);
  return t;
}

beforeAll(async () => {
  nats = await startNatsServer();
  const nodeT = await connect('seed-004-node', 'node');
  store = await KvThreadStore.open(nodeT.connection, { ttlMs: TTL_MS });
  node = await new TroupeNode({ transport: nodeT, store, durable: { nc: nodeT.connection, partitions: 8 }, config: handoffTeam.config }).start();
  for (const agent of handoffTeam.agents.filter((a) => ['main', 'skills'].includes(a.card.id))) {
    hosts.push(await new AgentHost({ transport: await connect(`seed-004-${agent.card.id}`, agent.card.id), agent }).start());
  }
  await node.registry.waitFor(['main', 'skills']);
  await waitUntil(() => ((node.ps().actors[0]?.detail?.['partitions'] as number[] | undefined) ?? []).length === 8, 'the node to own every partition');
  client = new TroupeClient(await connect('seed-004-client', 'client'), { tenant: 'demo', principal: 'client' });
  operator = new TroupeClient(await connect('seed-004-operator', 'operator'), { tenant: 'demo', principal: 'operator' });
  gateway = await startGateway({ clients: { demo: client }, diagnostics: { token: OPERATOR, client: operator } });
});

afterAll(async () => {
  await gateway?.close();
  await node?.stop();
  await Promise.all(hosts.map((h) => h.stop()));
  await store?.close();
  await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
  await nats?.stop();
});

const diagnostics = async (path: string) => {
  const res = await fetch(`${gateway.diagnosticsUrl}${path}`, { headers: { authorization: `Bearer ${OPERATOR}` } });
  expect(res.status).toBe(200);
  return res.json() as Promise<unknown>;
};

describe('stored threads as operators see them', () => {
  it('lists a thread with when it began, the agent holding it, its open handoff and its messages; its record says when it expires', async () => {
    const before = Date.now();
    const plain = await client.send('hello there', { timeoutMs: 15_000 });
    expect(plain.text).toBe('main: hello there');
    const handed = await client.send('I want to build a skill', { timeoutMs: 15_000 });
    expect(handed.error).toBeUndefined();

    const { threads } = (await diagnostics('/threads')) as { threads: ThreadRow[] };
    const rowOf = (id: string) => threads.find((t) => t.threadId === id);
    expect(rowOf(plain.threadId)).toMatchObject({ currentActiveAgent: 'main', isHandoffActive: false, totalMessages: 2 });
    expect(rowOf(plain.threadId)?.handoffTargetAgent).toBeUndefined();
    // The handoff is open: skills holds the conversation.
    expect(rowOf(handed.threadId)).toMatchObject({ currentActiveAgent: 'skills', isHandoffActive: true, handoffTargetAgent: 'skills' });
    expect(rowOf(handed.threadId)?.totalMessages).toBeGreaterThanOrEqual(2);
    for (const row of [rowOf(plain.threadId)!, rowOf(handed.threadId)!]) {
      const created = Date.parse(row.createdAt!);
      expect(created).toBeGreaterThanOrEqual(before);
      expect(created).toBeLessThanOrEqual(Date.parse(row.updatedAt));
    }

    const view = (await diagnostics(`/threads/${handed.threadId}`)) as { revision: number; expiresAtUtc: string; record: { updatedAt: string } };
    expect(Date.parse(view.expiresAtUtc)).toBe(Date.parse(view.record.updatedAt) + TTL_MS);
    expect(view.expiresAtUtc).toMatch(/Z$/);
  });

  it('reports local agents as `source: "local"` in `troupe ps` and in the registry view', async () => {
    const agents = (await operator.ps()).flatMap((r) => r.actors).filter((a) => a.kind === 'agent' && a.id === 'main');
    expect(agents[0]?.detail).toMatchObject({ source: 'local' });
    expect(agents[0]?.detail?.['endpoint']).toBeUndefined();
    const inspected = await operator.inspect('main');
    expect(inspected?.context).toMatchObject({ instances: [{ status: { detail: { source: 'local' } } }] });
  });
});
