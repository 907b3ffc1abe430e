/**
 * The A2A gateway end to end over a real nats-server in operator mode: a durable node in this process
 * (JetStream inbound stream, partition leases, KV thread store), the demo agents and a slow one each
 * logged in as their own restricted NATS user, two gateways on the restricted `gateway` principal serving
 * users alice and bob, and diagnostics on the `operator` user's credentials. Real A2A clients only.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TaskState, type Task as SdkTask } from '@a2a-js/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeClient } from '../src/sdk/client.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeNode } from '../src/actors/node.js';
import demoTeam from '../src/bin/demo/team.js';
import { startGateway, type Gateway } from '../src/gateway/index.js';
import { CLIENT_ROUTING_URI } from '../src/protocol/routing.js';
import { KvThreadStore } from '../src/store/kv.js';
import { NatsTransport } from '../src/transport/nats.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup } from './helpers/processes.js';
import { waitFor, waitUntil } from './helpers/wait.js';
import { collect, rpc, send, textOf, userText, v03Client, v03Text, v1Client } from './helpers/a2a.js';

const PARTITIONS = 8;
const ALICE = 'alice-token-0123456789';
const BOB = 'bob-token-0123456789abc';
const OPERATOR = 'operator-token-0123456789';
const TOKENS = { [ALICE]: { tenant: 'demo', user: 'alice' }, [BOB]: { tenant: 'demo', user: 'bob' } };

let nats: NatsServerHandle;
let node: TroupeNode;
let store: KvThreadStore;
let gateway: Gateway;
/** A second gateway on the same principal: nothing a task needs lives in one gateway. */
let second: Gateway;
const hosts: AgentHost[] = [];
const transports: NatsTransport[] = [];
const group = new ProcessGroup();

let openGate: () => void = () => undefined;
let gate = Promise.resolve();
const sloth = defineAgent({
  card: { id: 'sloth', name: 'Sloth', description: 'Streams a word, then waits for the test', capabilities: { streaming: true } },
  async *handle(_message, ctx) {
    yield 'Yawning ';
    await gate;
    return reply(`awake: ${ctx.text}`, { to: 'user' });
  },
});

async function connect(name: string, user: string): Promise<NatsTransport> {
  const t = await NatsTransport.connect({ ...nats.as(user), name });
  transports.push(t);
  return t;
}

beforeAll(async () => {
  nats = await startNatsServer();
  const nodeT = await connect('gateway-test-node', 'node');
  store = await KvThreadStore.open(nodeT.connection);
  node = await new TroupeNode({
    transport: nodeT,
    store,
    durable: { nc: nodeT.connection, partitions: PARTITIONS },
    config: { ...demoTeam.config, agentTimeoutMs: 20_000 },
  }).start();
  for (const agent of [...demoTeam.agents, sloth]) {
    const t = await connect(`gateway-test-${agent.card.id}`, agent.card.id);
    hosts.push(await new AgentHost({ transport: t, agent }).start());
  }
  await node.registry.waitFor([...demoTeam.agents, sloth].map((a) => a.card.id));
  await waitUntil(() => ((node.ps().actors[0]?.detail?.['partitions'] as number[] | undefined) ?? []).length === PARTITIONS, 'the node to own every partition');
  const client = new TroupeClient(await connect('gateway-test-client', 'gateway'), { tenant: 'demo', principal: 'gateway' });
  const operator = new TroupeClient(await connect('gateway-test-operator', 'operator'), { tenant: 'demo', principal: 'operator' });
  gateway = await startGateway({
    clients: { demo: client },
    tokens: TOKENS,
    turnTimeoutMs: 20_000,
    diagnostics: { token: OPERATOR, client: operator, partitions: PARTITIONS },
  });
  const client2 = new TroupeClient(await connect('gateway-test-client-2', 'gateway'), { tenant: 'demo', principal: 'gateway' });
  second = await startGateway({ clients: { demo: client2 }, tokens: TOKENS, turnTimeoutMs: 20_000 });
});

afterAll(async () => {
  openGate();
  await group.stopAll();
  await Promise.all([gateway?.close(), second?.close()]);
  await node?.stop();
  await Promise.all(hosts.map((h) => h.stop()));
  await store?.close();
  await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
  await nats?.stop();
});

function taskOf(result: unknown): SdkTask {
  if (!result || typeof result !== 'object' || !('status' in result)) throw new Error(`expected a Task, got ${JSON.stringify(result)}`);
  return result as SdkTask;
}

describe('A2A gateway over NATS with a durable node', () => {
  it('A2A 1.0: a turn through JetStream ingress and the KV store, owned by gateway/alice; continued; the record is in KV', async () => {
    const alice = await v1Client(gateway.url, { token: ALICE });
    const first = taskOf(await alice.sendMessage(send(userText('Write about otters'))));
    expect(first.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED);
    expect(textOf(first.status?.message?.parts)).toBe('Here is your piece. Facts on "Write about otters": 3 sources agree it is worth writing about.');
    expect(first.metadata).toMatchObject({ agentsUsed: ['triage', 'researcher', 'writer'], taskState: 'fresh' });
    const stored = await store.get('demo', first.id);
    expect(stored?.record.task.history).toHaveLength(4);
    expect(stored?.record.task.metadata?.['troupe/owner']).toBe('gateway/alice');
    const second = taskOf(await alice.sendMessage(send(userText('Is the sea cold?', { taskId: first.id }))));
    expect(second.id).toBe(first.id);
    expect(textOf(second.status?.message?.parts)).toContain('Checked with researcher');
    expect((await alice.getTask({ tenant: '', id: first.id })).history).toHaveLength(8);
  });

  it('streams chunks before the final status; the Task first; artifacts accumulate', async () => {
    const alice = await v1Client(gateway.url, { token: ALICE });
    const events = await collect(alice.sendMessageStream(send(userText('Write about herons'))));
    const cases = events.map((e) => e.payload?.$case);
    expect(cases[0]).toBe('task');
    expect(cases.filter((c) => c === 'artifactUpdate')).toHaveLength(4);
    expect(cases.at(-1)).toBe('statusUpdate');
    const taskId = events[0]?.payload?.$case === 'task' ? events[0].payload.value.id : '';
    expect(textOf((await alice.getTask({ tenant: '', id: taskId })).artifacts[0]?.parts)).toBe('Here is your piece. ');
  });

  it('A2A 0.3: send, get, cancel reaches the owning node (canceled in KV), a second cancel is -32002', async () => {
    const client = await v03Client(gateway.url, { token: ALICE });
    const sent = await client.sendMessage({ message: v03Text('Write about cranes') });
    if (sent.kind !== 'task') throw new Error('expected a task');
    expect((await client.cancelTask({ id: sent.id })).status.state).toBe('canceled');
    expect((await store.get('demo', sent.id))?.record.task.status.state).toBe('canceled');
    const again = await rpc(gateway.url, 'tasks/cancel', { id: sent.id }, { token: ALICE });
    expect(again.body.error?.code).toBe(-32002);
  });

  it("user bob cannot see alice's task: the answer is the one for a task that does not exist", async () => {
    const alice = await v1Client(gateway.url, { token: ALICE });
    const task = taskOf(await alice.sendMessage(send(userText('Write about lynx'))));
    const missing = await rpc(gateway.url, 'GetTask', { id: 't-never-existed' }, { token: BOB, version: '1.0' });
    const foreign = await rpc(gateway.url, 'GetTask', { id: task.id }, { token: BOB, version: '1.0' });
    expect(foreign.body.error?.code).toBe(-32001);
    expect(JSON.stringify(foreign.body.error).replace(task.id, 'ID')).toBe(JSON.stringify(missing.body.error).replace('t-never-existed', 'ID'));
    const cancel = await rpc(gateway.url, 'CancelTask', { id: task.id }, { token: BOB, version: '1.0' });
    expect(cancel.body.error?.code).toBe(-32001);
    expect((await store.get('demo', task.id))?.record.task.status.state).toBe('input-required');
  });

  it('a context started on one gateway continues on another (the node answers which task is open)', async () => {
    const one = await v1Client(gateway.url, { token: ALICE });
    const two = await v1Client(second.url, { token: ALICE });
    const first = taskOf(await one.sendMessage(send(userText('Write about puffins'))));
    const continued = taskOf(await two.sendMessage(send(userText('and gannets?', { contextId: first.contextId }))));
    expect(continued.id).toBe(first.id);
    expect(continued.metadata?.['taskState']).toBe('resumed');
    // Bob's message in the same context id is bob's own task.
    const bob = await v1Client(second.url, { token: BOB });
    expect(taskOf(await bob.sendMessage(send(userText('Write about gulls', { contextId: first.contextId })))).id).not.toBe(first.id);
  });

  it('resubscribe on another gateway follows a turn started on the first, until its final status', async () => {
    gate = new Promise<void>((resolve) => (openGate = resolve));
    const one = await v1Client(gateway.url, { token: ALICE });
    const stream = one.sendMessageStream(send(userText('wake up', { metadata: { [CLIENT_ROUTING_URI]: { recipient: 'sloth' } } })))[Symbol.asyncIterator]();
    const first = await stream.next();
    if (first.value?.payload?.$case !== 'task') throw new Error('the first event is not the Task');
    const taskId = first.value.payload.value.id;
    for (;;) {
      const next = await stream.next();
      if (next.done) throw new Error('stream ended early');
      if (next.value.payload?.$case === 'artifactUpdate') break;
    }
    const legacy = await v03Client(second.url, { token: ALICE });
    const events: Array<{ kind: string; state?: string }> = [];
    const following = (async () => {
      for await (const event of legacy.resubscribeTask({ id: taskId }))
        events.push({ kind: event.kind, ...(event.kind === 'status-update' || event.kind === 'task' ? { state: event.status.state } : {}) });
    })();
    await waitFor(() => events.length > 0, 'the resubscriber to get the task');
    expect(events[0]).toEqual({ kind: 'task', state: 'working' });
    openGate();
    // The turn ends waiting for input: the subscription shows it and goes on until the task ends.
    await waitFor(() => events.some((e) => e.state === 'input-required'), "the turn's final status on the resubscribed stream");
    for (;;) if ((await stream.next()).done) break;
    await one.cancelTask({ tenant: '', id: taskId, metadata: undefined });
    await following;
    expect(events.at(-1)).toEqual({ kind: 'status-update', state: 'canceled' });
  });

  it('a messageId reused in another task is answered at once there (de-duplication is per thread)', async () => {
    const alice = await v1Client(gateway.url, { token: ALICE });
    const first = taskOf(await alice.sendMessage(send(userText('Write about voles', { messageId: 'nats-reused-1' }))));
    const second = taskOf(await alice.sendMessage(send(userText('Write about shrews', { messageId: 'nats-reused-1' }))));
    expect(second.id).not.toBe(first.id);
    expect(textOf(second.status?.message?.parts)).toContain('Write about shrews');
  });
});

describe('ListTasks: a user lists only their own tasks', () => {
  it("newest update first, paged, by state and by context; never another user's; over JSON-RPC and REST", async () => {
    // Users of their own, so the other tests' tasks do not count.
    const carolToken = 'carol-token-0123456789';
    const daveToken = 'dave-token-0123456789ab';
    const tokens = { [carolToken]: { tenant: 'demo', user: 'carol' }, [daveToken]: { tenant: 'demo', user: 'dave' } };
    const client = new TroupeClient(await connect('gateway-test-list', 'gateway'), { tenant: 'demo', principal: 'gateway' });
    const gw = await startGateway({ clients: { demo: client }, tokens, turnTimeoutMs: 20_000 });
    try {
      const carol = await v1Client(gw.url, { token: carolToken });
      const dave = await v1Client(gw.url, { token: daveToken });
      const made: string[] = [];
      const contexts: string[] = [];
      for (const text of ['Write about otters', 'Write about voles', 'Write about shrews']) {
        const task = taskOf(await carol.sendMessage(send(userText(text))));
        made.push(task.id);
        contexts.push(task.contextId);
      }
      const daves = taskOf(await dave.sendMessage(send(userText('Write about moles')))).id;
      // The first task gets a second turn: it becomes the most recently updated.
      await carol.sendMessage(send(userText('Is the sea cold?', { taskId: made[0]! })));

      const all = await carol.listTasks({
        tenant: '',
        contextId: '',
        status: TaskState.TASK_STATE_UNSPECIFIED,
        pageSize: 10,
        pageToken: '',
        statusTimestampAfter: undefined,
      });
      expect(all.tasks.map((t) => t.id)).toEqual([made[0], made[2], made[1]]);
      expect(all.totalSize).toBe(3);
      expect(all.nextPageToken).toBe('');
      expect(all.tasks.every((t) => t.status?.state === TaskState.TASK_STATE_INPUT_REQUIRED)).toBe(true);

      // Two pages of two and one.
      const first = await carol.listTasks({
        tenant: '',
        contextId: '',
        status: TaskState.TASK_STATE_UNSPECIFIED,
        pageSize: 2,
        pageToken: '',
        statusTimestampAfter: undefined,
      });
      expect(first.tasks.map((t) => t.id)).toEqual([made[0], made[2]]);
      expect(first.nextPageToken).not.toBe('');
      const rest = await carol.listTasks({
        tenant: '',
        contextId: '',
        status: TaskState.TASK_STATE_UNSPECIFIED,
        pageSize: 2,
        pageToken: first.nextPageToken,
        statusTimestampAfter: undefined,
      });
      expect(rest.tasks.map((t) => t.id)).toEqual([made[1]]);
      expect(rest.nextPageToken).toBe('');

      // By the context the client was given, and by state.
      expect(all.tasks.map((t) => t.contextId)).toEqual([contexts[0], contexts[2], contexts[1]]);
      const ctx = await carol.listTasks({
        tenant: '',
        contextId: contexts[1]!,
        status: TaskState.TASK_STATE_UNSPECIFIED,
        pageSize: 10,
        pageToken: '',
        statusTimestampAfter: undefined,
      });
      expect(ctx.tasks.map((t) => t.id)).toEqual([made[1]]);
      const done = await carol.listTasks({
        tenant: '',
        contextId: '',
        status: TaskState.TASK_STATE_COMPLETED,
        pageSize: 10,
        pageToken: '',
        statusTimestampAfter: undefined,
      });
      expect(done.tasks).toEqual([]);

      // Dave sees his one task; another user's context is simply empty.
      const his = await dave.listTasks({
        tenant: '',
        contextId: '',
        status: TaskState.TASK_STATE_UNSPECIFIED,
        pageSize: 10,
        pageToken: '',
        statusTimestampAfter: undefined,
      });
      expect(his.tasks.map((t) => t.id)).toEqual([daves]);
      const notHis = await dave.listTasks({
        tenant: '',
        contextId: contexts[0]!,
        status: TaskState.TASK_STATE_UNSPECIFIED,
        pageSize: 10,
        pageToken: '',
        statusTimestampAfter: undefined,
      });
      expect(notHis.tasks).toEqual([]);

      // REST, and a page token this mesh never gave out.
      const rest1 = await v1Client(gw.url, { token: daveToken, rest: true });
      const viaRest = await rest1.listTasks({
        tenant: '',
        contextId: '',
        status: TaskState.TASK_STATE_UNSPECIFIED,
        pageSize: 10,
        pageToken: '',
        statusTimestampAfter: undefined,
      });
      expect(viaRest.tasks.map((t) => t.id)).toEqual([daves]);
      await expect(
        carol.listTasks({
          tenant: '',
          contextId: '',
          status: TaskState.TASK_STATE_UNSPECIFIED,
          pageSize: 10,
          pageToken: 'not-a-token',
          statusTimestampAfter: undefined,
        }),
      ).rejects.toThrow(/pageToken/);
    } finally {
      await gw.close();
    }
  });
});

describe('diagnostics with operator credentials', () => {
  const diag = (path: string, token = OPERATOR, method = 'GET') =>
    fetch(`${gateway.diagnosticsUrl}${path}`, { method, headers: { authorization: `Bearer ${token}` } });

  it('ready: NATS connected, every partition owned, the store reachable, the agents seen', async () => {
    const res = await diag('/ready');
    const body = (await res.json()) as { ready: boolean; checks: Record<string, { ok: boolean; owned?: number[]; seen?: string[] }> };
    expect(res.status).toBe(200);
    expect(body.checks.partitions?.owned).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(body.checks.store?.ok).toBe(true);
    expect(body.checks.agents?.seen).toEqual(expect.arrayContaining(['triage', 'researcher', 'writer', 'sloth']));
    expect((await diag('/ready', ALICE)).status).toBe(401);
  });

  it('the task view (redacted), the routing log and rehydrate go through the operator user', async () => {
    const alice = await v1Client(gateway.url, { token: ALICE });
    const task = taskOf(await alice.sendMessage(send(userText('Write about tides, my card is 4111 1111 1111 1111 and mail a@b.example'))));
    const view = (await (await diag(`/threads/${task.id}`)).json()) as { record: unknown };
    expect(JSON.stringify(view)).not.toContain('a@b.example');
    const routes = (await (await diag('/routes?limit=100')).json()) as { threads: Array<{ threadId: string; steps: Array<{ to: string }> }> };
    expect(routes.threads.find((t) => t.threadId === task.id)?.steps.map((s) => s.to)).toEqual(['triage', 'researcher', 'writer']);
    expect(((await (await diag(`/threads/${task.id}/rehydrate`, OPERATOR, 'POST')).json()) as { state: string }).state).toBe('input-required');
  });

  it('the gateway user cannot reach ctl itself: the gateway role is refused by the broker', async () => {
    const clientOnly = new TroupeClient(await connect('gateway-test-client-ctl', 'gateway'), { tenant: 'demo', principal: 'gateway' });
    await expect(clientOnly.ctl('threads', { limit: 1 })).rejects.toThrow();
  });
});

describe('`troupe gateway --nats`', () => {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-gateway-nats-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('serves the mesh as the restricted gateway user, with diagnostics on the operator credentials', async () => {
    const tokens = join(dir, 'tokens.json');
    writeFileSync(tokens, JSON.stringify(TOKENS));
    const env = { TROUPE_NATS_CREDS: nats.credsFile('gateway') };
    const proc = await group.spawnTroupe(
      [
        'gateway',
        '--nats',
        nats.url,
        '--port',
        '0',
        '--tokens',
        tokens,
        '--operator-token',
        OPERATOR,
        '--operator-creds',
        nats.credsFile('operator'),
        '--log-level',
        'warn',
      ],
      env,
      { ready: /diagnostics: \S+/ },
    );
    const url = /gateway listening on (http:\/\/\S+)/.exec(proc.stderr)![1]!;
    const alice = await v1Client(url, { token: ALICE });
    const task = taskOf(await alice.sendMessage(send(userText('Write about plovers'))));
    expect(textOf(task.status?.message?.parts)).toContain('Here is your piece.');
    expect((await store.get('demo', task.id))?.record.task.metadata?.['troupe/owner']).toBe('gateway/alice');
    const ready = await fetch(`${url}/diagnostics/ready`, { headers: { authorization: `Bearer ${OPERATOR}` } });
    expect(ready.status).toBe(200);
  });
});
