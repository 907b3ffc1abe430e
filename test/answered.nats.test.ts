/**
 * The published-answer marker (src/transport/jetstream/answered.ts), on a real nats-server: a thread's
 * latest message given again to the next owner after the node that answered it is gone — the path that
 * published answers twice in the cluster chaos suite (issue 14). Two thread hosts share one store, as two
 * nodes do; each message is handed over as the durable ingress does (`until: 'answered'`, its stream
 * sequence, the answer published by the after-ack step).
 */
import { Writable } from 'node:stream';
import { jetstreamManager, StorageType, type StreamConfig, type StreamUpdateConfig } from '@nats-io/jetstream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { Registry } from '../src/actors/registry.js';
import { ThreadHost } from '../src/actors/threads/host.js';
import { createLogger, type Logger } from '../src/observability/logger.js';
import { metrics } from '../src/observability/metrics.js';
import { META } from '../src/protocol/metadata.js';
import { ThreadEventSchema, decode } from '../src/protocol/index.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { userMessage } from '../src/sdk/client.js';
import { KvThreadStore } from '../src/store/kv.js';
import { ANSWERED_STREAM, JetStreamAnsweredLog } from '../src/transport/jetstream/answered.js';
import { PartitionLeases } from '../src/transport/jetstream/leases.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { capturingLogger } from './helpers/log-lines.js';
import { waitUntil } from './helpers/wait.js';

const TENANT = 'demo';
let nats: NatsServerHandle;
let agent: AgentHost;
const closers: Array<() => Promise<unknown>> = [];

async function transport(name: string, user = 'node'): Promise<NatsTransport> {
  const t = await NatsTransport.connect({ ...nats.as(user), name });
  closers.push(() => t.close());
  return t;
}

/** A node's thread side: a thread host on the shared store, with the marker log unless `marker: false`. */
async function node(nodeId: string, opts: { marker?: boolean; nodeAlive?: (id: string) => Promise<boolean | undefined>; logger?: Logger } = {}) {
  // As a durable node runs it (INGRESS_DUPLICATE_WINDOW_MS).
  const duplicateWindowMs = 120_000;
  const t = await transport(nodeId);
  const store = await KvThreadStore.open(t.connection, { bucket: 'answered_threads' });
  const answered =
    opts.marker === false
      ? undefined
      : await new JetStreamAnsweredLog({ nc: t.connection, tenant: TENANT, ...(opts.logger ? { logger: opts.logger } : {}) }).start();
  const registry = await new Registry(t, TENANT).start();
  const host = new ThreadHost({
    transport: t,
    registry,
    tenant: TENANT,
    nodeId,
    store,
    config: { entryAgent: 'echo' },
    duplicateWindowMs,
    ...(answered ? { answered } : {}),
    ...(opts.nodeAlive ? { nodeAlive: opts.nodeAlive } : {}),
  }).start();
  await registry.waitFor(['echo']);
  const stop = async () => {
    await host.stop();
    await registry.stop();
    await t.close();
  };
  closers.push(stop);
  return { host, stop, answered };
}

/** A node's heartbeat (and leases) in a lease bucket of this suite, as a durable node keeps them. */
async function heartbeat(nodeId: string) {
  const t = await transport(`leases-${nodeId}`);
  const leases = await new PartitionLeases({ nc: t.connection, tenant: TENANT, nodeId, partitions: 2, leaseTtlMs: 1_500, bucket: 'answered_leases' }).start();
  closers.push(() => leases.stop());
  return leases;
}

/** Final answers seen on the thread's `out`, by the message they answer. */
async function watchFinals(threadId: string) {
  const t = await transport(`watch-${threadId}`);
  const finals: string[] = [];
  t.subscribe(subjects.threadOut(TENANT, 'local', threadId), (m) => {
    const e = decode(ThreadEventSchema, m.data, 'thread event');
    if (e.kind === 'status-update' && e.final) finals.push(String(e.status.message?.metadata?.[META.inReplyTo]));
  });
  await t.flush();
  return finals;
}

const answered = (seq: number) => ({ seq, until: 'answered' as const });

/**
 * A later marker on the thread: a new message (stream sequence `seq`) delivered to `host`, its answer
 * published, and awaited on `out`. A second publication of an earlier answer by this host would have
 * gone out before it (one connection, one subscriber: in order), so once the probe's answer is in,
 * `finals` holds every answer this host published before it.
 */
async function probe(host: ThreadHost, threadId: string, finals: string[], seq: number): Promise<string> {
  const messageId = `probe-${seq}`;
  (await host.deliver(threadId, userMessage('probe', { messageId }), 'local', answered(seq))).publish?.({ acked: true });
  await waitUntil(() => finals.includes(messageId) || undefined, `the answer to ${messageId}`);
  return messageId;
}

/** troupe_redelivered_answers_total by decision (this process's registry: the hosts run here). */
async function decisions(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await metrics.redeliveredAnswers.get()).values) out[String(v.labels.decision)] = v.value;
  return out;
}
const grew = (before: Record<string, number>, after: Record<string, number>) =>
  Object.fromEntries(
    Object.entries(after)
      .filter(([k, v]) => v !== (before[k] ?? 0))
      .map(([k, v]) => [k, v - (before[k] ?? 0)]),
  );

beforeAll(async () => {
  nats = await startNatsServer();
  const agentT = await NatsTransport.connect({ ...nats.as('echo'), name: 'answered-echo' });
  agent = await new AgentHost({
    transport: agentT,
    agent: defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }) }),
  }).start();
}, 60_000);

afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
});

afterAll(async () => {
  await agent?.stop();
  await nats?.stop();
});

/**
 * The stream gives m1 to the next owner again (its ack lost with a consumer's leader): that node finds
 * the marker and acknowledges m1 without an answer. Returns the node, for a later marker (see `probe`)
 * showing that no second answer went out.
 */
async function nextOwnerReadsTheMarker(nodeId: string, threadId: string) {
  const b = await node(nodeId);
  const before = await decisions();
  const again = await b.host.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', answered(1));
  expect(again).toEqual({ duplicate: true });
  expect(grew(before, await decisions())).toEqual({ marker: 1 });
  return b;
}

describe('a redelivered latest message after its node is gone', () => {
  it('answered and marked by the dead node: the next owner reads the marker and does not publish it again', async () => {
    const threadId = 'marked-1';
    const finals = await watchFinals(threadId);
    const a = await node('node-a');
    const first = await a.host.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', answered(1));
    // The ack took; the after-ack step publishes the answer and its marker. Then node a dies.
    first.publish?.({ acked: true });
    await waitUntil(() => finals.length === 1 || undefined, 'the answer');
    await waitUntil(async () => (await a.answered?.published(threadId, 'm1')) || undefined, 'its marker, stored');
    await a.stop();
    const b = await nextOwnerReadsTheMarker('node-b', threadId);
    // The thread goes on at the next owner.
    const next = await b.host.deliver(threadId, userMessage('and again', { messageId: 'm2' }), 'local', answered(2));
    next.publish?.({ acked: true });
    await waitUntil(() => finals.length === 2 || undefined, 'the second answer');
    expect(finals).toEqual(['m1', 'm2']);
  }, 60_000);

  it('committed but never published (the node died before its ack): the next owner publishes it, once', async () => {
    const threadId = 'unmarked-1';
    const finals = await watchFinals(threadId);
    const a = await node('node-c');
    await a.host.deliver(threadId, userMessage('first', { messageId: 'm1' }), 'local', answered(1)).then((r) => r.publish?.({ acked: true }));
    await waitUntil(() => finals.length === 1 || undefined, 'the first answer');
    // m2's turn is committed, and node c dies before its ack: its answer never goes out.
    await a.host.deliver(threadId, userMessage('second', { messageId: 'm2' }), 'local', answered(2));
    await a.stop();
    const b = await node('node-d');
    const before = await decisions();
    await b.host.deliver(threadId, userMessage('second', { messageId: 'm2' }), 'local', answered(2));
    expect(grew(before, await decisions())).toEqual({ published: 1 });
    await waitUntil(() => finals.length === 2 || undefined, 'the stored answer, from the next owner');
    expect(finals).toEqual(['m1', 'm2', await probe(b.host, threadId, finals, 3)]);
  }, 60_000);

  it('no marker, and the node that committed does not answer but is alive (its heartbeat): the next owner waits until it is gone, then publishes once', async () => {
    // The committer may have published with its marker not stored yet (the marker stream without quorum)
    // while it reconnects after the same server fault: "no marker" alone does not say nobody published.
    const threadId = 'alive-1';
    const finals = await watchFinals(threadId);
    const alive = await heartbeat('node-g');
    const a = await node('node-g');
    await a.host.deliver(threadId, userMessage('first', { messageId: 'm1' }), 'local', answered(1)).then((r) => r.publish?.({ acked: true }));
    await waitUntil(() => finals.length === 1 || undefined, 'the first answer');
    await waitUntil(async () => (await a.answered?.published(threadId, 'm1')) || undefined, 'its marker, stored');
    // m2's turn is committed by node g, and its thread side stops answering before the answer goes out.
    await a.host.deliver(threadId, userMessage('second', { messageId: 'm2' }), 'local', answered(2));
    await a.stop();
    const own = await heartbeat('node-h');
    expect(await own.nodeAlive('node-g')).toBe(true);
    // Each round of asking ends with a look at node g's heartbeat: counted, they mark the rounds.
    let heartbeatLooks = 0;
    const b = await node('node-h', { nodeAlive: (id) => (heartbeatLooks++, own.nodeAlive(id)) });
    const before = await decisions();
    let settled = false;
    const again = b.host.deliver(threadId, userMessage('second', { messageId: 'm2' }), 'local', answered(2)).finally(() => (settled = true));
    // Two rounds of asking node g (no answer) with the stream's last marker for m1: without the heartbeat,
    // node h published in the first. The third round's look proves the second one ended unpublished.
    await waitUntil(() => heartbeatLooks >= 3 || undefined, 'three rounds of asking node g', 30_000);
    expect(finals).toEqual(['m1']);
    expect(settled).toBe(false);
    // Node g is gone (a clean stop deletes its heartbeat): now nobody else can publish it.
    await alive.stop();
    expect(await own.nodeAlive('node-g')).toBe(false);
    expect(await again).toEqual({ duplicate: true });
    expect(grew(before, await decisions())).toEqual({ published: 1 });
    await waitUntil(() => finals.length === 2 || undefined, 'the stored answer, from the next owner');
    expect(finals).toEqual(['m1', 'm2', await probe(b.host, threadId, finals, 3)]);
  }, 60_000);

  it('without a marker (the stream lost it), the node that answered is asked while it lives', async () => {
    const threadId = 'asked-1';
    const finals = await watchFinals(threadId);
    const a = await node('node-e');
    const first = await a.host.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', answered(1));
    first.publish?.({ acked: true });
    await waitUntil(() => finals.length === 1 || undefined, 'the answer');
    // Purged once the marker is stored, so that it cannot land after the purge.
    await waitUntil(async () => (await a.answered?.published(threadId, 'm1')) || undefined, 'its marker, stored');
    const t = await transport('purger');
    await (await jetstreamManager(t.connection)).streams.purge(ANSWERED_STREAM);
    // Node e is alive: asked, it says it published the answer.
    const b = await node('node-f', { marker: false });
    const before = await decisions();
    await b.host.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', answered(1));
    expect(grew(before, await decisions())).toEqual({ node: 1 });
    expect(finals).toEqual(['m1', await probe(b.host, threadId, finals, 2)]);
  }, 60_000);

  it('a marker the stream could not take at first (no stream leader) is published again until it is stored: the next owner reads it after the node is gone', async () => {
    const threadId = 'remarked-1';
    const finals = await watchFinals(threadId);
    const { lines, log } = capturingLogger('debug');
    const a = await node('node-g', { logger: log });
    // The stream is gone for a while (as while its leader is elected): the marker's first publishes fail.
    const t = await transport('stream-keeper');
    const jsm = await jetstreamManager(t.connection);
    const config = (await jsm.streams.info(ANSWERED_STREAM)).config;
    await jsm.streams.delete(ANSWERED_STREAM);
    const first = await a.host.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', answered(1));
    first.publish?.({ acked: true });
    await waitUntil(() => finals.length === 1 || undefined, 'the answer');
    await waitUntil(
      () => lines.some((l) => l.msg === 'the stream did not take a published-answer marker; publishing it again') || undefined,
      'a failed attempt to store the marker',
    );
    await jsm.streams.add(config);
    const reader = await new JetStreamAnsweredLog({ nc: t.connection, tenant: TENANT }).start();
    await waitUntil(async () => (await reader.published(threadId, 'm1')) ?? undefined, 'the marker, stored once the stream is back', 20_000);
    await a.stop();
    const b = await nextOwnerReadsTheMarker('node-h', threadId);
    expect(finals).toEqual(['m1', await probe(b.host, threadId, finals, 2)]);
  }, 60_000);

  it('a marker stream that is gone (a memory stream after a single server restarts) is made again: read, it says what it holds; markers are stored again', async () => {
    const t = await transport('gone-reader');
    const log = await new JetStreamAnsweredLog({ nc: t.connection, tenant: TENANT }).start();
    const jsm = await jetstreamManager(t.connection);
    // Gone before a read: the read makes it again and finds no marker there (not "unknown", which would
    // hold every redelivered message for 30 s after each restart of a single server).
    await jsm.streams.delete(ANSWERED_STREAM);
    expect(await log.published('gone-1', 'm1')).toBe(false);
    expect((await jsm.streams.info(ANSWERED_STREAM)).config.max_msgs_per_subject).toBe(1);
    // Gone before a marker: nothing takes its publishes until the stream is made again, then it is stored.
    await jsm.streams.delete(ANSWERED_STREAM);
    log.mark('gone-2', 'm2');
    await waitUntil(async () => (await jsm.streams.info(ANSWERED_STREAM).catch(() => undefined)) ?? undefined, 'the stream, made again', 20_000);
    await waitUntil(async () => (await log.published('gone-2', 'm2')) || undefined, 'the marker, stored once the stream is back', 20_000);
  }, 60_000);

  it('an account without room for the stream: the node runs without markers and says so', async () => {
    const t = await transport('filler');
    const jsm = await jetstreamManager(t.connection);
    await jsm.streams.delete(ANSWERED_STREAM).catch(() => undefined);
    // A stream reserves its max_bytes from the account's JetStream storage: a filler takes all of it but
    // less than 4 MiB (the largest that the account still takes, in steps of 4 MiB), short of the 8 MiB the
    // marker stream asks for.
    const limit = (await jsm.getAccountInfo()).limits.max_storage;
    let filled = false;
    for (let bytes = limit - 4 * 1024 ** 2; bytes > 0 && !filled; bytes -= 4 * 1024 ** 2) {
      filled = await jsm.streams.add({ name: 'FILLER', subjects: ['troupe.demo.filler'], storage: StorageType.File, max_bytes: bytes }).then(
        () => true,
        () => false,
      );
    }
    expect(filled).toBe(true);
    try {
      const lines: string[] = [];
      const logger = createLogger({ level: 'warn', destination: new Writable({ write: (chunk, _enc, done) => (lines.push(String(chunk)), done()) }) });
      const log = await new JetStreamAnsweredLog({ nc: t.connection, tenant: TENANT, logger }).start();
      expect(log.on).toBe(false);
      expect(await log.published('no-such-thread', 'm1')).toBe(false);
      expect(lines.join('')).toMatch(/running without published-answer markers.*raise the account's JetStream storage/);
    } finally {
      await jsm.streams.delete('FILLER');
    }
  }, 30_000);

  it('keeps one marker per thread, on disk, with the replicas asked for', async () => {
    const t = await transport('inspector');
    await new JetStreamAnsweredLog({ nc: t.connection, tenant: TENANT, replicas: 1 }).start();
    const info = await (await jetstreamManager(t.connection)).streams.info(ANSWERED_STREAM);
    expect(info.config).toMatchObject({ storage: 'file', max_msgs_per_subject: 1, num_replicas: 1, subjects: [subjects.answerPublishedAll(TENANT)] });
  }, 30_000);

  it("replaces an earlier version's memory stream with one on disk when it starts", async () => {
    const t = await transport('upgrader');
    const jsm = await jetstreamManager(t.connection);
    await jsm.streams.delete(ANSWERED_STREAM).catch(() => undefined);
    await jsm.streams.add({
      name: ANSWERED_STREAM,
      subjects: [subjects.answerPublishedAll(TENANT)],
      storage: StorageType.Memory,
      max_msgs_per_subject: 1,
      max_bytes: 1024 ** 2,
    });
    const log = await new JetStreamAnsweredLog({ nc: t.connection, tenant: TENANT }).start();
    expect((await jsm.streams.info(ANSWERED_STREAM)).config).toMatchObject({ storage: 'file', max_msgs_per_subject: 1 });
    log.mark('upgraded-1', 'm1');
    await waitUntil(async () => (await log.published('upgraded-1', 'm1')) || undefined, 'the marker, stored on disk', 20_000);
  }, 30_000);

  it("a marker outlives its server's restart", async () => {
    const t = await transport('restart-reader');
    const log = await new JetStreamAnsweredLog({ nc: t.connection, tenant: TENANT }).start();
    log.mark('restarted-1', 'm1');
    await waitUntil(async () => (await log.published('restarted-1', 'm1')) || undefined, 'the marker, stored', 20_000);
    await nats.restart();
    // Reads right after the restart may find no leader yet (unknown); then the stream says what it kept.
    const after = await waitUntil(
      async () => {
        const published = await log.published('restarted-1', 'm1');
        return published === undefined ? undefined : { published };
      },
      'an answer from the stream after the restart',
      30_000,
    );
    expect(after.published).toBe(true);
  }, 60_000);
});

describe("a node's heartbeat as its sign of life (rule 3 of docs/cluster.md)", () => {
  it("an aged-out heartbeat says its node is gone only while the bucket takes this node's own: a bucket that takes no writes cannot tell", async () => {
    const bucket = 'sealed_leases';
    const ttl = 1_500;
    const start = async (nodeId: string) => {
      const t = await transport(`leases-${nodeId}`);
      const leases = await new PartitionLeases({ nc: t.connection, tenant: TENANT, nodeId, partitions: 2, leaseTtlMs: ttl, bucket }).start();
      closers.push(() => leases.stop().catch(() => undefined));
      return { leases, t };
    };
    const own = await start('node-p');
    const dead = await start('node-q');
    expect(await own.leases.nodeAlive('node-q')).toBe(true);
    // Node q dies without a word: its heartbeat stays until it ages out of the bucket (max age: the ttl).
    await dead.t.close();
    await waitUntil(async () => (await own.leases.nodeAlive('node-q')) === false || undefined, 'node q gone by its heartbeat', 10_000, 100);
    // Node s stops cleanly: its heartbeat's delete marker says so at once.
    const stopped = await start('node-s');
    await stopped.leases.stop();
    expect(await own.leases.nodeAlive('node-s')).toBe(false);
    // Node r lives; then the bucket takes no more writes (sealed here: for a node it is the same as its
    // stream electing a leader or its server gone), so every heartbeat ages, node p's own as well as r's.
    const live = await start('node-r');
    expect(await own.leases.nodeAlive('node-r')).toBe(true);
    const jsm = await jetstreamManager(own.t.connection);
    const info = await jsm.streams.info(`KV_${bucket}`);
    // The client's update type leaves `sealed` out; the server takes it.
    const sealed: StreamConfig = { ...info.config, sealed: true };
    await jsm.streams.update(`KV_${bucket}`, sealed as Partial<StreamUpdateConfig>);
    // Node r is alive and its heartbeat grows older than the ttl; so does node p's: that says nothing about r.
    const aged = await waitUntil(
      async () => ((await own.leases.nodeAlive('node-r')) === true ? undefined : { alive: await own.leases.nodeAlive('node-r') }),
      "node r's heartbeat aged out",
      10_000,
      100,
    );
    expect(aged.alive).toBeUndefined();
    expect(await own.leases.nodeAlive('node-q')).toBeUndefined();
    // A clean stop stays a clean stop.
    expect(await own.leases.nodeAlive('node-s')).toBe(false);
    await live.t.close();
  }, 30_000);
});

describe('a second stored copy of a message (the stream missed the duplicate)', () => {
  // nats-server before 2.11 can store a message twice under one Nats-Msg-Id when a clustered stream's
  // leader changes while a client retries its publish (nats-server#6486); the chaos suite saw one answer
  // published twice that way after the thaw. Both copies reach the thread as new messages (two sequences).
  const copy = (at: number, id = 'dup-1/m1') => ({ stored: { at, id } });
  /** A node that answered the first stored copy of `m1` on the thread (sequence 1, stored at `at`). */
  const firstCopyAnswered = async (threadId: string, nodeId: string) => {
    const finals = await watchFinals(threadId);
    const a = await node(nodeId);
    const at = Date.now();
    (await a.host.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', { ...answered(1), ...copy(at, `${threadId}/m1`) })).publish?.({
      acked: true,
    });
    await waitUntil(() => finals.length === 1 || undefined, 'the answer');
    return { finals, a, at };
  };

  it('under the same Nats-Msg-Id within the duplicate window: acknowledged, not answered again', async () => {
    const threadId = 'dup-1';
    const { finals, a, at } = await firstCopyAnswered(threadId, 'node-g');
    const counted = async () => (await metrics.inboundDuplicates.get()).values[0]?.value ?? 0;
    const before = await counted();
    const second = await a.host.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', { ...answered(2), ...copy(at + 1_500) });
    expect(second).toEqual({ duplicate: true });
    expect((await counted()) - before).toBe(1);
    expect(finals).toEqual(['m1', await probe(a.host, threadId, finals, 3)]);
  }, 60_000);

  it('while the first copy is still being answered: one answer, from the first copy', async () => {
    const threadId = 'dup-2';
    const finals = await watchFinals(threadId);
    const a = await node('node-h');
    const at = Date.now();
    const both = await Promise.all([
      a.host.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', { ...answered(1), ...copy(at, 'dup-2/m1') }),
      a.host.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', { ...answered(2), ...copy(at + 20, 'dup-2/m1') }),
    ]);
    expect(both[1]).toEqual({ duplicate: true });
    for (const r of both) r.publish?.({ acked: true });
    await waitUntil(() => finals.length === 1 || undefined, 'the answer');
    expect(finals).toEqual(['m1', await probe(a.host, threadId, finals, 3)]);
  }, 60_000);

  it('the second copy reaching the next owner (the first node is gone): the record tells, not answered again', async () => {
    const threadId = 'dup-4';
    const { finals, a, at } = await firstCopyAnswered(threadId, 'node-j');
    await a.stop();
    const b = await node('node-k');
    const second = await b.host.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', { ...answered(2), ...copy(at + 800, 'dup-4/m1') });
    expect(second).toEqual({ duplicate: true });
    expect(finals).toEqual(['m1', await probe(b.host, threadId, finals, 3)]);
  }, 60_000);

  it('after the window (a client sending the messageId again): its answer again', async () => {
    const threadId = 'dup-3';
    const { finals, a, at } = await firstCopyAnswered(threadId, 'node-i');
    await a.host.deliver(threadId, userMessage('hello', { messageId: 'm1' }), 'local', { ...answered(2), ...copy(at + 180_000, 'dup-3/m1') });
    await waitUntil(() => finals.length === 2 || undefined, 'the answer again');
    expect(finals).toEqual(['m1', 'm1']);
  }, 60_000);
});
