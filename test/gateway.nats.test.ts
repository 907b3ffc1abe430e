/**
 * The A2A gateway end to end over a real nats-server: a durable node in this process (JetStream inbound
 * stream, partition leases, KV thread store), the demo agents each logged in as its own restricted NATS
 * user, and the gateway on the restricted `client` user — the permissions an A2A front door runs with.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeClient } from '../src/sdk/client.js';
import { TroupeNode } from '../src/actors/node.js';
import demoTeam from '../src/bin/demo/team.js';
import { startGateway, type Gateway } from '../src/gateway/index.js';
import { TaskSchema, ThreadEventSchema, type Message, type Task } from '../src/protocol/index.js';
import { KvThreadStore } from '../src/store/kv.js';
import { NatsTransport } from '../src/transport/nats.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const PARTITIONS = 8;

let nats: NatsServerHandle;
let node: TroupeNode;
let store: KvThreadStore;
let gateway: Gateway;
const hosts: AgentHost[] = [];
const transports: NatsTransport[] = [];
const group = new ProcessGroup();

async function connect(name: string, user: string): Promise<NatsTransport> {
  const t = await NatsTransport.connect({ ...nats.as(user), name });
  transports.push(t);
  return t;
}

beforeAll(async () => {
  nats = await startNatsServer();
  const nodeT = await connect('gateway-test-node', 'node');
  store = await KvThreadStore.open(nodeT.connection);
  node = await new TroupeNode({ transport: nodeT, store, durable: { nc: nodeT.connection, partitions: PARTITIONS }, ...(demoTeam.config ? { config: demoTeam.config } : {}) }).start();
  for (const agent of demoTeam.agents) {
    const t = await connect(`gateway-test-${agent.card.id}`, agent.card.id);
    hosts.push(await new AgentHost({ transport: t, agent }).start());
  }
  await node.registry.waitFor(demoTeam.agents.map((a) => a.card.id));
  await waitUntil(() => ((node.ps().actors[0]?.detail?.['partitions'] as number[] | undefined) ?? []).length === PARTITIONS, 'the node to own every partition');
  const clientT = await connect('gateway-test-client', 'client');
  gateway = await startGateway({ clients: { demo: new TroupeClient(clientT, { tenant: 'demo', principal: 'client' }) }, turnTimeoutMs: 15_000 });
});

afterAll(async () => {
  await group.stopAll();
  await gateway?.close();
  await node?.stop();
  await Promise.all(hosts.map((h) => h.stop()));
  await store?.close();
  await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
  await nats?.stop();
});

const userMessage = (text: string, taskId?: string): Message => ({
  kind: 'message',
  role: 'user',
  messageId: randomUUID(),
  parts: [{ kind: 'text', text }],
  ...(taskId ? { taskId } : {}),
});
const textOf = (m: Message | undefined) => (m?.parts ?? []).flatMap((p) => (p.kind === 'text' ? [p.text] : [])).join('');

function post(method: string, params: unknown, url = gateway.url): Promise<Response> {
  return fetch(`${url}/`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }) });
}

async function task(method: string, params: unknown, url?: string): Promise<Task> {
  const body = (await (await post(method, params, url)).json()) as { result?: unknown; error?: unknown };
  expect(body.error).toBeUndefined();
  return TaskSchema.parse(body.result);
}

describe('A2A gateway over NATS with a durable node', () => {
  it('message/send runs a turn through JetStream ingress and the KV store, and continues it', async () => {
    const first = await task('message/send', { message: userMessage('Write about otters') });
    expect(first.status.state).toBe('input-required');
    expect(textOf(first.status.message)).toBe('Here is your piece. Facts on "Write about otters": 3 sources agree it is worth writing about.');
    // The record is in JetStream KV, committed before the answer went out.
    const stored = await store.get('demo', first.id);
    expect(stored?.record.task.history).toHaveLength(4);
    const second = await task('message/send', { message: userMessage('Is the sea cold?', first.id) });
    expect(second.id).toBe(first.id);
    expect(textOf(second.status.message)).toContain('Checked with researcher');
    expect((await task('tasks/get', { id: first.id })).history).toHaveLength(8);
  });

  it('message/stream delivers the chunks over SSE before the final status', async () => {
    const res = await post('message/stream', { message: userMessage('Write about herons') });
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const events = (await res.text())
      .split('\n\n')
      .filter((block) => block.startsWith('data: '))
      .map((block) => ThreadEventSchema.parse((JSON.parse(block.slice('data: '.length)) as { result: unknown }).result));
    const kinds = events.map((e) => e.kind);
    expect(kinds.filter((k) => k === 'artifact-update')).toHaveLength(4);
    expect(kinds.lastIndexOf('artifact-update')).toBeLessThan(kinds.length - 1);
    const last = events.at(-1);
    expect(last).toMatchObject({ kind: 'status-update', final: true, status: { state: 'input-required' } });
    expect(textOf(last?.kind === 'status-update' ? last.status.message : undefined)).toContain('Here is your piece.');
  });

  it('tasks/cancel reaches the owning node; the canceled record is in KV', async () => {
    const t = await task('message/send', { message: userMessage('Write about cranes') });
    expect((await task('tasks/cancel', { id: t.id })).status.state).toBe('canceled');
    expect((await store.get('demo', t.id))?.record.task.status.state).toBe('canceled');
    const again = (await (await post('tasks/cancel', { id: t.id })).json()) as { error?: { code: number } };
    expect(again.error?.code).toBe(-32002);
  });

  it('`troupe gateway --nats` serves the mesh as the restricted client user', async () => {
    const env = { TROUPE_NATS_CREDS: nats.credsFile('client') };
    const proc = await group.spawnTroupe(['gateway', '--nats', nats.url, '--port', '0', '--log-level', 'warn'], env, { ready: /gateway listening on http:\/\/\S+/ });
    const url = /gateway listening on (http:\/\/\S+)/.exec(proc.stderr)![1]!;
    const t = await task('message/send', { message: userMessage('Write about plovers') }, url);
    expect(t.status.state).toBe('input-required');
    expect(textOf(t.status.message)).toContain('Here is your piece.');
    expect((await store.get('demo', t.id))?.record.task.history).toHaveLength(4);
  });
});
