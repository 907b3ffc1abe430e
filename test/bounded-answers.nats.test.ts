/**
 * Answers within the bus's max_payload, for data the system itself accepted (issue 46, point 5): a page of
 * large tasks, and an operator's view of a thread that redaction makes longer than it was stored. Over a
 * real nats-server in operator mode (1 MiB max_payload), a durable node, an echo agent on its own user and
 * the A2A gateway on the `gateway` principal, over real HTTP.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { startGateway, type Gateway } from '../src/gateway/index.js';
import { META } from '../src/protocol/metadata.js';
import { byteLength, fitTask } from '../src/actors/reply-fit.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { KvThreadStore } from '../src/store/kv.js';
import { NatsTransport } from '../src/transport/nats.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { send, userText, v1Client } from './helpers/a2a.js';
import { waitUntil } from './helpers/wait.js';

const PARTITIONS = 8;
const ALICE = 'alice-token-0123456789';
const MAX_PAYLOAD = 1024 * 1024;

let nats: NatsServerHandle;
let node: TroupeNode;
let store: KvThreadStore;
let gateway: Gateway;
let operator: TroupeClient;
let client: TroupeClient;
const hosts: AgentHost[] = [];
const transports: NatsTransport[] = [];

const echo = defineAgent({
  card: { id: 'echo', name: 'Echo', description: 'Repeats what it is told' },
  handle: (_message, ctx) => reply(ctx.text, { to: 'user' }),
});

async function connect(name: string, user: string): Promise<NatsTransport> {
  const t = await NatsTransport.connect({ ...nats.as(user), name });
  transports.push(t);
  return t;
}

beforeAll(async () => {
  nats = await startNatsServer();
  const nodeT = await connect('bounded-node', 'node');
  store = await KvThreadStore.open(nodeT.connection);
  node = await new TroupeNode({
    transport: nodeT,
    store,
    durable: { nc: nodeT.connection, partitions: PARTITIONS },
    config: { entryAgent: 'echo', agentTimeoutMs: 30_000 },
  }).start();
  hosts.push(await new AgentHost({ transport: await connect('bounded-echo', 'echo'), agent: echo }).start());
  await node.registry.waitFor(['echo']);
  await waitUntil(() => ((node.ps().actors[0]?.detail?.['partitions'] as number[] | undefined) ?? []).length === PARTITIONS, 'the node to own every partition');
  client = new TroupeClient(await connect('bounded-client', 'gateway'), { tenant: 'demo', principal: 'gateway' });
  operator = new TroupeClient(await connect('bounded-operator', 'operator'), { tenant: 'demo', principal: 'operator' });
  gateway = await startGateway({ clients: { demo: client }, tokens: { [ALICE]: { tenant: 'demo', user: 'alice' } }, turnTimeoutMs: 30_000 });
}, 60_000);

afterAll(async () => {
  await gateway?.close();
  await node?.stop();
  await Promise.all(hosts.map((h) => h.stop()));
  await store?.close();
  await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
  await nats?.stop();
});

interface ListResult {
  tasks: Array<{ id: string; history?: unknown[]; metadata?: Record<string, unknown> }>;
  nextPageToken: string;
}

describe('answers within max_payload', () => {
  it("a user's task list of five 200 KB conversations comes back a page at a time, each page under max_payload, every task once", async () => {
    const big = (i: number) => `${i} ${'x'.repeat(200 * 1024)}`;
    const alice = await v1Client(gateway.url, { token: ALICE });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const task = (await alice.sendMessage(send(userText(big(i))))) as { id: string };
      ids.push(task.id);
    }
    const seen: string[] = [];
    let pageToken = '';
    let pages = 0;
    do {
      const res = await fetch(`${gateway.url}/`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ALICE}`, 'a2a-version': '1.0' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ListTasks', params: { pageSize: 50, ...(pageToken ? { pageToken } : {}) } }),
      });
      const body = (await res.json()) as { result?: ListResult; error?: unknown };
      expect({ status: res.status, error: body.error }).toEqual({ status: 200, error: undefined });
      const page = body.result!;
      expect(page.tasks.length).toBeGreaterThan(0);
      seen.push(...page.tasks.map((t) => t.id));
      pageToken = page.nextPageToken;
      pages++;
      expect(pages, 'pages').toBeLessThanOrEqual(5);
    } while (pageToken);
    expect([...seen].sort()).toEqual([...ids].sort());
    expect(pages, 'more than one page: five of them do not fit in one answer').toBeGreaterThan(1);
  }, 180_000);

  it("an operator's view of a thread that redaction makes longer than max_payload comes back, its oldest messages left out and said so", async () => {
    // Each "a@b.io" is masked as "[redacted]": the view is about 1.6 times the stored record.
    const emails = (i: number) => `turn ${i}: ${'a@b.io '.repeat(29_000)}`;
    const threadId = `redacted-${Date.now()}`;
    for (let i = 0; i < 2; i++) expect((await client.send(emails(i), { threadId, timeoutMs: 60_000 })).text).toBe(emails(i));
    const stored = await store.get('demo', threadId);
    expect(stored?.record.task.history).toHaveLength(4);
    // Masking 800 KB of e-mail addresses is CPU work: a busy machine takes longer than the default 10 s.
    const view = await operator.ctl('thread', { threadId }, { timeoutMs: 120_000 });
    const history = view.record.task.history ?? [];
    const omitted = view.record.task.metadata?.[META.omitted] as { messages?: number; reason: string; budgetBytes: number } | undefined;
    expect(omitted).toMatchObject({ reason: 'max_payload' });
    expect(omitted!.budgetBytes).toBeLessThan(MAX_PAYLOAD);
    expect(history.length + (omitted!.messages ?? 0)).toBe(4);
    // The newest message is kept, masked.
    const last = history.at(-1)!;
    expect(last.role).toBe('agent');
    expect(last.parts[0]!.text!.startsWith('turn 1: [redacted] [redacted]')).toBe(true);
  }, 180_000);
});

describe('fitTask', () => {
  it('cuts the texts of a task whose one message alone is over the budget, and says so', () => {
    const task = {
      id: 't',
      history: [
        { role: 'user', parts: [{ kind: 'text', text: 'é'.repeat(30_000) }] },
        { role: 'agent', parts: [{ kind: 'text', text: 'ok' }] },
      ],
      metadata: {} as Record<string, unknown>,
    };
    const fitted = fitTask(task, 20_000);
    expect(byteLength(fitted)).toBeLessThanOrEqual(20_000);
    expect(fitted.metadata[META.omitted]).toMatchObject({ messages: 1, reason: 'max_payload', budgetBytes: 20_000 });
    expect(fitted.history).toEqual([task.history[1]]);
    // The status message alone over the budget: its text is cut (on a character boundary) and marked.
    const status = { state: 'completed', message: { role: 'agent', parts: [{ kind: 'text', text: 'é'.repeat(30_000) }] } };
    const alone = fitTask({ id: 't', status, history: [], metadata: {} as Record<string, unknown> }, 20_000);
    expect(byteLength(alone)).toBeLessThanOrEqual(20_000);
    expect(alone.metadata[META.omitted]).toMatchObject({ cutParts: 1 });
    const text = alone.status.message.parts[0]!.text;
    expect(text).toMatch(/^é+…$/);
  });
});
