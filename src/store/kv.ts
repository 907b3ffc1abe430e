/**
 * ThreadStore over a JetStream KV bucket. Key `<tenant>.<threadId>`, value the JSON record,
 * revision the KV revision (the stream sequence of the last write to the key).
 *
 * Compare-and-set rides on the `Nats-Expected-Last-Subject-Sequence` header that `kv.create` and
 * `kv.update` send; the server answers a mismatch with JetStream API error 10071 ("wrong last sequence"),
 * which this class turns into STORE_CONFLICT.
 */
import { JetStreamApiCodes, JetStreamApiError, StorageType, jetstreamManager } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { DEFAULT_MAX_PAYLOAD, TroupeError } from '../protocol/index.js';
import { decodeRecord, encodeRecord, listEntry, matchesFilter, storeClosed, tenantPrefix, threadKey } from './codec.js';
import { silentLogger } from '../observability/logger.js';
import { checkReplicas, ensureReplicas } from '../transport/jetstream/replicas.js';
import { requireSerializableCas } from '../transport/jetstream/server-version.js';
import { isCreateOrBindTransient, retrySetup } from '../transport/jetstream/retry.js';
import type { Logger } from 'pino';
import type { StoredThread, ThreadListEntry, ThreadListFilter, ThreadRecord, ThreadStore } from './types.js';

export const DEFAULT_THREAD_BUCKET = 'troupe_threads';
export const DEFAULT_THREAD_TTL_MS = 24 * 60 * 60 * 1000;
const LIST_BATCH = 64;

export interface KvThreadStoreOptions {
  /** Bucket name (letters, digits, `-`, `_`). Default `troupe_threads`; the stream is `KV_<bucket>`. */
  bucket?: string;
  /**
   * Bucket max age in ms: a thread not written for this long is dropped. 0 keeps records forever.
   * Bucket-wide because nats-server 2.9 ignores per-key TTL. Applied when the bucket is created; an
   * existing bucket keeps its own setting (see `ttlMs` on the opened store).
   */
  ttlMs?: number;
  /** Revisions kept per key. 1 is enough for compare-and-set; more only helps forensics. */
  history?: number;
  /**
   * Replicas of the bucket's stream (1..5; 3 on a 3-server cluster). Created with 1 when absent; given,
   * an existing bucket with another count is scaled to it.
   */
  replicas?: number;
  storage?: 'file' | 'memory';
  /** How long to keep asking a cluster that does not answer yet (a leader election); default 60 s. */
  setupDeadlineMs?: number;
  /** Where the waiting is reported. */
  logger?: Logger;
}

export class KvThreadStore implements ThreadStore {
  readonly #kv: KV;
  readonly #maxValueBytes: number;
  #closed = false;

  private constructor(
    kv: KV,
    readonly bucket: string,
    /** Max age of the bucket as the server has it, which may differ from what `open` asked for. */
    readonly ttlMs: number,
    maxValueBytes: number,
  ) {
    this.#kv = kv;
    this.#maxValueBytes = maxValueBytes;
  }

  /** Creates the bucket if it does not exist, else binds to it. Does not take ownership of `nc`. */
  static async open(nc: NatsConnection, opts: KvThreadStoreOptions = {}): Promise<KvThreadStore> {
    const bucket = opts.bucket ?? DEFAULT_THREAD_BUCKET;
    const ttlMs = opts.ttlMs ?? DEFAULT_THREAD_TTL_MS;
    if (!Number.isSafeInteger(ttlMs) || ttlMs < 0) throw new RangeError(`ttlMs must be a whole number of ms >= 0, got ${ttlMs}`);
    checkReplicas(opts.replicas);
    const bucketName = `the thread bucket "${bucket}"`;
    requireSerializableCas(nc.info?.version, bucketName, opts.replicas ?? 1);
    try {
      const { kv, status } = await retrySetup(
        `opening the thread bucket "${bucket}"`,
        async () => {
          const kv = await new Kvm(nc).create(bucket, {
            history: opts.history ?? 1,
            // The client turns `ttl` (ms) into the stream's max_age; 0 leaves it unlimited.
            ttl: ttlMs,
            replicas: opts.replicas ?? 1,
            storage: opts.storage === 'memory' ? StorageType.Memory : StorageType.File,
          });
          await ensureReplicas(await jetstreamManager(nc), `KV_${bucket}`, opts.replicas, opts.logger ?? silentLogger());
          return { kv, status: await kv.status() };
        },
        // The step makes the bucket when it is missing: "stream not found" is the cluster recovering.
        { deadlineMs: opts.setupDeadlineMs, log: opts.logger, transient: isCreateOrBindTransient },
      );
      // A bucket made by someone else with more replicas, or by a version of Troupe that did not check.
      requireSerializableCas(nc.info?.version, bucketName, status.replicas);
      // Values travel as one message; past the server's max_payload the publish fails with a bare error.
      return new KvThreadStore(kv, bucket, status.ttl, nc.info?.max_payload ?? DEFAULT_MAX_PAYLOAD);
    } catch (err) {
      throw transportError(`could not open KV bucket "${bucket}"`, err);
    }
  }

  async get(tenant: string, threadId: string): Promise<StoredThread | undefined> {
    this.#checkOpen();
    const key = threadKey(tenant, threadId);
    const entry = await this.#call(`get ${key}`, () => this.#kv.get(key));
    // A deleted key still has an entry: its DEL/PURGE marker.
    if (!entry || entry.operation !== 'PUT') return undefined;
    return { record: decodeRecord(entry.value, tenant, threadId, entry.revision), revision: entry.revision };
  }

  async create(record: ThreadRecord): Promise<number> {
    this.#checkOpen();
    const { key, data } = encodeRecord(record, this.#maxValueBytes);
    // kv.create also succeeds over a DEL/PURGE marker, itself with a CAS on the marker's revision.
    return this.#call(
      `create ${key}`,
      () => this.#kv.create(key, data),
      () => new TroupeError('STORE_CONFLICT', `thread record "${key}" already exists`, { key }),
    );
  }

  async update(record: ThreadRecord, expectedRevision: number): Promise<number> {
    this.#checkOpen();
    const { key, data } = encodeRecord(record, this.#maxValueBytes);
    const conflict = () => new TroupeError('STORE_CONFLICT', `thread record "${key}" is no longer at revision ${expectedRevision}`, { key, expectedRevision });
    // kv.update throws synchronously on revision <= 0; no record is ever at such a revision.
    if (!Number.isSafeInteger(expectedRevision) || expectedRevision <= 0) throw conflict();
    return this.#call(`update ${key}`, () => this.#kv.update(key, data, expectedRevision), conflict);
  }

  async delete(tenant: string, threadId: string): Promise<void> {
    this.#checkOpen();
    const key = threadKey(tenant, threadId);
    // A purge, not a delete marker: it removes every revision the bucket keeps (with history > 1 a
    // delete would leave the older ones readable): what erasing a thread (`troupe delete`) needs.
    await this.#call(`delete ${key}`, () => this.#kv.purge(key));
  }

  async *list(tenant: string, filter?: ThreadListFilter): AsyncIterable<ThreadListEntry> {
    this.#checkOpen();
    const prefix = tenantPrefix(tenant);
    // Collect the keys first so the ordered consumer behind kv.keys() is gone before a slow caller.
    const keys = await this.#call(`list ${prefix}>`, async () => {
      const found: string[] = [];
      for await (const key of await this.#kv.keys(`${prefix}>`)) if (!filter?.threadIds || filter.threadIds(key.slice(prefix.length))) found.push(key);
      return found;
    });
    // Gets in pipelined batches: one round trip per batch, not per thread.
    for (let i = 0; i < keys.length; i += LIST_BATCH) {
      const batch = keys.slice(i, i + LIST_BATCH);
      const entries = await Promise.all(batch.map((key) => this.#call(`get ${key}`, () => this.#kv.get(key))));
      for (let j = 0; j < batch.length; j++) {
        const entry = entries[j];
        if (!entry || entry.operation !== 'PUT') continue; // deleted or expired since the key listing
        const item = listEntry(entry.value, tenant, batch[j]!.slice(prefix.length), entry.revision, entry.created);
        if (matchesFilter(item, filter)) yield item;
      }
    }
  }

  async close(): Promise<void> {
    // Nothing to release: the bucket handle holds no subscriptions, and the connection is the caller's.
    this.#closed = true;
  }

  #checkOpen(): void {
    if (this.#closed) throw storeClosed();
  }

  /** Runs one KV call, turning "wrong last sequence" into `onConflict` and anything else into TRANSPORT_ERROR. */
  async #call<T>(what: string, fn: () => Promise<T>, onConflict?: () => TroupeError): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (onConflict && isWrongLastSequence(err)) throw onConflict();
      throw transportError(`thread store: ${what} failed`, err);
    }
  }
}

/** 10164 is the variant newer servers send when they cannot tell the last sequence; same meaning for us. */
function isWrongLastSequence(err: unknown): boolean {
  return (
    err instanceof JetStreamApiError &&
    (err.code === JetStreamApiCodes.StreamWrongLastSequence || err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

function transportError(what: string, err: unknown): TroupeError {
  if (err instanceof TroupeError) return err;
  const message = err instanceof Error ? err.message : String(err);
  // The client says "jetstream is not enabled" whenever no JetStream server answered: a server without it,
  // or, on a cluster, one electing its leader (then the call is tried again). Say both.
  const hint = /jetstream is not enabled/i.test(message)
    ? ' (no JetStream server answered: run nats-server with JetStream, `-js` or the config `troupe creds init` writes; on a cluster, one electing its leader answers again within seconds)'
    : '';
  const wrapped = new TroupeError('TRANSPORT_ERROR', `${what}: ${message}${hint}`);
  wrapped.cause = err;
  return wrapped;
}
