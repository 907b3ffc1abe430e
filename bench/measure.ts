/**
 * Timing helpers for the benchmark: a sequential latency run, a fixed-concurrency throughput run and
 * percentiles. Times come from `process.hrtime.bigint()` and are reported in microseconds.
 */

import { randomUUID } from 'node:crypto';
import { HEADERS, MessageSchema, decode, encodeJson, messageText, type Message } from '../src/protocol/index.js';
import { NatsTransport, type NatsConnectOptions } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import type { Subscription, Transport } from '../src/transport/types.js';

/**
 * The floor of an agent hop's guarantees (bench/run.ts and bench/profile-hop.ts): a responder on agent
 * `agentId`'s inbox (connect it as that agent's user) that does only what a hop must — reads the call's
 * headers, validates the A2A message (size, JSON, depth, schema) and answers with a new A2A message — while
 * the caller validates the reply. No agent actor, metrics, idempotency cache or handler context: what
 * stands between it and the agent hop is Troupe's agent host; between it and raw, the guarantees.
 */
export function floorResponder(t: Transport, tenant: string, agentId: string): Subscription {
  return t.subscribe(
    subjects.agentInbox(tenant, agentId),
    (msg) => {
      const { headers } = msg;
      const message = decode(MessageSchema, msg.data, 'message to the floor responder');
      const threadId = headers[HEADERS.threadId] ?? '';
      const answer: Message = {
        kind: 'message',
        role: 'agent',
        messageId: randomUUID(),
        contextId: headers[HEADERS.contextId] ?? message.contextId ?? threadId,
        taskId: headers[HEADERS.taskId] ?? message.taskId ?? threadId,
        parts: [{ kind: 'text', text: messageText(message) }],
      };
      msg.respond(encodeJson(answer));
    },
    { queue: subjects.agentQueue(agentId) },
  );
}

/** The headers a thread's call of an agent carries (see ThreadHost's agent calls): the user's first hop. */
export function threadCallHeaders(tenant: string, threadId: string, messageId: string): Record<string, string> {
  return {
    [HEADERS.threadId]: threadId,
    [HEADERS.tenant]: tenant,
    [HEADERS.hop]: '0',
    [HEADERS.sender]: 'user',
    [HEADERS.callId]: `${threadId}/${messageId}`,
    [HEADERS.taskId]: threadId,
    [HEADERS.contextId]: threadId,
  };
}

/** One operation; `worker` is the concurrent worker's index (0 in a sequential run), `i` its iteration. */

export type Op = (worker: number, i: number) => Promise<unknown>;

export interface LatencyStats {
  count: number;
  p50Us: number;
  p99Us: number;
  meanUs: number;
  minUs: number;
  maxUs: number;
}

export interface SequentialResult extends LatencyStats {
  errors: number;
  firstError?: string;
}

export interface ConcurrentResult {
  concurrency: number;
  /** Successful operations. */
  ops: number;
  errors: number;
  firstError?: string;
  seconds: number;
  perSecond: number;
  /** Latency of each operation while `concurrency` are in flight. */
  latency: LatencyStats;
}

/** Nearest-rank percentile of an ascending array. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export function summarize(samplesUs: number[]): LatencyStats {
  const sorted = Float64Array.from(samplesUs).sort();
  const n = sorted.length;
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    count: n,
    p50Us: percentile(sorted, 50),
    p99Us: percentile(sorted, 99),
    meanUs: n ? sum / n : Number.NaN,
    minUs: n ? sorted[0]! : Number.NaN,
    maxUs: n ? sorted[n - 1]! : Number.NaN,
  };
}

export const elapsedUs = (start: bigint): number => Number(process.hrtime.bigint() - start) / 1_000;

function describe(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

/**
 * What the runs of one operation gave, added up across windows: `sequential` and `concurrent` fill one
 * each, and a scenario measured in several windows (bench/run.ts, interleaved with the rows it is compared
 * with) passes the same tally to each window.
 */
export class Tally {
  readonly samples: number[] = [];
  errors = 0;
  firstError?: string;
  /** Wall time of the concurrent windows. */
  seconds = 0;

  failed(err: unknown): void {
    this.errors++;
    this.firstError ??= describe(err);
  }

  sequential(): SequentialResult {
    return { ...summarize(this.samples), errors: this.errors, ...(this.firstError ? { firstError: this.firstError } : {}) };
  }

  concurrent(concurrency: number): ConcurrentResult {
    return {
      concurrency,
      ops: this.samples.length,
      errors: this.errors,
      ...(this.firstError ? { firstError: this.firstError } : {}),
      seconds: this.seconds,
      perSecond: this.samples.length / this.seconds,
      latency: summarize(this.samples),
    };
  }
}

/** Runs `op` `n` times, one after another, and reports the latency distribution of the successful ones. */
export async function sequential(op: Op, n: number, tally = new Tally()): Promise<SequentialResult> {
  for (let i = 0; i < n; i++) {
    const start = process.hrtime.bigint();
    try {
      await op(0, i);
      tally.samples.push(elapsedUs(start));
    } catch (err) {
      tally.failed(err);
    }
  }
  return tally.sequential();
}

export interface ConcurrentOptions {
  concurrency: number;
  /** Stop starting new operations after this long. */
  seconds: number;
  /** ... or after this many were started, whichever comes first. */
  maxOps?: number;
}

/**
 * Keeps `concurrency` operations in flight: each worker starts its next one as soon as its last one
 * settles. Throughput counts successful operations over the wall time until the last one settled.
 */
export async function concurrent(op: Op, opts: ConcurrentOptions, tally = new Tally()): Promise<ConcurrentResult> {
  const maxOps = opts.maxOps ?? Number.POSITIVE_INFINITY;
  let started = 0;
  const begin = process.hrtime.bigint();
  const deadline = begin + BigInt(Math.round(opts.seconds * 1e9));

  const worker = async (w: number): Promise<void> => {
    for (let i = 0; started < maxOps && process.hrtime.bigint() < deadline; i++) {
      started++;
      const start = process.hrtime.bigint();
      try {
        await op(w, i);
        tally.samples.push(elapsedUs(start));
      } catch (err) {
        tally.failed(err);
      }
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency }, (_, w) => worker(w)));

  tally.seconds += elapsedUs(begin) / 1e6;
  return tally.concurrent(opts.concurrency);
}

/**
 * The connections of one bench section: `connect(name, user, tenant?)` opens one as `as(user, tenant)` of
 * its server or cluster, and `closeAll()` drains them all (closing any that will not drain).
 */
export function connections(as: (user: string, tenant?: string) => Omit<NatsConnectOptions, 'name'>) {
  const open: NatsTransport[] = [];
  return {
    async connect(name: string, user = 'node', tenant?: string): Promise<NatsTransport> {
      const t = await NatsTransport.connect({ ...as(user, tenant), name });
      open.push(t);
      return t;
    },
    closeAll: () => Promise.all(open.map((t) => t.drain().catch(() => t.close()))),
  };
}
