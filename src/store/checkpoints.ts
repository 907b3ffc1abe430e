/**
 * Where a thread's checkpoints are kept (time travel), and the seam: `CheckpointStore`. A checkpoint is a
 * whole thread record as committed after a turn, plus what the turn did; a thread keeps its last `keep`
 * (the team's `checkpoints` setting) and the oldest go first. Implementations: `MemoryCheckpointStore`
 * (embedded mode, tests) and `StreamCheckpointStore` (a JetStream stream, checkpoint-stream.ts).
 *
 * Whole records, not differences: a difference needs the checkpoint before it, and with the oldest going
 * first a chain of differences loses its base. A record is already encoded once per turn for the thread
 * bucket; its checkpoint reuses those bytes (`encodeCheckpoint`).
 */
import { z } from 'zod';
import { CheckpointTurnSchema, DEFAULT_MAX_PAYLOAD, TroupeError } from '../protocol/index.js';
import { encodeRecord, threadKey } from './codec.js';
import { ThreadRecordSchema } from './types.js';

const CHECKPOINT_VERSION = 1;

const StoredCheckpointSchema = z.object({
  version: z.literal(CHECKPOINT_VERSION),
  n: z.number().int().min(1),
  tenant: z.string().min(1),
  threadId: z.string().min(1),
  /** The store revision of the record it copies. */
  revision: z.number().int().min(0),
  turn: CheckpointTurnSchema,
  record: ThreadRecordSchema,
});
export type StoredCheckpoint = z.infer<typeof StoredCheckpointSchema>;

export interface CheckpointStore {
  /** How many checkpoints a thread keeps at most (0: none are kept). */
  readonly keep: number;
  /** Adds a checkpoint; the thread's oldest goes when it has `keep`. The same `n` twice is stored once. */
  append(checkpoint: StoredCheckpoint): Promise<void>;
  /** A thread's checkpoints, oldest first. */
  list(tenant: string, threadId: string): Promise<StoredCheckpoint[]>;
  /** One checkpoint by its number, or undefined. */
  get(tenant: string, threadId: string, n: number): Promise<StoredCheckpoint | undefined>;
  /** Removes every checkpoint of a thread (erasing it). */
  erase(tenant: string, threadId: string): Promise<void>;
  close(): Promise<void>;
}

const encoder = new TextEncoder();

/**
 * A checkpoint as bytes: its envelope as JSON with the record's bytes as `encodeRecord` makes them (the
 * history and route log a thread keeps encoded are copied, not encoded again). Checked like a record:
 * PAYLOAD_TOO_LARGE past `maxBytes`.
 */
export function encodeCheckpoint(checkpoint: StoredCheckpoint, maxBytes = DEFAULT_MAX_PAYLOAD): Uint8Array {
  const { record, ...envelope } = checkpoint;
  const { data: recordBytes } = encodeRecord(record, Number.MAX_SAFE_INTEGER);
  const head = encoder.encode(`${JSON.stringify(envelope).slice(0, -1)},"record":`);
  const size = head.byteLength + recordBytes.byteLength + 1;
  if (size > maxBytes) {
    throw new TroupeError('PAYLOAD_TOO_LARGE', `checkpoint ${checkpoint.n} of thread ${checkpoint.threadId} is ${size} bytes; at most ${maxBytes} fit`, {
      size,
      limit: maxBytes,
    });
  }
  const out = new Uint8Array(size);
  out.set(head);
  out.set(recordBytes, head.byteLength);
  out[size - 1] = 0x7d; // }
  return out;
}

export function decodeCheckpoint(data: Uint8Array, where: string): StoredCheckpoint {
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder().decode(data));
  } catch (err) {
    throw new TroupeError('STORE_CORRUPT', `${where}: not JSON: ${(err as Error).message}`);
  }
  const parsed = StoredCheckpointSchema.safeParse(raw);
  if (!parsed.success) throw new TroupeError('STORE_CORRUPT', `${where}: ${parsed.error.issues[0]?.message ?? 'invalid'}`);
  return parsed.data;
}

export function checkKeep(keep: number): number {
  if (!Number.isInteger(keep) || keep < 0) throw new RangeError(`checkpoints kept must be a whole number >= 0, got ${keep}`);
  return keep;
}

/** Checkpoints in memory: per thread, the last `keep`, as their bytes (what the stream would hold). */
export class MemoryCheckpointStore implements CheckpointStore {
  readonly keep: number;
  readonly #threads = new Map<string, Array<{ n: number; data: Uint8Array }>>();

  constructor(opts: { keep: number }) {
    this.keep = checkKeep(opts.keep);
  }

  async append(checkpoint: StoredCheckpoint): Promise<void> {
    if (this.keep === 0) return;
    const key = threadKey(checkpoint.tenant, checkpoint.threadId);
    const data = encodeCheckpoint(checkpoint);
    let kept = this.#threads.get(key);
    if (!kept) this.#threads.set(key, (kept = []));
    if (kept.some((c) => c.n === checkpoint.n)) return;
    kept.push({ n: checkpoint.n, data });
    if (kept.length > this.keep) kept.splice(0, kept.length - this.keep);
  }

  async list(tenant: string, threadId: string): Promise<StoredCheckpoint[]> {
    const key = threadKey(tenant, threadId);
    return (this.#threads.get(key) ?? []).map((c) => decodeCheckpoint(c.data, `checkpoint ${c.n} of ${key}`));
  }

  async get(tenant: string, threadId: string, n: number): Promise<StoredCheckpoint | undefined> {
    const key = threadKey(tenant, threadId);
    const found = this.#threads.get(key)?.find((c) => c.n === n);
    return found ? decodeCheckpoint(found.data, `checkpoint ${n} of ${key}`) : undefined;
  }

  async erase(tenant: string, threadId: string): Promise<void> {
    this.#threads.delete(threadKey(tenant, threadId));
  }

  async close(): Promise<void> {
    this.#threads.clear();
  }
}
