/**
 * JetStreamIngress against a real nats-server with the shipped operator-mode setup (troupe creds init): the account mapping partitions
 * `troupe.demo.in.<principal>.<thread>`, the TROUPE_IN work-queue stream stores and de-duplicates, one node per
 * partition consumes, per-thread order holds through failures, crashes and a server restart.
 */
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect, headers as natsHeaders, PermissionViolationError, TimeoutError, type NatsConnection, type RequestOptions } from '@nats-io/transport-node';
import { Kvm } from '@nats-io/kv';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  DEAD_LETTER_HEADERS,
  DEAD_LETTER_STREAM,
  INGRESS_STREAM,
  JetStreamIngress,
  partitionOf,
  type IngressHandler,
  type IngressMessage,
  type JetStreamIngressOptions,
} from '../src/transport/jetstream/ingress.js';
import { createLogger } from '../src/observability/logger.js';
import { TroupeError } from '../src/protocol/errors.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { capturingLogger } from './helpers/log-lines.js';
import { overriding } from './helpers/stall.js';
import { sleep, waitFor, waitUntil, waitWhileProgressing } from './helpers/wait.js';

const TTL = 1_200;
/** How long a test's handler works on a message (awaiting, as a real turn does), so messages queue up behind it. */
const HANDLER_WORK_MS = 3;
/** How long the server is frozen for the consumers' silence to be told of several times (heartbeats every 1 s). */
const SILENCE_MS = 5_000;
/** The pause between two tries of a publish while the server restarts or the client reconnects. */
const RETRY_PAUSE_MS = 50;
/** A JetStream API request that makes a consumer of the inbound stream (the API of nats-server 2.9 and later, and the older one). */
const CONSUMER_MAKE = /\.CONSUMER\.(?:DURABLE\.)?CREATE\.TROUPE_IN\./;
const enc = new TextEncoder();
const dec = new TextDecoder();

interface PubAck {
  stream: string;
  seq: number;
  duplicate?: boolean;
}

/** What a gateway or client does: a core request with a de-duplication id as Nats-Msg-Id. */
async function send(nc: NatsConnection, threadId: string, messageId: string, body: string, timeoutMs = 2_000, principal = 'local'): Promise<PubAck> {
  const h = natsHeaders();
  h.set('Nats-Msg-Id', messageId);
  const reply = await nc.request(`troupe.demo.in.${principal}.${threadId}`, enc.encode(body), { headers: h, timeout: timeoutMs });
  return JSON.parse(dec.decode(reply.data)) as PubAck;
}

/** `send`, retried on timeouts and no-responders for up to `forMs` (a server restart, a reconnect). */
async function sendRetrying(nc: NatsConnection, threadId: string, messageId: string, body: string, forMs = 10_000): Promise<PubAck> {
  const deadline = Date.now() + forMs;
  for (;;) {
    try {
      return await send(nc, threadId, messageId, body, 500);
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(RETRY_PAUSE_MS);
    }
  }
}

function randomId(): string {
  const chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-';
  const len = 1 + Math.floor(Math.random() * 36);
  let s = '';
  for (let i = 0; i < len; i++) s += chars[Math.floor(Math.random() * chars.length)];
  return s;
}

function deferred<T = void>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe('JetStreamIngress', () => {
  let server: NatsServerHandle;
  let admin: NatsConnection;
  let jsm: JetStreamManager;
  const conns: NatsConnection[] = [];
  const ingresses: JetStreamIngress[] = [];
  let n = 0;
  let bucket = '';

  beforeAll(async () => {
    server = await startNatsServer();
    admin = await connect({ ...server.asNode, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    jsm = await jetstreamManager(admin);
  });
  afterAll(async () => {
    await admin?.close();
    await server?.stop();
  });
  beforeEach(() => {
    // A lease bucket per test, so a "crashed" node of one test holds nothing in the next.
    bucket = `ingress_leases_${++n}`;
  });
  afterEach(async () => {
    await Promise.all(ingresses.splice(0).map((i) => i.stop().catch(() => undefined)));
    await Promise.all(conns.splice(0).map((c) => c.close().catch(() => undefined)));
    await jsm.streams.purge(INGRESS_STREAM).catch(() => undefined);
  });

  const connectNode = async () => {
    const nc = await connect({ ...server.asNode, maxReconnectAttempts: -1, reconnectTimeWait: 100, timeout: 2_000 });
    conns.push(nc);
    return nc;
  };

  const startIngress = async (nodeId: string, handler: IngressHandler, extra: Partial<JetStreamIngressOptions> = {}) => {
    const nc = await connectNode();
    // TROUPE_TEST_LOG=debug shows what the ingress and its leases do.
    const logger = process.env.TROUPE_TEST_LOG ? createLogger({ level: process.env.TROUPE_TEST_LOG }) : undefined;
    const ingress = new JetStreamIngress({
      nc,
      tenant: 'demo',
      nodeId,
      leaseTtlMs: TTL,
      leaseBucket: bucket,
      handler,
      ...(logger ? { logger } : {}),
      ...extra,
    });
    ingresses.push(ingress);
    await ingress.start();
    return { nc, ingress };
  };

  const streamMessages = async () => (await jsm.streams.info(INGRESS_STREAM)).state.messages;
  /**
   * Messages left in the work queue once it has emptied (0 = all acked or terminated), or what is left
   * when it stopped emptying for 10 s. A work queue drops a message at its final ack or term, so a message
   * nak'ed or redelivered is still there until that delivery is done: once it reads 0, no redelivery is due.
   */
  const drained = async () => {
    let remaining = await streamMessages();
    await waitWhileProgressing(
      async () => (remaining = await streamMessages()) === 0,
      () => remaining,
      'the work queue to empty',
      10_000,
      10,
    ).catch(() => undefined);
    return remaining;
  };

  it('partitionOf matches the server mapping (FNV-1a mod 8) for 200 random thread ids', async () => {
    const nc = await connectNode();
    const seen = new Map<string, number>();
    const sub = nc.subscribe('troupe.demo.in.*.*.*', {
      callback: (_err, m) => {
        const t = m.subject.split('.');
        seen.set(t[4]!, Number(t[5]));
      },
    });
    await nc.flush();
    const ids = new Set<string>(['abc']);
    while (ids.size < 200) ids.add(randomId());
    const pub = await connectNode();
    for (const id of ids) pub.publish(`troupe.demo.in.local.${id}`, enc.encode('x'));
    await pub.flush();
    await waitFor(() => seen.size === ids.size, 'every mapped message');
    sub.unsubscribe();
    const mismatches = [...ids].filter((id) => seen.get(id) !== partitionOf(id, 8));
    expect(mismatches).toEqual([]);
    expect(seen.get('abc')).toBe(3);
    expect(partitionOf('abc', 8)).toBe(3);
  });

  it('lets the client user publish into a thread (nats-server 2.9 checks the mapped subject, which the client role allows)', async () => {
    // nats-server 2.9.10 checks publish permissions after the account mapping added the partition token,
    // newer servers on the subject as published: the client role allows both forms.
    const got: IngressMessage[] = [];
    const { ingress } = await startIngress('node-a', (m) => void got.push(m));
    await waitFor(() => ingress.owned().length === 8, 'consuming');
    const client = await connect(server.as('client'));
    conns.push(client);
    const ack = await send(client, 'perm-thread', 'perm-1', 'x', 2_000, 'client');
    expect(ack).toEqual({ stream: INGRESS_STREAM, seq: expect.any(Number) });
    await waitFor(() => got.length === 1, 'the delivery');
    expect(got[0]).toMatchObject({ partition: partitionOf('perm-thread'), principal: 'client', threadId: 'perm-thread' });
    // Still no way into an agent's inbox.
    const refused: string[] = [];
    void (async () => {
      for await (const st of client.status()) {
        if (st.type === 'error' && st.error instanceof PermissionViolationError && st.error.operation === 'publish') refused.push(st.error.subject);
      }
    })();
    client.publish('troupe.demo.agent.triage', 'sneaky');
    await waitFor(() => refused.length > 0, 'the permission violation');
    expect(refused[0]).toBe('troupe.demo.agent.triage');
  });

  it('answers a request with a PubAck, de-duplicates on Nats-Msg-Id, and delivers once', async () => {
    const got: IngressMessage[] = [];
    const { ingress } = await startIngress('node-a', (m) => void got.push(m));
    await waitFor(() => ingress.owned().length === 8, 'node-a consuming all partitions');

    const pub = await connectNode();
    const first = await send(pub, 'dup-thread', 'msg-1', 'hello');
    expect(first).toEqual({ stream: INGRESS_STREAM, seq: expect.any(Number) });
    const again = await send(pub, 'dup-thread', 'msg-1', 'hello');
    expect(again).toEqual({ stream: INGRESS_STREAM, seq: first.seq, duplicate: true });

    const second = await send(pub, 'dup-thread', 'msg-2', 'again');
    expect(second.seq).toBe(first.seq + 1);

    // Per-thread order: once msg-2 is handled, a duplicate of msg-1 would have been handled before it.
    await waitFor(() => got.some((m) => m.messageId === 'msg-2'), 'msg-2');
    expect(got.map((m) => m.messageId)).toEqual(['msg-1', 'msg-2']);
    const [m1] = got;
    expect(m1).toMatchObject({
      threadId: 'dup-thread',
      principal: 'local',
      partition: partitionOf('dup-thread'),
      messageId: 'msg-1',
      redelivered: false,
      ackedBefore: false,
      deliveryCount: 1,
      subject: `troupe.demo.in.local.dup-thread.${partitionOf('dup-thread')}`,
    });
    expect(dec.decode(m1!.data)).toBe('hello');
    expect(m1!.headers['Nats-Msg-Id']).toBe('msg-1');
    // Acked after the handler: work-queue retention removes them from the stream.
    expect(await drained()).toBe(0);
  });

  it('delivers 50 threads x 10 interleaved messages in per-thread order, each exactly once', async () => {
    const seen = new Map<string, number[]>();
    const ids = new Set<string>();
    let dupes = 0;
    const { ingress } = await startIngress('node-a', async (m) => {
      // Some jitter, so threads would overtake each other if the chains were wrong.
      if (Math.random() < 0.3) await sleep(Math.floor(Math.random() * 3));
      const body = JSON.parse(dec.decode(m.data)) as { i: number };
      if (ids.has(m.messageId!)) dupes++;
      ids.add(m.messageId!);
      const list = seen.get(m.threadId) ?? [];
      list.push(body.i);
      seen.set(m.threadId, list);
    });
    await waitFor(() => ingress.owned().length === 8, 'consuming');
    const pub = await connectNode();
    const threads = Array.from({ length: 50 }, (_, t) => `order-${t}`);
    const acks: Promise<PubAck>[] = [];
    for (let i = 0; i < 10; i++) for (const t of threads) acks.push(send(pub, t, `${t}-m${i}`, JSON.stringify({ i })));
    const results = await Promise.all(acks);
    expect(results.every((r) => r.stream === INGRESS_STREAM && !r.duplicate)).toBe(true);
    await waitFor(() => ids.size === 500, 'all 500 messages', 30_000);
    // Every message acked: none is left to be delivered again, so the count of duplicates is final.
    expect(await drained()).toBe(0);
    expect(dupes).toBe(0);
    for (const t of threads) expect(seen.get(t)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  });

  it('does not let a slow thread hold up other threads, even in its own partition', async () => {
    const gate = deferred();
    const done: string[] = [];
    const slow = 'slow-thread';
    const p = partitionOf(slow);
    const { ingress } = await startIngress('node-a', async (m) => {
      if (m.messageId === 'slow-1') await gate.promise;
      done.push(m.messageId!);
    });
    await waitFor(() => ingress.owned().length === 8, 'consuming');
    // Other threads of the same partition, and of another one.
    const samePartition: string[] = [];
    for (let i = 0; samePartition.length < 4; i++) if (partitionOf(`fast-${i}`) === p) samePartition.push(`fast-${i}`);
    let other = 'other-0';
    for (let i = 0; partitionOf(other) === p; i++) other = `other-${i + 1}`;

    const pub = await connectNode();
    await send(pub, slow, 'slow-1', 'x');
    await send(pub, slow, 'slow-2', 'x');
    for (const t of samePartition) await send(pub, t, `${t}-1`, 'x');
    await send(pub, other, `${other}-1`, 'x');
    await waitFor(() => done.length === 5, 'the five fast messages');
    expect(done.sort()).toEqual([...samePartition.map((t) => `${t}-1`), `${other}-1`].sort());
    // The slow thread's second message waits behind its first: published before the fast ones of its
    // partition, it was delivered before they were handled (one consumer per partition, in order).
    expect(done).not.toContain('slow-2');
    gate.resolve();
    await waitFor(() => done.includes('slow-2'), 'slow-2');
    expect(done.indexOf('slow-1')).toBeLessThan(done.indexOf('slow-2'));
  });

  it('terminates a message the handler refuses with a client error, and retries others in order', async () => {
    const calls: string[] = [];
    let failedOnce = false;
    const { ingress } = await startIngress(
      'node-a',
      async (m) => {
        calls.push(`${m.messageId}#${m.deliveryCount}`);
        if (m.messageId === 'bad-1') throw new TroupeError('INVALID_MESSAGE', 'not an A2A message');
        if (m.messageId === 'flaky-1' && !failedOnce) {
          failedOnce = true;
          throw new TroupeError('STORE_CONFLICT', 'lost a race');
        }
      },
      { retryDelayMs: { base: 150 } },
    );
    await waitFor(() => ingress.owned().length === 8, 'consuming');
    const pub = await connectNode();
    await send(pub, 'bad-thread', 'bad-1', 'garbage');
    await send(pub, 'bad-thread', 'bad-2', 'fine');
    await send(pub, 'flaky-thread', 'flaky-1', 'x');
    await send(pub, 'flaky-thread', 'flaky-2', 'x');
    await send(pub, 'flaky-thread', 'flaky-3', 'x');
    await waitFor(() => calls.includes('bad-2#1') && calls.some((c) => c.startsWith('flaky-3')), 'both threads done');
    // A nak'ed "bad-1" would stay in the work queue until delivered again: once it is empty, that has happened or never will.
    expect(await drained()).toBe(0);
    const bad = calls.filter((c) => c.startsWith('bad-'));
    expect(bad).toEqual(['bad-1#1', 'bad-2#1']);
    const flaky = calls.filter((c) => c.startsWith('flaky-'));
    // flaky-1 failed, was nak'ed with a delay, and flaky-2/3 waited for its retry rather than overtaking it.
    expect(flaky.map((c) => c.split('#')[0])).toEqual(['flaky-1', 'flaky-1', 'flaky-2', 'flaky-3']);
    expect(flaky[1]).toBe('flaky-1#2');
  });

  it('dead-letters a message that fails every attempt only once its copy is stored: while the dead-letter stream does not take it, the message stays in the work queue', async () => {
    const { lines, log: logger } = capturingLogger();
    const calls: string[] = [];
    const deadLettered: IngressMessage[] = [];
    const { ingress } = await startIngress(
      'node-a',
      async (m) => {
        calls.push(`${m.messageId}#${m.deliveryCount}`);
        throw new TroupeError('AGENT_ERROR', 'fails every time');
      },
      { logger, maxDeliver: 2, retryDelayMs: { base: 50, max: 300 }, onDeadLetter: (m) => void deadLettered.push(m) },
    );
    await waitFor(() => ingress.owned().length === 8, 'consuming');
    // The dead-letter stream is gone (an operator deleted it, say): no copy can be stored.
    await jsm.streams.delete(DEAD_LETTER_STREAM);
    const pub = await connectNode();
    const { seq } = await send(pub, 'doomed-thread', 'doomed-1', 'x');
    await waitFor(
      () => lines.some((l) => l.msg === 'the message stays in the inbound stream and comes back' && l.seq === seq),
      'a dead-lettering that could not store its copy',
    );
    expect(calls.slice(0, 2)).toEqual(['doomed-1#1', 'doomed-1#2']);
    expect(deadLettered).toEqual([]);
    expect(await jsm.streams.getMessage(INGRESS_STREAM, { seq })).not.toBeNull();

    // The stream back (a node makes it when it starts): the next failed attempt stores the copy, and only
    // then is the message terminated and the host told.
    await jsm.streams.add({ name: DEAD_LETTER_STREAM, subjects: ['troupe.demo.dlq.>'] });
    await waitFor(() => deadLettered.length === 1, 'the message dead-lettered', 10_000);
    expect(deadLettered[0]!.messageId).toBe('doomed-1');
    const dlq = await jsm.streams.info(DEAD_LETTER_STREAM);
    expect(dlq.state.messages).toBe(1);
    const copy = await jsm.streams.getMessage(DEAD_LETTER_STREAM, { seq: dlq.state.last_seq });
    expect(copy?.header.get(DEAD_LETTER_HEADERS.seq)).toBe(String(seq));
    expect(copy?.header.get(DEAD_LETTER_HEADERS.code)).toBe('AGENT_ERROR');
    expect(calls.length).toBeGreaterThanOrEqual(3);
    expect(await drained()).toBe(0);
  });

  it('a message refused before any handler (an invalid thread id) tells its sender once, and leaves the inbound stream only once its dead-letter copy is stored', async () => {
    const { lines, log: logger } = capturingLogger();
    const handled: string[] = [];
    const refused: Array<{ subject: string; code: string }> = [];
    const { ingress } = await startIngress('node-a', (m) => void handled.push(m.messageId!), {
      logger,
      retryDelayMs: { base: 50, max: 300 },
      onRefused: (r) => void refused.push({ subject: r.subject, code: r.error.code }),
    });
    await waitFor(() => ingress.owned().length === 8, 'consuming');
    await jsm.streams.delete(DEAD_LETTER_STREAM);
    // A subject token NATS takes but a thread id may not be: stored, then refused by the node.
    const pub = await connectNode();
    const { seq } = await send(pub, 'not~a~thread', 'refused-1', 'x');
    // Refused, the copy not stored, sent back: refused again when it comes back, the sender told only once.
    await waitFor(
      () => lines.filter((l) => l.msg === 'the message stays in the inbound stream and comes back' && l.seq === seq).length >= 2,
      'two refusals whose copy was not stored',
    );
    expect(refused).toHaveLength(1);
    expect(refused[0]!.code).toBe('INVALID_MESSAGE');
    expect(refused[0]!.subject).toMatch(/^troupe\.demo\.in\.local\.not~a~thread\.\d$/);
    expect(await jsm.streams.getMessage(INGRESS_STREAM, { seq })).not.toBeNull();

    await jsm.streams.add({ name: DEAD_LETTER_STREAM, subjects: ['troupe.demo.dlq.>'] });
    await waitUntil(async () => (await jsm.streams.info(DEAD_LETTER_STREAM)).state.messages === 1 || undefined, 'the copy stored', 10_000);
    expect(await drained()).toBe(0);
    const copy = await jsm.streams.getMessage(DEAD_LETTER_STREAM, { seq: (await jsm.streams.info(DEAD_LETTER_STREAM)).state.last_seq });
    expect(copy?.header.get(DEAD_LETTER_HEADERS.seq)).toBe(String(seq));
    expect(copy?.header.get(DEAD_LETTER_HEADERS.code)).toBe('INVALID_MESSAGE');
    expect(refused).toHaveLength(1);
    expect(handled).toEqual([]);
  });

  it('takes the messages sent back behind a failed one before any newer one, and does not count them as failed attempts', async () => {
    const calls: string[] = [];
    const thread = 'held-thread';
    let pub: NatsConnection | undefined;
    let failedOnce = false;
    const { ingress } = await startIngress(
      'node-a',
      async (m) => {
        calls.push(`${m.messageId}#${m.deliveryCount}`);
        if (m.messageId !== 'held-1') return;
        if (!failedOnce) {
          failedOnce = true;
          throw new TroupeError('STORE_CONFLICT', 'lost a race');
        }
        // Back again: a new message arrives while held-2..4 (sent back behind held-1) are still out.
        // The handler returns once the consumer has delivered it, so it is queued before they are back.
        const { seq } = await send(pub!, thread, 'held-5', 'x');
        const consumer = `p${partitionOf(thread)}`;
        await waitUntil(
          async () => ((await jsm.consumers.info(INGRESS_STREAM, consumer)).delivered.stream_seq ?? 0) >= seq,
          'held-5 delivered by the consumer',
          10_000,
          2,
        );
      },
      { retryDelayMs: { base: 150 } },
    );
    await waitFor(() => ingress.owned().length === 8, 'consuming');
    pub = await connectNode();
    for (let i = 1; i <= 4; i++) await send(pub, thread, `held-${i}`, 'x');
    await waitFor(
      () => calls.some((c) => c.startsWith('held-5')) && calls.filter((c) => c.startsWith('held-')).length >= 6,
      'every message of the thread',
      10_000,
    );
    expect(await drained()).toBe(0);
    // Stream order, each once after held-1's retry; held-2..4 were sent back untried: no failed attempt each.
    expect(calls).toEqual(['held-1#1', 'held-1#2', 'held-2#1', 'held-3#1', 'held-4#1', 'held-5#1']);
  });

  it("hands a crashed node's partition to another node, which redelivers the unacked message first", async () => {
    const entered = deferred<IngressMessage>();
    const aGot: string[] = [];
    const bGot: IngressMessage[] = [];
    const events: string[] = [];
    const a = await startIngress(
      'node-a',
      async (m, { signal }) => {
        aGot.push(m.messageId!);
        if (m.messageId === 'crash-1') {
          entered.resolve(m);
          // Mid-turn when the node dies: never finishes (until its lease is gone and it is aborted).
          await new Promise((_res, rej) => signal.addEventListener('abort', () => rej(signal.reason as Error)));
        }
      },
      {
        releaseTimeoutMs: 500,
        onPartitionReleased: (p) => void events.push(`a-released-${p}@${Date.now()}`),
      },
    );
    const b = await startIngress('node-b', (m) => void bGot.push(m), {
      onPartitionAcquired: (p) => void events.push(`b-acquired-${p}@${Date.now()}`),
    });
    await waitFor(() => a.ingress.owned().length === 4 && b.ingress.owned().length === 4, '4/4', 5 * TTL);

    // A thread in one of node-a's partitions.
    const aParts = a.ingress.owned();
    let thread = 'crash-t0';
    for (let i = 0; !aParts.includes(partitionOf(thread)); i++) thread = `crash-t${i + 1}`;
    const p = partitionOf(thread);

    const pub = await connectNode();
    await send(pub, thread, 'crash-1', 'one');
    const { seq: seq2 } = await send(pub, thread, 'crash-2', 'two');
    await entered.promise;
    // crash-2 has reached node-a (its consumer delivered it, and node-a's connection has read what came before
    // a round trip) and is queued behind crash-1 there, not handled.
    await waitUntil(
      async () => ((await jsm.consumers.info(INGRESS_STREAM, `p${p}`)).delivered.stream_seq ?? 0) >= seq2,
      'crash-2 delivered to node-a',
      10_000,
      10,
    );
    await a.nc.flush();
    expect(aGot).toEqual(['crash-1']);

    const crashedAt = Date.now();
    await a.nc.close();
    await waitFor(() => bGot.some((m) => m.messageId === 'crash-2'), 'node-b finishing the thread', 3 * TTL);
    const takeover = Date.now() - crashedAt;
    console.log(`[ingress] crash takeover: node-b handled the unacked message ${takeover} ms after node-a's connection closed (lease ttl ${TTL} ms)`);
    expect(b.ingress.owned()).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    const forThread = bGot.filter((m) => m.threadId === thread);
    expect(forThread.map((m) => m.messageId)).toEqual(['crash-1', 'crash-2']);
    // The fresh consumer does not know node-a had it: deliveryCount restarts at 1.
    expect(forThread[0]!.deliveryCount).toBe(1);
    // node-a fenced itself (released the partition) before node-b acquired it.
    await waitFor(() => events.some((e) => e.startsWith(`a-released-${p}@`)), 'node-a releasing');
    const at = (prefix: string) =>
      Number(
        events
          .filter((e) => e.startsWith(prefix))
          .pop()!
          .split('@')[1],
      );
    expect(at(`a-released-${p}@`)).toBeLessThanOrEqual(at(`b-acquired-${p}@`));
  });

  it('hands partitions over on a clean stop without losing or reordering messages in flight', async () => {
    const got = new Map<string, number[]>();
    const record = async (m: IngressMessage) => {
      await sleep(HANDLER_WORK_MS);
      const list = got.get(m.threadId) ?? [];
      list.push(Number(dec.decode(m.data)));
      got.set(m.threadId, list);
    };
    const a = await startIngress('node-a', record);
    await waitFor(() => a.ingress.owned().length === 8, 'node-a consuming');
    const b = await startIngress('node-b', record);
    await waitFor(() => a.ingress.owned().length === 4 && b.ingress.owned().length === 4, '4/4', 5 * TTL);
    const pub = await connectNode();
    const threads = Array.from({ length: 16 }, (_, i) => `handover-${i}`);
    const sends: Promise<PubAck>[] = [];
    for (let i = 0; i < 20; i++) for (const t of threads) sends.push(send(pub, t, `${t}-${i}`, String(i)));
    // Stop node-a in the middle of the stream of messages: some handled, most not yet.
    await waitFor(() => [...got.values()].reduce((n, l) => n + l.length, 0) >= 16, 'the first messages handled', 10_000);
    const stoppedAt = Date.now();
    await a.ingress.stop();
    await waitFor(() => b.ingress.owned().length === 8, 'node-b consuming all', TTL);
    console.log(`[ingress] clean stop: node-b consumed all 8 partitions ${Date.now() - stoppedAt} ms after node-a.stop() was called`);
    await Promise.all(sends);
    await waitFor(() => threads.every((t) => (got.get(t)?.length ?? 0) >= 20), 'all messages', 30_000);
    // Every message acked: nothing is left to be replayed, so what was handled is final.
    expect(await drained()).toBe(0);
    // node-a finished and acked (confirmed) what it had started, dropped what it had only queued, and
    // node-b's fresh consumers began at the oldest unacked message: nothing skipped, replayed or reordered.
    for (const t of threads) expect(got.get(t)).toEqual(Array.from({ length: 20 }, (_, i) => i));
  });

  it('a node that lost a partition under a running handler does not acknowledge its message: the next owner, whose consumer has the same name, keeps it', async () => {
    const entered = deferred();
    const finish = deferred();
    const aAcked: boolean[] = [];
    const a = await startIngress('node-a', async (m) => {
      if (m.messageId !== 'zombie-1') return;
      entered.resolve();
      // A turn that outlives its lease (its commit held up by the store), and then finishes: the abort is ignored.
      await finish.promise;
      return ({ acked }) => void aAcked.push(acked);
    });
    await waitFor(() => a.ingress.owned().length === 8, 'node-a owning every partition', 5 * TTL);
    const thread = 'zombie-t';
    const p = partitionOf(thread);
    const pub = await connectNode();
    await send(pub, thread, 'zombie-1', 'one');
    await entered.promise;

    // Another holder writes the lease: node-a's next renewal finds it taken and loses the partition.
    const kv = await new Kvm(admin).open(bucket);
    await kv.put(`demo.p${p}`, new TextEncoder().encode(JSON.stringify({ nodeId: 'node-gone', acquiredAt: Date.now(), renewedAt: Date.now() })));
    await waitFor(() => !a.ingress.leases!.owned().includes(p), 'node-a losing the lease', 5 * TTL);
    // node-b takes the partition once that holder's key ages out, with a fresh consumer of the same name, and
    // is given the message node-a never acknowledged.
    const bGot: string[] = [];
    const bAcked: boolean[] = [];
    const bEntered = deferred();
    const b = await startIngress('node-b', async (m) => {
      bGot.push(m.messageId!);
      if (m.messageId === 'zombie-1') bEntered.resolve();
      return ({ acked }: { acked: boolean }) => void bAcked.push(acked);
    });
    await bEntered.promise;
    expect(b.ingress.owned()).toContain(p);

    // node-a's handler finishes now: it must not acknowledge (node-b's consumer would take the ack as its own).
    finish.resolve();
    await waitFor(() => aAcked.length === 1, "node-a's after-ack step", 5 * TTL);
    expect(aAcked).toEqual([false]);
    await waitFor(() => bAcked.length === 1, "node-b's after-ack step", 5 * TTL);
    expect(bAcked).toEqual([true]);
    expect(bGot.filter((id) => id === 'zombie-1')).toHaveLength(1);
    expect(await drained()).toBe(0);
  });

  it('keeps consuming after a nats-server restart and loses nothing published before it; the consumers of idle partitions are kept', async () => {
    const { lines, log: logger } = capturingLogger();
    const got = new Map<string, string[]>();
    const handled = new Set<string>();
    let dupes = 0;
    const { ingress, nc } = await startIngress(
      'node-a',
      async (m) => {
        await sleep(HANDLER_WORK_MS); // slow enough that messages are still queued when the server goes down
        if (handled.has(m.messageId!)) dupes++;
        handled.add(m.messageId!);
        const list = got.get(m.threadId) ?? [];
        list.push(m.messageId!);
        got.set(m.threadId, list);
      },
      { logger },
    );
    await waitFor(() => ingress.owned().length === 8, 'consuming');
    const pub = await connectNode();
    // Ten threads, none in two partitions that stay idle.
    const idle = [0, 1];
    const threads = Array.from({ length: 40 }, (_, i) => `restart-${i}`)
      .filter((t) => !idle.includes(partitionOf(t)))
      .slice(0, 10);
    const published: string[] = [];
    const sendRound = async (round: number) => {
      for (const t of threads) {
        const id = `${t}-r${round}`;
        // Retry until the server takes it (it may be down or just back).
        await sendRetrying(pub, t, id, id);
        published.push(id);
      }
    };
    for (let r = 0; r < 10; r++) await sendRound(r);
    // Restart while plenty is still unhandled (10 threads x 10 messages x 3 ms, in parallel per thread).
    const handledBefore = handled.size;
    const restartAt = Date.now();
    const mark = lines.length;
    await server.restart();
    console.log(
      `[ingress] server restarted in ${Date.now() - restartAt} ms with ${published.length - handledBefore} of ${published.length} messages not yet handled`,
    );
    await waitFor(() => !nc.isClosed() && ingress.owned().length === 8, 'consuming again', 5 * TTL);
    for (let r = 10; r < 15; r++) await sendRound(r);
    await waitFor(() => published.every((id) => handled.has(id)), 'every message published before and after the restart', 15_000);
    console.log(`[ingress] after the restart: ${handled.size} distinct messages handled, ${dupes} redelivered duplicates`);
    for (const t of threads) {
      const list = got.get(t)!;
      const firsts = list.filter((v, i) => list.indexOf(v) === i);
      expect(firsts).toEqual(Array.from({ length: 15 }, (_, r) => `${t}-r${r}`));
    }
    // A partition with nothing in flight goes on with its consumer as it was (restarted after the reconnect,
    // or taken back if its lease lapsed meanwhile): nothing was left in it that a fresh one would give sooner.
    const last = new Map<number, unknown>();
    for (const l of lines.slice(mark))
      if (l.msg === 'partition consumer restarted' || l.msg === 'consuming partition') last.set(l.partition as number, l.consumer);
    expect(idle.map((p) => [p, last.get(p)])).toEqual(idle.map((p) => [p, 'kept']));
  });
  it('says when a partition consumer falls silent (the server frozen for 8 s), and consumes again after', async () => {
    const { lines, log: logger } = capturingLogger();
    const handled: string[] = [];
    // Leases outlive the freeze: the node keeps its partitions, and only the consumers' silence is seen.
    const { ingress } = await startIngress('node-a', (m) => void handled.push(m.messageId!), { logger, leaseTtlMs: 30_000 });
    await waitFor(() => ingress.owned().length === 8, 'consuming');
    const pub = await connectNode();
    await send(pub, 'silent', 'before', 'x');
    await waitFor(() => handled.length === 1, 'the first message');
    expect(lines.filter((l) => l.msg === 'partition consumer silent; pulling again')).toEqual([]);

    // The silence is the input here: frozen for SILENCE_MS, the client tells of missed heartbeats once a
    // heartbeat interval (1 s) from the second on, so several times per partition; the node says it once.
    await server.signal('SIGSTOP');
    try {
      await sleep(SILENCE_MS);
    } finally {
      await server.signal('SIGCONT');
    }
    await waitFor(() => lines.some((l) => l.msg === 'partition consumer silent; pulling again'), 'a warning of the silence', 10_000);
    const silent = lines.filter((l) => l.msg === 'partition consumer silent; pulling again');
    // One line per partition: the client pulls again every second of the silence, which is said once.
    expect(silent.every((l) => l.level === 40 && typeof l.partition === 'number')).toBe(true);
    expect(new Set(silent.map((l) => l.partition)).size).toBe(silent.length);
    await sendRetrying(pub, 'silent', 'after', 'x');
    await waitFor(() => handled.length === 2, 'the message after the freeze');
    expect(handled).toEqual(['before', 'after']);
  });

  it('a partition whose pulls the server refuses (409) says so, and is consumed again from a consumer made afresh', async () => {
    const { lines, log: logger } = capturingLogger();
    const handled: string[] = [];
    const { ingress } = await startIngress('node-a', (m) => void handled.push(m.messageId!), { logger, leaseTtlMs: 30_000 });
    await waitFor(() => ingress.owned().length === 8, 'consuming');
    const threadId = 'refused-pulls';
    const p = partitionOf(threadId);
    // The consumer's pulls now ask for more than the server allows: the next (at the latest when the pull
    // in progress expires, 5 s) is answered 409, and nothing more comes.
    await jsm.consumers.update(INGRESS_STREAM, `p${p}`, { max_batch: 10 });
    await waitFor(() => lines.some((l) => l.msg === 'partition consumer: the server refused a pull' && l.partition === p), 'the refusal in the log', 10_000);
    const refusal = lines.find((l) => l.msg === 'partition consumer: the server refused a pull')!;
    expect([refusal.level, refusal.code]).toEqual([40, 409]);
    expect((refusal.description as string | undefined)?.toLowerCase()).toContain('exceeded maxrequestbatch');
    const pub = await connectNode();
    await send(pub, threadId, 'while-refused', 'x');
    // Refused three times (the client pulls again after two missed heartbeats): the consumer is made
    // again, without the limit, and the message comes.
    await waitFor(() => handled.includes('while-refused'), 'the message, from the consumer made again', 25_000);
    expect(lines.filter((l) => l.partition === p && l.level === 40).map((l) => l.msg)).toEqual([
      'partition consumer: the server refused a pull',
      'partition consumer silent; pulling again',
      'partition consumer: the server refused a pull',
      'partition consumer silent; pulling again',
      'partition consumer: the server refused a pull',
      'partition consumer refuses every pull: making it again',
    ]);
    expect(lines.some((l) => l.msg === 'restarting partition consumer' && l.partition === p)).toBe(true);
  }, 45_000);

  it('a partition given back while its consumer cannot be made yet leaves as soon as the attempt in hand fails, not after the attempts run out', async () => {
    const { lines, log: logger } = capturingLogger();
    const real = await connectNode();
    // Every make of a partition consumer times out (a meta leader too slow to answer), until told otherwise.
    let slowMetaLeader = true;
    let makes = 0;
    const nc = overriding(real, {
      request: (subject: string, data?: Uint8Array, opts?: RequestOptions) => {
        if (slowMetaLeader && CONSUMER_MAKE.test(subject)) {
          makes++;
          return Promise.reject(new TimeoutError());
        }
        return real.request(subject, data, opts);
      },
    });
    const a = await startIngress('node-a', () => undefined, { nc, logger });
    await waitFor(() => a.ingress.leases?.owned().length === 8 && makes >= 8, 'node-a holding 8 partitions it cannot make a consumer for');
    const b = await startIngress('node-b', () => undefined);
    // node-a's share is now 4: the 4 it gives back go to node-b while node-a still cannot make any consumer.
    // (Before, each give-back waited behind the make's attempts: about 20 s of them.)
    await waitFor(() => b.ingress.owned().length === 4, 'node-b consuming the 4 partitions node-a gave back', 15_000);
    expect(a.ingress.owned()).toEqual([]);
    const given = b.ingress.owned();
    const quiet = lines.filter((l) => l.msg === 'partition not consumed: it was given back or lost meanwhile');
    expect(quiet.map((l) => l.partition as number).sort()).toEqual(given);
    expect(lines.filter((l) => l.level >= 50)).toEqual([]);
    // The meta leader answers again: node-a consumes the 4 it kept.
    slowMetaLeader = false;
    await waitFor(() => a.ingress.owned().length === 4, 'node-a consuming its 4', 15_000);
    expect([...a.ingress.owned(), ...given].sort()).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  }, 45_000);

  it('a make of a partition consumer that timed out but was stored is taken as made, not deleted and made again', async () => {
    const { lines, log: logger } = capturingLogger();
    const real = await connectNode();
    // The first make of each partition's consumer is stored, but its answer comes too late (a slow meta
    // leader): the caller sees a timeout.
    const calls: string[] = [];
    const late = new Set<string>();
    const nc = overriding(real, {
      request: async (subject: string, data?: Uint8Array, opts?: RequestOptions) => {
        const consumer = /\.CONSUMER\.(?:DURABLE\.)?(?:CREATE|DELETE)\.TROUPE_IN\.(p\d+)/.exec(subject)?.[1];
        if (consumer === undefined) return real.request(subject, data, opts);
        const make = CONSUMER_MAKE.test(subject);
        calls.push(`${make ? 'make' : 'delete'} ${consumer}`);
        const answer = await real.request(subject, data, opts);
        if (!make || late.has(consumer)) return answer;
        late.add(consumer);
        throw new TimeoutError();
      },
    });
    const handled: string[] = [];
    const { ingress } = await startIngress('node-a', (m) => void handled.push(m.messageId!), { nc, logger });
    await waitFor(() => ingress.owned().length === 8, 'consuming all 8', 15_000);
    expect(late.size).toBe(8);
    // Per partition: the delete before the make (nothing to delete), the make that timed out, and no more.
    for (let p = 0; p < 8; p++) expect(calls.filter((c) => c.endsWith(` p${p}`))).toEqual([`delete p${p}`, `make p${p}`]);
    expect(lines.filter((l) => l.msg === 'a make of the partition consumer that timed out had been stored; taking it').length).toBe(8);
    // The consumer is the one asked for, and it delivers.
    const threadId = 'landed-make';
    const p = partitionOf(threadId);
    expect((await jsm.consumers.info(INGRESS_STREAM, `p${p}`)).config.description).toMatch(/; made by node-a #\d+$/);
    await send(await connectNode(), threadId, 'after-a-landed-make', 'x');
    await waitFor(() => handled.includes('after-a-landed-make'), 'the message');
  }, 30_000);

  it('a partition taken back while a pull from elsewhere waits at its consumer: the consumer is made afresh, and the pull gets nothing', async () => {
    const { lines, log: logger } = capturingLogger();
    const handled: string[] = [];
    const { ingress } = await startIngress('node-a', (m) => void handled.push(m.messageId!), { logger });
    await waitFor(() => ingress.owned().length === 8, 'consuming');
    const threadId = 'waiting-pull';
    const p = partitionOf(threadId);
    // A pull of someone else's (a node that lost the partition and still pulls, say), waiting a minute.
    const other = await connectNode();
    const took: string[] = [];
    const inbox = `_INBOX.waiting-pull-${Date.now()}`;
    other.subscribe(inbox, { callback: (_err, m) => void (m.data.length > 0 && took.push(dec.decode(m.data))) });
    other.publish(`$JS.API.CONSUMER.MSG.NEXT.${INGRESS_STREAM}.p${p}`, enc.encode(JSON.stringify({ batch: 1, expires: 60_000_000_000 })), { reply: inbox });
    await other.flush();
    await waitUntil(async () => (await jsm.consumers.info(INGRESS_STREAM, `p${p}`)).num_waiting >= 2, "the pull waiting beside the node's", 5_000);
    const mark = lines.length;

    // Frozen past the lease TTL: the node fences itself off (seen in its log while the server is still
    // frozen), then takes its partitions back.
    await server.signal('SIGSTOP');
    try {
      await waitUntil(() => lines.slice(mark).some((l) => l.msg === 'lease lost' && l.partition === p) || undefined, 'the node fencing itself off', 30_000);
    } finally {
      await server.signal('SIGCONT');
    }
    const back = await waitUntil(
      () => lines.slice(mark).find((l) => l.msg === 'consuming partition' && l.partition === p),
      'the partition consumed again',
      10_000,
    );
    expect(lines.slice(mark).some((l) => l.msg === 'lease lost' && l.partition === p)).toBe(true);
    expect([back.consumer, back.madeBecause]).toEqual(['made', 'pulls waiting']);
    const pub = await connectNode();
    // (Message ids are the stream's de-duplication ids: one no other test of the file sends.)
    await sendRetrying(pub, threadId, 'after-the-waiting-pull', 'body');
    await waitFor(() => handled.includes('after-the-waiting-pull'), 'the message, by the node');
    expect(took).toEqual([]);
  });

  it('recovers from a server outage longer than the lease TTL: leases fenced and taken back, each idle consumer kept as it was; one with a message in hand, or changed, made afresh', async () => {
    const { lines, log: logger } = capturingLogger();
    const handled: string[] = [];
    const events: string[] = [];
    // Three threads in three partitions: one idle, one whose handler is in the middle of a message when the
    // lease runs out, one whose consumer someone changes.
    const threadIn = (prefix: string, not: number[]) => {
      for (let i = 0; ; i++) if (!not.includes(partitionOf(`${prefix}-${i}`))) return `${prefix}-${i}`;
    };
    const idle = 'outage';
    const busy = threadIn('outage-busy', [partitionOf(idle)]);
    const changed = threadIn('outage-changed', [partitionOf(idle), partitionOf(busy)]);
    const inHand = deferred();
    let blocked = false;
    const { ingress, nc } = await startIngress(
      'node-a',
      async (m, { signal }) => {
        if (m.messageId === 'busy-1' && !blocked) {
          blocked = true;
          inHand.resolve();
          // Runs until the node fences itself off the partition.
          await new Promise((_res, rej) => signal.addEventListener('abort', () => rej(signal.reason as Error)));
        }
        handled.push(m.messageId!);
      },
      {
        logger,
        onPartitionReleased: (p) => void events.push(`released-${p}`),
        onPartitionAcquired: (p) => void events.push(`acquired-${p}`),
      },
    );
    await waitFor(() => ingress.owned().length === 8, 'consuming');
    const pub = await connectNode();
    for (let i = 0; i < 5; i++) await send(pub, idle, `before-${i}`, 'x');
    await send(pub, busy, 'busy-1', 'x');
    await waitFor(() => handled.length === 5, 'the first messages');
    await inHand.promise;
    await jsm.consumers.update(INGRESS_STREAM, `p${partitionOf(changed)}`, { max_ack_pending: 999 });
    events.length = 0;
    const mark = lines.length;

    await server.shutdown();
    // Every lease runs out while the server is away: the node fences itself off every partition.
    await waitFor(
      () => ingress.owned().length === 0 && events.filter((e) => e.startsWith('released-')).length === 8,
      'every partition fenced and released',
      30_000,
    );
    expect(events.filter((e) => e.startsWith('released-'))).toHaveLength(8);
    await server.restart();
    await waitFor(() => !nc.isClosed() && ingress.owned().length === 8, 'consuming again', 5 * TTL);
    expect(events.filter((e) => e.startsWith('acquired-'))).toHaveLength(8);
    await waitFor(() => lines.slice(mark).filter((l) => l.msg === 'consuming partition').length === 8, 'every partition consumed again');
    const how = new Map(
      lines
        .slice(mark)
        .filter((l) => l.msg === 'consuming partition')
        .map((l) => [l.partition as number, l.consumer]),
    );
    const why = new Map(
      lines
        .slice(mark)
        .filter((l) => l.msg === 'consuming partition')
        .map((l) => [l.partition as number, l.madeBecause]),
    );
    expect(why.get(partitionOf(busy))).toBe('messages delivered and not acknowledged');
    expect(why.get(partitionOf(changed))).toBe('not the consumer this node made, or changed since');
    // The busy partition's consumer has the message delivered and not acknowledged; the changed one is not
    // the consumer the node made. Every other is the node's own, idle: consumed again as it was.
    expect(how.get(partitionOf(busy))).toBe('made');
    expect(how.get(partitionOf(changed))).toBe('made');
    expect([...how].filter(([p]) => p !== partitionOf(busy) && p !== partitionOf(changed)).map(([, c]) => c)).toEqual(Array(6).fill('kept'));
    // The publisher may still be reconnecting: it retries, as any client does (Nats-Msg-Id makes that safe).
    for (let i = 0; i < 5; i++) await sendRetrying(pub, idle, `after-${i}`, 'x');
    await sendRetrying(pub, busy, 'busy-2', 'x');
    await sendRetrying(pub, changed, 'changed-1', 'x');
    await waitFor(() => handled.length === 13, `the later messages (handled: ${handled.join(', ')})`, 15_000);
    expect(handled.filter((id) => !id.startsWith('busy') && !id.startsWith('changed'))).toEqual([
      ...Array.from({ length: 5 }, (_, i) => `before-${i}`),
      ...Array.from({ length: 5 }, (_, i) => `after-${i}`),
    ]);
    // The message in hand came again, before the thread's next.
    expect(handled.filter((id) => id.startsWith('busy'))).toEqual(['busy-1', 'busy-2']);
    expect(handled).toContain('changed-1');
    expect(await drained()).toBe(0);
  });
});
