/**
 * The durability section of the bench (issue "Durable threads"), over the bench's nats-server:
 *
 *   a. durable turn throughput: the "Troupe full turn" of bench/run.ts (user -> thread -> echo agent ->
 *      user on a durable node: JetStream ingress, KV store, the stream message acked only after the KV
 *      commit), next to a "raw turn" of the same primitives done directly with the NATS client: a
 *      JetStream publish to a scratch stream + a KV compare-and-set update (`kv.update(key, value,
 *      revision)`) on a scratch bucket + a core request-reply to an echo responder, same concurrency;
 *   b. memory per idle thread, live and passivated (bench/memory.ts, in a child process with gc());
 *   c. rehydrate latency: a turn on a passivated thread (state in JetStream KV) against a turn on a live
 *      one, `ThreadHost.rehydrate` alone, and a raw KV get of the record.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import type { TroupeClient } from '../src/sdk/client.js';
import type { TroupeNode } from '../src/actors/node.js';
import { INGRESS_STREAM } from '../src/transport/jetstream/ingress.js';
import { DEFAULT_THREAD_BUCKET } from '../src/store/kv.js';
import { sequential, type ConcurrentResult, type Op, type SequentialResult } from './measure.js';
import { formatRate, formatRatio, formatUs, renderTable } from './table.js';

const BENCH_DIR = import.meta.dirname;
const REPO_ROOT = join(BENCH_DIR, '..');
const nanos = (ms: number) => ms * 1_000_000;
const describe = (err: unknown) => (err instanceof Error ? `${err.name}: ${err.message}` : String(err));

export interface Measured {
  name: string;
  sequential: SequentialResult;
  concurrent: ConcurrentResult;
}

// ---------------------------------------------------------------------------------------------------
// a. Raw turn and the durable turn's footprint in JetStream

export const SCRATCH_STREAM = 'BENCH_SCRATCH';
export const SCRATCH_BUCKET = 'bench_scratch';

/** What a durable turn costs in JetStream, from the stream sequences before and after a run. */
export interface StreamCounters {
  /** TROUPE_IN last sequence: one stored message per user message. */
  inSeq: number;
  /** KV_troupe_threads last sequence: one per thread-record write (create or update). */
  kvSeq: number;
}

/** NaN when a stream is missing (then the durable rows failed, and say why). */
export async function streamCounters(jsm: JetStreamManager): Promise<StreamCounters> {
  const seq = (stream: string) =>
    jsm.streams.info(stream).then(
      (i) => i.state.last_seq,
      () => Number.NaN,
    );
  const [inSeq, kvSeq] = await Promise.all([seq(INGRESS_STREAM), seq(`KV_${DEFAULT_THREAD_BUCKET}`)]);
  return { inSeq, kvSeq };
}

/** Messages still in TROUPE_IN (work queue: acked ones are removed), after waiting up to `ms` for acks; NaN without the stream. */
export async function unackedInbound(jsm: JetStreamManager, ms = 3_000): Promise<number> {
  const deadline = Date.now() + ms;
  for (;;) {
    const n = await jsm.streams.info(INGRESS_STREAM).then(
      (i) => i.state.messages,
      () => Number.NaN,
    );
    if (n === 0 || Number.isNaN(n) || Date.now() > deadline) return n;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Mean encoded size of the stored records of `threadIds` (the KV entry's value length). */
export async function meanRecordBytes(nc: NatsConnection, tenant: string, threadIds: string[]): Promise<number> {
  const kv = await new Kvm(nc).open(DEFAULT_THREAD_BUCKET);
  let total = 0;
  let n = 0;
  for (const id of threadIds) {
    const e = await kv.get(`${tenant}.${id}`);
    if (e?.operation !== 'PUT') continue;
    total += e.length;
    n++;
  }
  return n ? total / n : Number.NaN;
}

export interface RawTurn {
  op: Op;
  js: JetStreamClient;
  kv: KV;
  stop(): Promise<void>;
}

/**
 * What a durable Troupe turn keeps beyond the raw turn's NATS work (bench/turn-floor.ts). Given to
 * `startRawTurn`, the same NATS work carries them: the row is then the floor of the durable turn.
 */
export interface TurnGuarantees {
  /** The message the client of worker `w` publishes. */
  message(w: number): Uint8Array;
  /**
   * The node side's turn for worker `w` on the stored message: the value to write and the answer to publish
   * (after the ack); `publish` sends an event to the client before it.
   */
  turn(w: number, data: Uint8Array, publish: (event: Uint8Array) => void): Promise<{ value: Uint8Array; answer: Uint8Array }>;
  /** What the node does once the answer went out. */
  answered?(w: number): void;
  /** The client side: reads an event (throws on a wrong one); true for the answer the send waits for. */
  check(data: Uint8Array): boolean;
}

/**
 * The raw turn: the work a durable Troupe turn does, with the NATS primitives alone and nothing of Troupe.
 * The "client" publishes the user message to a work-queue stream configured like TROUPE_IN (with a message
 * id) and waits for the answer on a core subject; the "node" side receives it from a durable pull consumer
 * (explicit ack, as the ingress), makes a core request to the echo responder (the agent hop), writes the
 * worker's key with one KV compare-and-set (one write per turn, as the thread host commits at rest; the
 * bucket is configured like the thread store), double-acks the stream message once the write is done,
 * then publishes the answer, which the client receives. `valueBytes`: the KV value; `messageBytes`: the
 * published message and the answer. With `guarantees`, their message, turn and check replace the fixed
 * bytes and the echo request; `name` keeps its stream, bucket and subjects apart from another's.
 */
export async function startRawTurn(
  nc: NatsConnection,
  opts: {
    echoSubject: string;
    request: Uint8Array;
    valueBytes: number;
    messageBytes: number;
    workers: number;
    timeoutMs: number;
    replicas?: number;
    name?: string;
    guarantees?: TurnGuarantees;
  },
): Promise<RawTurn> {
  const name = opts.name ?? 'raw';
  const stream = `${SCRATCH_STREAM}_${name.toUpperCase()}`;
  const inSubject = `bench.scratch.${name}`;
  const outSubject = `bench.rawout.${name}`;
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  await jsm.streams.add({
    name: stream,
    subjects: [`${inSubject}.>`],
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
    duplicate_window: nanos(2 * 60_000),
    max_age: nanos(24 * 60 * 60_000),
    max_msgs: 100_000,
    discard: DiscardPolicy.Old,
    num_replicas: opts.replicas ?? 1,
  });
  await jsm.consumers.add(stream, {
    durable_name: name,
    filter_subject: `${inSubject}.>`,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(30_000),
    max_ack_pending: 1_024,
    num_replicas: opts.replicas ?? 1,
  });
  const kv = await new Kvm(nc).create(`${SCRATCH_BUCKET}_${name}`, {
    history: 1,
    ttl: 24 * 60 * 60_000,
    replicas: opts.replicas ?? 1,
    storage: StorageType.File,
  });
  const value = new Uint8Array(Math.max(1, Math.round(opts.valueBytes))).fill(0x61);
  const message = new Uint8Array(Math.max(1, Math.round(opts.messageBytes))).fill(0x62);
  const revisions: number[] = [];
  for (let w = 0; w < opts.workers; w++) revisions[w] = await kv.put(`w${w}`, value);
  const rawTurn = async (): Promise<{ value: Uint8Array; answer: Uint8Array }> => {
    const res = await nc.request(opts.echoSubject, opts.request, { timeout: opts.timeoutMs });
    if (res.data.length !== opts.request.length) throw new Error(`echo returned ${res.data.length} bytes, sent ${opts.request.length}`);
    return { value, answer: message };
  };
  const g = opts.guarantees;

  // The node side: consume, hop, commit, ack, answer.
  const failures: string[] = [];
  const consumer = await js.consumers.get(stream, name);
  const messages = await consumer.consume({
    max_messages: 256,
    callback: (m) => {
      void (async () => {
        const w = Number(m.subject.slice(inSubject.length + 1));
        const done = g ? await g.turn(w, m.data, (event) => nc.publish(`${outSubject}.${w}`, event)) : await rawTurn();
        const rev = revisions[w];
        if (rev === undefined) throw new Error(`no revision for worker ${w}`);
        revisions[w] = await kv.update(`w${w}`, done.value, rev);
        await m.ackAck({ timeout: opts.timeoutMs });
        nc.publish(`${outSubject}.${w}`, done.answer);
        g?.answered?.(w);
      })().catch((err: unknown) => {
        failures.push(String(err));
        m.nak();
      });
    },
  });

  // The client side: one turn in flight per worker, answered on its own subject.
  const waiting = new Map<number, { resolve: () => void; reject: (err: Error) => void }>();
  const answers = nc.subscribe(`${outSubject}.*`, {
    callback: (_err, m) => {
      const w = Number(m.subject.slice(outSubject.length + 1));
      const wait = waiting.get(w);
      if (!wait) return;
      try {
        if (g && !g.check(m.data)) return;
      } catch (err) {
        waiting.delete(w);
        wait.reject(err as Error);
        return;
      }
      waiting.delete(w);
      wait.resolve();
    },
  });
  const op: Op = async (w) => {
    let timer: NodeJS.Timeout | undefined;
    const answered = new Promise<void>((resolve, reject) => {
      waiting.set(w, { resolve, reject });
      timer = setTimeout(
        () => reject(new Error(`no answer within ${opts.timeoutMs} ms${failures.length ? ` (node side: ${failures.at(-1)})` : ''}`)),
        opts.timeoutMs,
      );
    });
    try {
      const ack = await js.publish(`${inSubject}.${w}`, g ? g.message(w) : message, { msgID: randomUUID(), timeout: opts.timeoutMs });
      if (ack.duplicate || ack.stream !== stream) throw new Error(`unexpected publish ack ${JSON.stringify(ack)}`);
      await answered;
    } finally {
      clearTimeout(timer);
      waiting.delete(w);
    }
  };
  return {
    op,
    js,
    kv,
    stop: async () => {
      answers.unsubscribe();
      messages.stop();
      await jsm.streams.delete(stream).catch(() => undefined);
      await kv.destroy().catch(() => undefined);
    },
  };
}

export interface TurnFootprint {
  /** User messages stored in TROUPE_IN during the durable full-turn rows. */
  messages: number;
  /** Thread-record writes to KV during those rows. */
  kvWrites: number;
  kvWritesPerTurn: number;
  /** Mean size of the records of the 64 long-lived threads (history at its limit). */
  recordBytes: number;
  /** The published user message. */
  messageBytes: number;
  /** Messages left unacked in TROUPE_IN after the runs (0: every message was committed and acked). */
  unacked: number;
}

export interface ThroughputResults {
  rawTurn: Measured;
  durableTurn: Measured;
  /**
   * For comparison: the raw turn with the durable turn's guarantees (its floor, bench/turn-floor.ts), the same
   * turn without durability (NATS queue-group ingress, memory store; embedded mesh).
   */
  others: Measured[];
  footprint: TurnFootprint;
}

// ---------------------------------------------------------------------------------------------------
// c. Rehydrate

export type RehydrateRow = SequentialResult;

export interface RehydrateResults {
  threads: number;
  /** Record size of these one-turn threads in KV. */
  recordBytes: number;
  liveTurn: RehydrateRow;
  passivatedTurn: RehydrateRow;
  /** A turn on a dormant thread (actor stopped, record JSON in the host: woken without a KV read); absent in results from before it existed. */
  dormantTurn?: RehydrateRow;
  rehydrate: RehydrateRow;
  kvGet: RehydrateRow;
  /** Thread-record writes to KV per thread: passivating an idle live thread, and `rehydrate()` (the load). */
  kvWritesPerPassivation: number;
  kvWritesPerRehydrate: number;
  /** Thread-record writes to KV per thread to make idle live threads dormant (ThreadHost.sleepThreads). */
  kvWritesPerSleep?: number;
  /**
   * The same turns on threads at the history limit (25 turns before: 50 messages), where waking costs most;
   * absent in results from before it existed.
   */
  atLimit?: { threads: number; recordBytes: number; liveTurn: RehydrateRow; dormantTurn: RehydrateRow; passivatedTurn: RehydrateRow };
}

/** Turns each thread of the rehydrate rows' history-limit part has before it is measured: 50 messages. */
const AT_LIMIT_TURNS = 25;

/** One operation at a time, `n` times: the latency of each (measure.ts's `sequential`). */
const timed = (n: number, op: (i: number) => Promise<unknown>): Promise<RehydrateRow> => sequential((_worker, i) => op(i), n);

/** Passivates every live thread of the node and checks none is left. */
async function passivateAll(node: TroupeNode): Promise<void> {
  await node.threads.releaseThreads(() => true);
  const left = node.threads.liveCount();
  if (left !== 0) throw new Error(`${left} threads still live after passivating all`);
}

/**
 * On a durable node (KV store): `n` threads with one completed turn each, passivated; then, one thread at
 * a time: `ThreadHost.rehydrate` (KV get + restore the actor), passivate again, a turn on each passivated
 * thread, a turn on each (now live) thread, a turn on each after it was made dormant, and a raw `kv.get`
 * of each record.
 */
export async function runRehydrateBench(opts: {
  node: TroupeNode;
  client: TroupeClient;
  nc: NatsConnection;
  tenant: string;
  text: string;
  n: number;
  /** Threads of the history-limit part (default n / 5, at least 20). */
  atLimitN?: number;
  timeoutMs: number;
  log: (s: string) => void;
}): Promise<RehydrateResults> {
  const { node, client, tenant, text, n, timeoutMs, log } = opts;
  const ids = Array.from({ length: n }, () => `bench-rh-${randomUUID()}`);
  const turn = async (threadId: string) => {
    const res = await client.send(text, { threadId, timeoutMs });
    if (res.error) throw new Error(`turn failed: ${res.error.code}: ${res.error.message}`);
    if (res.text !== text) throw new Error(`turn answered "${res.text}" (state ${res.final.status.state})`);
  };
  const jsm = await jetstreamManager(opts.nc);
  const kvSeq = async () => (await jsm.streams.info(`KV_${DEFAULT_THREAD_BUCKET}`)).state.last_seq;
  log(`  rehydrate (${n} threads on KV): create…`);
  // Threads left live by earlier rows go first, so the write counts below are about these threads only.
  await passivateAll(node);
  // Created 16 at a time; each must succeed, or the rows below would measure something else.
  for (let i = 0; i < ids.length; i += 16) await Promise.all(ids.slice(i, i + 16).map(turn));
  // The final answer goes out before the commit of the final state: let those commits land first.
  await new Promise((r) => setTimeout(r, 300));
  const beforePassivate = await kvSeq();
  await passivateAll(node);
  const kvWritesPerPassivation = ((await kvSeq()) - beforePassivate) / n;
  const kv = await new Kvm(opts.nc).open(DEFAULT_THREAD_BUCKET);
  const recordBytes = await meanRecordBytes(opts.nc, tenant, ids);
  const storedState = async (id: string) => (await node.threads.store.get(tenant, id))?.record.task.status.state;
  const expected = await storedState(ids[0]!);

  log(' rehydrate()…');
  const beforeRehydrate = await kvSeq();
  const rehydrate = await timed(n, async (i) => {
    const state = await node.threads.rehydrate(ids[i]!);
    if (state !== expected) throw new Error(`rehydrated thread is ${state}, stored as ${expected}`);
  });
  if (node.threads.liveCount() !== n - rehydrate.errors) throw new Error(`${node.threads.liveCount()} live threads after rehydrating ${n}`);
  // rehydrate() resolves once the actor is restored; commits it schedules land right after.
  await new Promise((r) => setTimeout(r, 200));
  const kvWritesPerRehydrate = ((await kvSeq()) - beforeRehydrate) / n;
  await passivateAll(node);

  log(' turn on passivated…');
  const passivatedTurn = await timed(n, (i) => turn(ids[i]!));
  log(' turn on live…');
  const liveTurn = await timed(n, (i) => turn(ids[i]!));
  log(' turn on dormant…');
  // The live turns' final commits land right after their answers.
  await new Promise((r) => setTimeout(r, 200));
  const beforeSleep = await kvSeq();
  const dormant = await node.threads.sleepThreads();
  if (dormant !== n) throw new Error(`${dormant} of ${n} threads dormant after sleepThreads`);
  const kvWritesPerSleep = ((await kvSeq()) - beforeSleep) / n;
  const dormantTurn = await timed(n, (i) => turn(ids[i]!));
  log(' kv.get…');
  const kvGet = await timed(n, async (i) => {
    const e = await kv.get(`${tenant}.${ids[i]!}`);
    if (e?.operation !== 'PUT' || e.length === 0) throw new Error(`no record for ${ids[i]}`);
  });

  // At the history limit: live, then dormant, then passivated, one turn each, one thread at a time.
  const m = opts.atLimitN ?? Math.max(20, Math.floor(n / 5));
  log(` at the history limit (${m} threads × ${AT_LIMIT_TURNS} turns)…`);
  await passivateAll(node);
  const limitIds = Array.from({ length: m }, () => `bench-rh-limit-${randomUUID()}`);
  for (let i = 0; i < limitIds.length; i += 16) {
    const batch = limitIds.slice(i, i + 16);
    for (let t = 0; t < AT_LIMIT_TURNS; t++) await Promise.all(batch.map(turn));
  }
  const limitLive = await timed(m, (i) => turn(limitIds[i]!));
  await new Promise((r) => setTimeout(r, 200));
  const asleep = await node.threads.sleepThreads();
  if (asleep !== m) throw new Error(`${asleep} of ${m} threads at the history limit dormant after sleepThreads`);
  const limitDormant = await timed(m, (i) => turn(limitIds[i]!));
  await new Promise((r) => setTimeout(r, 200));
  await passivateAll(node);
  const limitPassivated = await timed(m, (i) => turn(limitIds[i]!));
  const atLimit = {
    threads: m,
    recordBytes: await meanRecordBytes(opts.nc, tenant, limitIds),
    liveTurn: limitLive,
    dormantTurn: limitDormant,
    passivatedTurn: limitPassivated,
  };
  log(' done\n');
  return {
    threads: n,
    recordBytes,
    liveTurn,
    passivatedTurn,
    dormantTurn,
    rehydrate,
    kvGet,
    kvWritesPerPassivation,
    kvWritesPerRehydrate,
    kvWritesPerSleep,
    atLimit,
  };
}

// ---------------------------------------------------------------------------------------------------
// b. Memory (child process)

export interface MemorySample {
  heapUsed: number;
  arrayBuffers: number;
  external: number;
  rss: number;
}

export interface MemoryResults {
  mesh: string;
  threads: number;
  /** Turns each thread completed before the measurement (25 = 50 messages, the default history limit). */
  turnsPerThread: number;
  /** Mean messages in a stored record's history. */
  historyMessages: number;
  liveCount: number;
  liveAfterPassivate: number;
  records: number;
  recordStates: Record<string, number>;
  recordBytesPerThread: number;
  createMs: number;
  errors: number;
  firstError?: string;
  /** Threads dormant after ThreadHost.sleepThreads (all of them). */
  dormantCount?: number;
  /** `dormant`: every thread's actor stopped, its committed record kept in the host as bytes (absent in results before it existed). */
  samples: { baseline: MemorySample; live: MemorySample; dormant?: MemorySample; passivated: MemorySample; storeEmptied: MemorySample };
  /** Heap per started XState root actor of a one-state machine: the floor of any live thread (an XState actor). */
  bareActorBytes?: number;
  /** The same actor holding a copy of a measured thread's history (its messages as objects) in its context. */
  historyActorBytes?: number;
}

/** Runs bench/memory.ts in `node --expose-gc --import tsx` and returns its JSON. */
export function runMemoryChild(env: Record<string, string> = {}): Promise<MemoryResults> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--expose-gc', '--conditions=source', '--import', 'tsx', join(BENCH_DIR, 'memory.ts'), '--json'], {
      cwd: REPO_ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (code !== 0) return reject(new Error(`bench/memory.ts exited with ${code ?? signal}`));
      const line = out.trim().split('\n').pop() ?? '';
      try {
        resolve(JSON.parse(line) as MemoryResults);
      } catch (err) {
        reject(new Error(`bench/memory.ts printed no JSON result: ${describe(err)}\n${out}`));
      }
    });
  });
}

const HEAP_BUDGET = 2 * 1024 ** 3;

function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes)) return '-';
  const sign = bytes < 0 ? '-' : '';
  const b = Math.abs(bytes);
  if (b < 1024) return `${sign}${b.toFixed(0)} B`;
  if (b < 1024 ** 2) return `${sign}${(b / 1024).toFixed(1)} KiB`;
  return `${sign}${(b / 1024 ** 2).toFixed(1)} MiB`;
}

interface MemoryRow {
  name: string;
  heap: number;
  buffers: number;
}

export interface MemoryDerived {
  liveEmbedded: MemoryRow;
  liveNode: MemoryRow;
  /** Dormant threads (ThreadHost `dormantMs`): their records as bytes in the host; absent in results from before. */
  dormantEmbedded?: MemoryRow;
  dormantNode?: MemoryRow;
  passivatedEmbedded: MemoryRow;
  passivatedNode: MemoryRow;
  store: MemoryRow;
  /** Live threads in 2 GiB (heapUsed + arrayBuffers per thread). */
  liveThreadsIn2GiB: { embedded: number; node: number };
}

export function deriveMemory(r: MemoryResults): MemoryDerived {
  const { baseline: b, live, passivated: p, storeEmptied: e } = r.samples;
  const per = (x: MemorySample, y: MemorySample) => ({ heap: (x.heapUsed - y.heapUsed) / r.threads, buffers: (x.arrayBuffers - y.arrayBuffers) / r.threads });
  const store = per(p, e);
  const liveAll = per(live, b);
  const liveNode = { heap: liveAll.heap - store.heap, buffers: liveAll.buffers - store.buffers };
  const dormantAll = r.samples.dormant ? per(r.samples.dormant, b) : undefined;
  const total = (m: { heap: number; buffers: number }) => m.heap + m.buffers;
  return {
    liveEmbedded: { name: 'live, embedded (actor + memory-store record)', ...liveAll },
    liveNode: { name: 'live, durable node (actor; record in KV)', ...liveNode },
    ...(dormantAll
      ? {
          dormantEmbedded: { name: 'dormant, embedded (record JSON in the host + memory-store record)', ...dormantAll },
          dormantNode: {
            name: 'dormant, durable node (record JSON in the host; record in KV)',
            heap: dormantAll.heap - store.heap,
            buffers: dormantAll.buffers - store.buffers,
          },
        }
      : {}),
    passivatedEmbedded: { name: 'passivated, embedded (memory-store record + host residue)', ...per(p, b) },
    passivatedNode: { name: 'passivated, durable node (host residue)', ...per(e, b) },
    store: { name: 'memory store footprint (record + slot)', ...store },
    liveThreadsIn2GiB: { embedded: HEAP_BUDGET / total(liveAll), node: HEAP_BUDGET / total(liveNode) },
  };
}

export function renderMemoryReport(r: MemoryResults, kvRecordBytes?: number): string {
  const d = deriveMemory(r);
  const total = (m: MemoryRow) => m.heap + m.buffers;
  const liveOf = (m: MemoryRow) => (m === d.passivatedNode || m === d.liveNode || m === d.dormantNode ? d.liveNode : d.liveEmbedded);
  const row = (m: MemoryRow) => [
    m.name,
    formatBytes(m.heap),
    formatBytes(m.buffers),
    formatBytes(total(m)),
    formatRatio(total(m) / total(liveOf(m))),
    m === d.liveEmbedded || m === d.liveNode ? formatRate(HEAP_BUDGET / total(m)) : '-',
  ];
  const table = renderTable(
    ['thread', 'heap/thread', 'buffers/thread', 'total/thread', 'vs live', 'live threads in 2 GiB'],
    [
      row(d.liveEmbedded),
      row(d.liveNode),
      ...(d.dormantEmbedded && d.dormantNode ? [row(d.dormantEmbedded), row(d.dormantNode)] : []),
      row(d.passivatedEmbedded),
      row(d.passivatedNode),
      row(d.store),
    ],
    ['left', 'right', 'right', 'right', 'right', 'right'],
  );
  const s = r.samples;
  const states = Object.entries(r.recordStates)
    .map(([k, v]) => `${v} ${k}`)
    .join(', ');
  return [
    `b. memory per idle thread — ${r.mesh}; ${r.threads} threads, ${r.turnsPerThread === 1 ? 'one completed turn' : `${r.turnsPerThread} completed turns`} each ` +
      `(${r.historyMessages.toFixed(0)} messages of history; created in ${(r.createMs / 1000).toFixed(1)} s, ` +
      `${r.errors} errors); gc() before each sample`,
    '',
    table,
    `heap: V8 heapUsed; buffers: arrayBuffers (the memory store's record bytes are Uint8Arrays, off the V8 heap); ` +
      'vs live: ÷ the live row of the same mode; 2 GiB ÷ total/thread.',
    `live threads: ${r.liveCount} before passivation, ${r.liveAfterPassivate} after (ThreadHost.releaseThreads); ` +
      `records: ${r.records} (${states}), ${formatBytes(r.recordBytesPerThread)} encoded per thread in the memory store` +
      (kvRecordBytes !== undefined ? `, ${formatBytes(kvRecordBytes)} per one-turn thread in the JetStream KV bucket (rehydrate threads below)` : ''),
    `heapUsed: baseline ${formatBytes(s.baseline.heapUsed)}, live ${formatBytes(s.live.heapUsed)}, passivated ${formatBytes(s.passivated.heapUsed)}, ` +
      `store emptied ${formatBytes(s.storeEmptied.heapUsed)}; rss baseline ${formatBytes(s.baseline.rss)}, live ${formatBytes(s.live.rss)}: ` +
      `${formatBytes((s.live.rss - s.baseline.rss) / r.threads)} of RSS per live thread (embedded: the record included)`,
    `one node holds ~${formatRate(d.liveThreadsIn2GiB.node)} live idle threads in 2 GiB with the KV store ` +
      `(~${formatRate(d.liveThreadsIn2GiB.embedded)} embedded, records in process); a passivated thread costs the durable node ` +
      `${formatBytes(total(d.passivatedNode))} (ThreadHost keeps only a counter; the residue is compiled code and GC noise, not thread objects)`,
    ...(r.bareActorBytes !== undefined
      ? [
          `the floor of a live thread: a started XState root actor of a one-state machine holds ${formatBytes(r.bareActorBytes)} (its own actor system, scheduler, snapshot)`,
        ]
      : []),
    ...(r.historyActorBytes !== undefined
      ? [`the same actor holding a copy of the thread's history (${r.historyMessages} messages as objects) in its context: ${formatBytes(r.historyActorBytes)}`]
      : []),
    ...(r.firstError ? ['', `first error: ${r.firstError}`] : []),
  ].join('\n');
}

// ---------------------------------------------------------------------------------------------------
// Report

/** A part that could not run: why. */
export interface Failed {
  failed: string;
}

export interface DurabilityResults {
  throughput: ThroughputResults;
  memory: MemoryResults | Failed;
  /** The same measurement on threads at the history limit (BENCH_MEM_TURNS=25). */
  memoryAtLimit: MemoryResults | Failed;
  rehydrate: RehydrateResults | Failed;
}

const isFailed = (x: object): x is Failed => 'failed' in x;

/** Runs a part of the section; a failure is reported in its place instead of ending the bench. */
export async function attempt<T>(what: string, fn: () => Promise<T>, log: (s: string) => void): Promise<T | Failed> {
  try {
    return await fn();
  } catch (err) {
    log(` FAILED: ${describe(err)}\n`);
    return { failed: `${what}: ${describe(err)}` };
  }
}

/** Errors of the section's parts (0 when all ran clean). */
export function durabilityErrors(r: DurabilityResults): number {
  const m = (x: Measured) => x.sequential.errors + x.concurrent.errors;
  let n = m(r.throughput.rawTurn);
  n += isFailed(r.memory) ? 1 : r.memory.errors;
  n += isFailed(r.rehydrate)
    ? 1
    : [
        r.rehydrate.liveTurn,
        r.rehydrate.passivatedTurn,
        r.rehydrate.dormantTurn,
        r.rehydrate.rehydrate,
        r.rehydrate.kvGet,
        r.rehydrate.atLimit?.liveTurn,
        r.rehydrate.atLimit?.dormantTurn,
        r.rehydrate.atLimit?.passivatedTurn,
      ].reduce((a, s) => a + (s?.errors ?? 0), 0);
  return n;
}

function renderThroughput(t: ThroughputResults, concurrency: number): string {
  const raw = t.rawTurn;
  const row = (m: Measured) => {
    const tput = m.concurrent.perSecond / raw.concurrent.perSecond;
    return [
      m.name,
      formatUs(m.sequential.p50Us),
      formatUs(m.sequential.p99Us),
      formatRatio(m.sequential.p50Us / raw.sequential.p50Us),
      formatRate(m.concurrent.perSecond),
      formatUs(m.concurrent.latency.p50Us),
      formatUs(m.concurrent.latency.p99Us),
      formatRatio(m.concurrent.latency.p99Us / raw.concurrent.latency.p99Us),
      formatRatio(tput),
      formatRatio(1 / tput),
      String(m.sequential.errors + m.concurrent.errors),
    ];
  };
  const rows = [raw, t.durableTurn, ...t.others];
  const table = renderTable(
    [
      'turn',
      'p50',
      'p99',
      'p50/raw',
      `turns/s @${concurrency}`,
      `p50 @${concurrency}`,
      `p99 @${concurrency}`,
      `p99@${concurrency}/raw`,
      'tput/raw',
      'slowdown',
      'errors',
    ],
    rows.map(row),
    ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
  );
  const errors = rows.flatMap((m) =>
    [m.sequential.firstError, m.concurrent.firstError].filter((e): e is string => e !== undefined).map((e) => `  ${m.name}: ${e}`),
  );
  const f = t.footprint;
  const d = t.durableTurn;
  return [
    'durable threads — a. turn throughput (tenant demo: JetStream ingress TROUPE_IN + KV store, ack after commit)',
    '',
    table,
    `p50, p99: one turn at a time; @${concurrency}: ${concurrency} threads with one turn in flight each. ` +
      'raw turn = js.publish (work-queue stream, msg id) + kv.update(key, value, revision) + nc.request to an echo responder, ' +
      `one connection, KV value ${formatBytes(f.recordBytes)} (the mean record of the long-lived threads), message ${formatBytes(f.messageBytes)}.`,
    `durable Troupe turn = the "Troupe full turn, durable" row above (same run): ${f.messages} user messages stored in ${INGRESS_STREAM}, ` +
      `${f.kvWrites} thread-record writes to KV (${f.kvWritesPerTurn.toFixed(2)} per turn, vs 1 in the raw turn); ` +
      `${f.unacked} messages left unacked in ${INGRESS_STREAM} after the durable rows (0 = every message was committed, then acked).`,
    `  durable turn: ${formatRatio(d.concurrent.perSecond / raw.concurrent.perSecond)} raw-turn throughput ` +
      `(${formatRate(d.concurrent.perSecond)} vs ${formatRate(raw.concurrent.perSecond)} turns/s), ` +
      `${formatRatio(d.sequential.p50Us / raw.sequential.p50Us)} raw-turn latency at p50`,
    ...(errors.length ? ['', 'first errors:', ...errors] : []),
  ].join('\n');
}

function renderRehydrate(h: RehydrateResults): string {
  const base = h.liveTurn;
  const rhRow = (name: string, s: RehydrateRow) => [
    name,
    String(s.count),
    formatUs(s.p50Us),
    formatUs(s.p99Us),
    formatRatio(s.p50Us / base.p50Us),
    formatRatio(s.p99Us / base.p99Us),
    String(s.errors),
  ];
  const rows: Array<readonly [string, RehydrateRow]> = [
    ['turn on a live thread', h.liveTurn],
    ...(h.dormantTurn ? [['turn on a dormant thread (record JSON in the node)', h.dormantTurn] as const] : []),
    ['turn on a passivated thread (state in KV)', h.passivatedTurn],
    ['ThreadHost.rehydrate() alone (KV get + restore)', h.rehydrate],
    ['raw kv.get of the record', h.kvGet],
    ...(h.atLimit
      ? ([
          [`turn on a live thread at the history limit (${h.atLimit.threads} threads, 50 messages)`, h.atLimit.liveTurn],
          ['turn on a dormant thread at the history limit', h.atLimit.dormantTurn],
          ['turn on a passivated thread at the history limit', h.atLimit.passivatedTurn],
        ] as const)
      : []),
  ];
  const table = renderTable(
    ['operation', 'runs', 'p50', 'p99', 'p50 vs live turn', 'p99 vs live turn', 'errors'],
    rows.map(([name, s]) => rhRow(name, s)),
    ['left', 'right', 'right', 'right', 'right', 'right', 'right'],
  );
  const errors = rows.flatMap(([name, s]) => (s.firstError ? [`  ${name}: ${s.firstError}`] : []));
  return [
    `c. rehydrate latency — durable node, ${h.threads} threads with one completed turn, passivated (state in JetStream KV); one at a time`,
    '',
    table,
    `a turn on a passivated thread costs ${formatUs(h.passivatedTurn.p50Us - h.liveTurn.p50Us)} more at p50 ` +
      `(${formatRatio(h.passivatedTurn.p50Us / h.liveTurn.p50Us)}); rehydrate() alone ${formatUs(h.rehydrate.p50Us)} p50 / ${formatUs(h.rehydrate.p99Us)} p99, ` +
      `of which the KV get ${formatUs(h.kvGet.p50Us)} p50` +
      (h.dormantTurn
        ? `; on a dormant thread ${formatUs(h.dormantTurn.p50Us - h.liveTurn.p50Us)} more (${formatRatio(h.dormantTurn.p50Us / h.liveTurn.p50Us)})`
        : ''),
    ...(h.atLimit
      ? [
          `at the history limit (records of ${formatBytes(h.atLimit.recordBytes)}), against a live turn there: dormant ${formatRatio(h.atLimit.dormantTurn.p50Us / h.atLimit.liveTurn.p50Us)} at p50, ` +
            `passivated ${formatRatio(h.atLimit.passivatedTurn.p50Us / h.atLimit.liveTurn.p50Us)}`,
        ]
      : []),
    `KV writes per thread: ${h.kvWritesPerPassivation.toFixed(2)} to passivate an idle live thread whose state was already committed, ` +
      `${h.kvWritesPerRehydrate.toFixed(2)} for rehydrate() (no message delivered)` +
      (h.kvWritesPerSleep !== undefined ? `, ${h.kvWritesPerSleep.toFixed(2)} to make it dormant` : ''),
    ...(errors.length ? ['', 'first errors:', ...errors] : []),
  ].join('\n');
}

export function renderDurabilityReport(r: DurabilityResults, concurrency: number): string {
  const kvRecordBytes = isFailed(r.rehydrate) ? undefined : r.rehydrate.recordBytes;
  return [
    renderThroughput(r.throughput, concurrency),
    '',
    isFailed(r.memory) ? `b. memory per idle thread — FAILED: ${r.memory.failed}` : renderMemoryReport(r.memory, kvRecordBytes),
    '',
    isFailed(r.memoryAtLimit) ? `b'. memory per idle thread at the history limit — FAILED: ${r.memoryAtLimit.failed}` : renderMemoryReport(r.memoryAtLimit),
    '',
    isFailed(r.rehydrate) ? `c. rehydrate latency — FAILED: ${r.rehydrate.failed}` : renderRehydrate(r.rehydrate),
  ].join('\n');
}
