/**
 * Fault tests for durable threads, with real processes and a real nats-server: nodes run as
 * `troupe up --nats` processes (JetStream inbound stream, partition leases, KV thread store); agents and
 * the client run in this process on their own connections.
 */
import { Kvm } from '@nats-io/kv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient, userMessage } from '../src/sdk/client.js';
import { partitionOf } from '../src/transport/jetstream/ingress.js';
import { main, sloth } from '../src/bin/demo/handoff-team.js';
import { ThreadEventSchema, decode, encodeJson, type ActorInfo, type Message, type ThreadEvent } from '../src/protocol/index.js';
import { KvThreadStore } from '../src/store/kv.js';
import { handoffDeadlineOf } from '../src/actors/threads/record.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { HEADERS } from '../src/protocol/headers.js';
import { natsSuite } from './helpers/nats-suite.js';
import { runTroupeJson, spawnTroupe, type ManagedProcess } from './helpers/processes.js';
import { sleep, waitUntil } from './helpers/wait.js';

const LEASE_TTL_MS = 1_500;
const PARTITIONS = 8;
const textOf = (m: Message | undefined) => (m?.parts ?? []).flatMap((p) => (p.kind === 'text' ? [p.text] : [])).join('');

const suite = natsSuite();

function startNode(team: string, name: string, extra: string[] = []): Promise<ManagedProcess> {
  return spawnTroupe(
    [
      'up',
      '--nats',
      suite.nats.url,
      '--team',
      team,
      '--no-agents',
      '--lease-ttl',
      String(LEASE_TTL_MS),
      '--partitions',
      String(PARTITIONS),
      '--idle',
      '1500',
      ...extra,
    ],
    { ...suite.nats.env, TROUPE_LOG_LEVEL: process.env.NODE_LOG_LEVEL ?? 'info' },
    { name },
    suite.group,
  );
}

/** The partitions each node process owns, from `ps`. */
async function partitionsByNode(client: TroupeClient): Promise<Map<string, number[]>> {
  const replies = await client.ps(300);
  const nodes = replies.flatMap((r) => r.actors).filter((a: ActorInfo) => a.kind === 'node');
  return new Map(nodes.map((n) => [n.id, ((n.detail?.partitions as number[] | undefined) ?? []).slice().sort()]));
}

/** Records every event on a thread's output. */
function watch(t: NatsTransport, threadId: string): ThreadEvent[] {
  const events: ThreadEvent[] = [];
  t.subscribe(subjects.threadOut('demo', 'local', threadId), (m) => {
    events.push(decode(ThreadEventSchema, m.data, 'event'));
  });
  return events;
}

const finalsFor = (events: ThreadEvent[], messageId: string) =>
  events.filter((e) => e.kind === 'status-update' && e.final && e.status.message?.metadata?.['troupe/inReplyTo'] === messageId);

describe('durable threads across node crashes and NATS restarts', () => {
  /** Executions of the slow echo agent per messageId (a retried call with the same id is one execution). */
  const executions = new Map<string, number>();
  const requests = new Map<string, number>();
  let client: TroupeClient;
  let clientTransport: NatsTransport;
  let nodeA: ManagedProcess;
  let nodeB: ManagedProcess;

  beforeAll(async () => {
    const slowEcho = defineAgent({
      card: { id: 'slowecho', name: 'Slow echo', description: 'Echoes, slowly when asked' },
      handle: async (message, ctx) => {
        executions.set(message.messageId, (executions.get(message.messageId) ?? 0) + 1);
        const m = /^slow:(\d+)/.exec(ctx.text);
        if (m) await sleep(Number(m[1]));
        return reply(`echo: ${ctx.text}`, { to: 'user' });
      },
    });
    const agentTransport = await suite.connect('slowecho');
    // Count requests (including retries, which the host answers from its idempotency cache).
    agentTransport.subscribe(subjects.agentInbox('demo', 'slowecho'), (m) => {
      // Troupe-Call-Id is `<threadId>/<messageId>`: count by the messageId.
      const id = (m.headers[HEADERS.callId] ?? '').split('/').slice(1).join('/');
      requests.set(id, (requests.get(id) ?? 0) + 1);
    });
    await new AgentHost({ transport: agentTransport, agent: slowEcho, heartbeatMs: 500 }).start();
    nodeA = await startNode('test/fixtures/durable-team.ts', 'node A');
    nodeB = await startNode('test/fixtures/durable-team.ts', 'node B');
    clientTransport = await suite.connect('client');
    client = new TroupeClient(clientTransport);
    // Both nodes hold partitions and the agent is known before the faults start.
    await waitUntil(
      async () => {
        const owned = await partitionsByNode(client);
        const all = [...owned.values()].flat();
        return owned.size === 2 && [...owned.values()].every((p) => p.length > 0) && all.length === PARTITIONS;
      },
      'two nodes sharing the partitions',
      15_000,
    );
    const warm = await client.send('warm up', { timeoutMs: 15_000 });
    expect(warm.text).toBe('echo: warm up');
  });

  afterAll(async () => {
    // A clean stop releases the partitions at once for the next suite's node.
    await Promise.all([nodeA, nodeB].map((n) => n?.kill('SIGTERM')));
  });

  it('kill -9 of the node in the middle of a turn: another node finishes it, the user gets exactly one answer', async () => {
    const owned = await partitionsByNode(client);
    const [victimId, victimParts] = [...owned.entries()].find(([, p]) => p.length > 0)!;
    let threadId = '';
    for (let i = 0; ; i++) {
      threadId = `crash-${i}`;
      if (victimParts.includes(partitionOf(threadId, PARTITIONS))) break;
    }
    const events = watch(clientTransport, threadId);
    await clientTransport.flush();
    const message = userMessage('slow:1500 crash me');
    const answer = client.send(message, { threadId, timeoutMs: 30_000 });
    await waitUntil(() => (executions.get(message.messageId) ?? 0) > 0, 'the agent to receive the call');
    // Which process is the victim: the one whose node id `ps` reported.
    const victim = [nodeA, nodeB].find((p) => p.stderr.includes(victimId))!;
    expect(victim).toBeDefined();
    await victim.kill('SIGKILL');
    const killedAt = Date.now();

    const result = await answer;
    expect(result.text).toBe('echo: slow:1500 crash me');
    const takeoverMs = Date.now() - killedAt;
    console.log(`kill -9 mid-turn: answered ${takeoverMs} ms after the kill (lease ttl ${LEASE_TTL_MS} ms)`);
    // A later message on the thread, answered by the survivor: a second answer to the first, from the only
    // node left, would have gone out before it (one publisher, one subscriber: in order).
    const later = userMessage('after the crash');
    expect((await client.send(later, { threadId, timeoutMs: 30_000 })).text).toBe('echo: after the crash');
    await waitUntil(() => finalsFor(events, later.messageId).length > 0 || undefined, 'the later answer on out');
    expect(finalsFor(events, message.messageId)).toHaveLength(1);
    // The surviving node re-ran the call with the same idempotency key: the agent did the work once.
    expect(executions.get(message.messageId)).toBe(1);
    expect(requests.get(message.messageId)).toBeGreaterThanOrEqual(2);
    // The survivor now owns every partition.
    const after = await partitionsByNode(client);
    expect([...after.values()].flat().sort()).toHaveLength(PARTITIONS);
    // Bring a second node back for the next tests.
    if (victim === nodeA) nodeA = await startNode('test/fixtures/durable-team.ts', 'node A2');
    else nodeB = await startNode('test/fixtures/durable-team.ts', 'node B2');
  }, 60_000);

  it('stop and restart nats-server in the middle of a conversation: it continues and nothing is lost', async () => {
    const threadId = 'restart-1';
    const first = await client.send('before the restart', { threadId, timeoutMs: 15_000 });
    expect(first.text).toBe('echo: before the restart');
    const message = userMessage('slow:800 across the restart');
    const answer = client.send(message, { threadId, timeoutMs: 45_000 });
    await waitUntil(() => (executions.get(message.messageId) ?? 0) > 0, 'the agent to receive the call');
    await suite.nats.restart();
    const mid = await answer.catch((err: unknown) => {
      throw new Error(
        `${String(err)} requests=${requests.get(message.messageId)} executions=${executions.get(message.messageId)}\n${nodeA.describe()}\n${nodeB.describe()}`,
      );
    });
    expect(mid.text).toBe('echo: slow:800 across the restart');
    const last = await client.send('after the restart', { threadId, timeoutMs: 30_000 });
    expect(last.text).toBe('echo: after the restart');
    // Each node's log says it lost NATS and got it back.
    for (const node of [nodeA, nodeB]) {
      await waitUntil(() => node.stderr.includes('"msg":"reconnected to NATS"'), `${node.name}: the reconnect in its log`);
      expect(node.stderr).toContain('"msg":"lost the connection to NATS; reconnecting"');
    }
    const store = await KvThreadStore.open(clientTransport.connection);
    const record = await waitUntil(async () => {
      const r = await store.get('demo', threadId);
      return r && (r.record.task.history?.length ?? 0) >= 6 ? r : undefined;
    }, 'the committed history');
    expect(record.record.task.history?.map(textOf)).toEqual([
      'before the restart',
      'echo: before the restart',
      'slow:800 across the restart',
      'echo: slow:800 across the restart',
      'after the restart',
      'echo: after the restart',
    ]);
  }, 90_000);

  it('two nodes, 200 threads, interleaved messages: each thread in order, no lost update', async () => {
    const THREADS = 200;
    const PER_THREAD = 3;
    const ids = Array.from({ length: THREADS }, (_, i) => `many-${i}`);
    const answered = new Map<string, number>();
    const sub = clientTransport.subscribe('troupe.demo.out.local.*', (m) => {
      const e = decode(ThreadEventSchema, m.data, 'event');
      if (e.kind === 'status-update' && e.final) answered.set(e.taskId, (answered.get(e.taskId) ?? 0) + 1);
    });
    await clientTransport.flush();
    // Each thread's messages go into the stream in order (each waits for its PubAck); threads interleave.
    await Promise.all(
      ids.map(async (threadId) => {
        for (let n = 0; n < PER_THREAD; n++) {
          const msg = userMessage(`${threadId} #${n}`, { messageId: `${threadId}-m${n}` });
          await clientTransport.request(subjects.threadIn('demo', 'local', threadId), encodeJson(msg), {
            timeoutMs: 10_000,
            headers: { 'Nats-Msg-Id': msg.messageId },
          });
        }
      }),
    );
    await waitUntil(() => ids.every((id) => (answered.get(id) ?? 0) >= PER_THREAD), `${THREADS * PER_THREAD} answers`, 60_000);
    sub.unsubscribe();
    const store = await KvThreadStore.open(clientTransport.connection);
    for (const threadId of ids) {
      const stored = await waitUntil(async () => {
        const r = await store.get('demo', threadId);
        return r && (r.record.task.history?.length ?? 0) >= PER_THREAD * 2 ? r : undefined;
      }, `history of ${threadId}`);
      const expected = Array.from({ length: PER_THREAD }, (_, n) => [`${threadId} #${n}`, `echo: ${threadId} #${n}`]).flat();
      expect(stored.record.task.history?.map(textOf)).toEqual(expected);
      expect(answered.get(threadId)).toBe(PER_THREAD);
    }
  }, 120_000);

  it('idle threads are passivated and rehydrated on their next message; threads / thread / rehydrate from the CLI', async () => {
    const threadId = 'idle-1';
    expect((await client.send('first', { threadId, timeoutMs: 15_000 })).text).toBe('echo: first');
    const ps = await waitUntil(async () => {
      const res = await runTroupeJson<{ actors: ActorInfo[]; live: number; passivated: number }>(['ps', '--nats', suite.nats.url, '--json'], suite.nats.env);
      return res.actors.some((a) => a.id === threadId) ? undefined : res;
    }, 'the idle thread to be passivated');
    expect(ps.passivated).toBeGreaterThanOrEqual(1);
    const threads = await runTroupeJson<Array<{ threadId: string; state: string; live: boolean }>>(
      ['threads', '--nats', suite.nats.url, '--json', '--state', 'input-required'],
      suite.nats.env,
    );
    expect(threads.find((t) => t.threadId === threadId)).toMatchObject({ state: 'input-required', live: false });
    const record = await runTroupeJson<{ record: { task: { history: Message[] } } }>(['thread', threadId, '--nats', suite.nats.url, '--json'], suite.nats.env);
    expect(record.record.task.history.map(textOf)).toEqual(['first', 'echo: first']);
    // The next message rehydrates it with its history.
    expect((await client.send('second', { threadId, timeoutMs: 15_000 })).text).toBe('echo: second');
    const rehydrated = await runTroupeJson<{ threadId: string; state: string }>(['rehydrate', threadId, '--nats', suite.nats.url, '--json'], suite.nats.env);
    expect(rehydrated).toEqual({ threadId, state: 'input-required' });
    const after = await runTroupeJson<{ record: { task: { history: Message[] } } }>(['thread', threadId, '--nats', suite.nats.url, '--json'], suite.nats.env);
    expect(after.record.task.history.map(textOf)).toEqual(['first', 'echo: first', 'second', 'echo: second']);
  }, 60_000);

  it('a corrupted record: a clear error for that thread, the node keeps serving the others', async () => {
    const kv = await new Kvm(clientTransport.connection).open('troupe_threads');
    await kv.put('demo.corrupt-1', '{"version": 1, "this is": "not a thread record"');
    await expect(client.send('hello?', { threadId: 'corrupt-1', timeoutMs: 15_000 })).rejects.toMatchObject({ code: 'STORE_CORRUPT' });
    const ok = await client.send('still serving', { threadId: 'healthy-1', timeoutMs: 15_000 });
    expect(ok.text).toBe('echo: still serving');
  }, 90_000);
});

/**
 * The handoff team's agents (main, and sloth, which takes a handoff and never returns) in this process, a
 * node process with `team`, and a thread handed to sloth: its events as they come and the handoff's
 * absolute deadline as stored with the thread (the handoff child's context in the snapshot).
 */
async function slothHandoff(name: string, team: string, threadId: string, nodeArgs: string[] = []) {
  const agentTransport = await suite.connect(`${name}-agents`);
  const hosts = await Promise.all([main, sloth].map((agent) => new AgentHost({ transport: agentTransport, agent, heartbeatMs: 500 }).start()));
  const node = await startNode(team, `${name} node`, nodeArgs);
  const clientT = await suite.connect(`${name}-client`);
  const client = new TroupeClient(clientT);
  const events = watch(clientT, threadId);
  await clientT.flush();
  const first = await client.send('slow specialist please', { threadId, timeoutMs: 15_000 });
  expect(first.text).toBe('sloth: accepted, thinking…');
  const store = await KvThreadStore.open(clientT.connection);
  const stored = await store.get('demo', threadId);
  const deadline = stored && handoffDeadlineOf(stored.record);
  expect(deadline).toEqual(expect.any(Number));
  expect(Number.isFinite(deadline)).toBe(true);
  return { hosts, node, client, events, deadline: deadline! };
}

/**
 * The deadline ends the handoff and main takes over again: its answer says AGENT_TIMEOUT, is stamped no
 * earlier than the stored deadline, and comes once (a further message is answered by main with no second
 * resume). Returns when the resume was stamped.
 */
async function expectOneResume(client: TroupeClient, events: ThreadEvent[], threadId: string, deadline: number, timeoutMs: number): Promise<number> {
  const isResume = (e: ThreadEvent) => e.kind === 'status-update' && e.final && textOf(e.status.message).includes('welcome back (failed)');
  const resumed = await waitUntil(() => events.find(isResume), 'the resume after the deadline', timeoutMs);
  const firedAt = Date.parse(resumed.kind === 'status-update' ? (resumed.status.timestamp ?? '') : '');
  expect(firedAt).toBeGreaterThanOrEqual(deadline);
  expect(textOf(resumed.kind === 'status-update' ? resumed.status.message : undefined)).toContain('AGENT_TIMEOUT');
  const after = await client.send('back to you', { threadId, timeoutMs: 15_000 });
  expect(after.text).toBe('main: back to you');
  expect(events.filter(isResume)).toHaveLength(1);
  return firedAt;
}

describe('an active handoff survives a node crash', () => {
  it('the handoff is still active on the new node, and its deadline fires once, at the absolute time it was given', async () => {
    const threadId = 'handoff-crash-1';
    const { hosts, node, client, events, deadline } = await slothHandoff('handoff', 'test/fixtures/durable-handoff-team.ts', threadId);

    await node.kill('SIGKILL');
    const replacement = await startNode('test/fixtures/durable-handoff-team.ts', 'handoff node 2');
    // On the new node the handoff is live and active (the 15 s budget outlasts a node restart).
    const active = await waitUntil(
      async () => {
        const replies = await client.ps(300);
        return replies.flatMap((r) => r.actors).find((a) => a.id === `${threadId}/handoff`);
      },
      'the handoff actor on the new node',
      15_000,
    );
    expect(active.state).toBe('active');

    const firedAt = await expectOneResume(client, events, threadId, deadline, 30_000);
    console.log(
      `handoff deadline at ${new Date(deadline).toISOString()}; the resume was stamped ${firedAt - deadline} ms after it (node killed and replaced in between)`,
    );
    await replacement.kill('SIGTERM');
    await Promise.all(hosts.map((h) => h.stop()));
  }, 90_000);

  it('a thread in a handoff goes dormant (--dormant) and stays past --idle; the node wakes it at the deadline, which fires once, not before it', async () => {
    const threadId = 'handoff-dormant-1';
    const { hosts, node, client, events, deadline } = await slothHandoff('dormant-handoff', 'test/fixtures/durable-handoff-team-short.ts', threadId, [
      '--dormant',
      '200',
    ]);

    // Dormant on its node (no live actor, no handoff actor), and still dormant after --idle (1.5 s).
    const dormantNow = async () => {
      const actors = (await client.ps(300)).flatMap((r) => r.actors);
      const nodeInfo = actors.find((a) => a.kind === 'node' && Number(a.detail?.['dormantThreads'] ?? 0) > 0);
      return nodeInfo && !actors.some((a) => a.id === threadId || a.id === `${threadId}/handoff`) ? true : undefined;
    };
    await waitUntil(dormantNow, 'the thread in a handoff to become dormant', 10_000);
    // Past --idle, shown by a thread at rest since later: a plain one, dropped from memory after --idle
    // (passivated, and no longer dormant). The thread in the handoff is still dormant (inspect says so below).
    const nodeDetail = async () => (await client.ps(300)).flatMap((r) => r.actors).find((a) => a.kind === 'node')?.detail ?? {};
    const passivatedBefore = Number((await nodeDetail())['passivatedThreads'] ?? 0);
    expect((await client.send('hello', { threadId: 'idle-marker-1', timeoutMs: 15_000 })).text).toBe('main: hello');
    await waitUntil(
      async () => {
        const d = await nodeDetail();
        return Number(d['passivatedThreads'] ?? 0) > passivatedBefore && Number(d['dormantThreads'] ?? 0) === 1 && Number(d['liveThreads'] ?? 0) === 0
          ? true
          : undefined;
      },
      'a thread at rest since later dropped after --idle',
      20_000,
    );
    // Still dormant, as ps and inspect say, unless the machine was so slow that the deadline (8 s) came first:
    // then the thread has rightly woken, and the resume below is what is left to check.
    if (Date.now() < deadline - 300) {
      expect(await dormantNow()).toBe(true);
      // One request from here (a CLI process can take seconds to start on a busy machine, past the deadline).
      const found = await client.inspect(threadId);
      if (Date.now() < deadline) expect(found?.actor?.detail).toMatchObject({ dormant: true, wakesAt: new Date(deadline).toISOString() });
    }

    await expectOneResume(client, events, threadId, deadline, 20_000);
    await node.kill('SIGTERM');
    await Promise.all(hosts.map((h) => h.stop()));
  }, 60_000);
});
