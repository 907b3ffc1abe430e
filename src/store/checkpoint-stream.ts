/**
 * Checkpoints in a JetStream stream, `TROUPE_CHECKPOINTS`: one subject per thread
 * (`troupe.<t>.nodes.checkpoint.<thread>`), and the stream's per-subject limit (`max_msgs_per_subject`) is
 * how many a thread keeps, so the broker drops a thread's oldest when a new one comes. The thread bucket's
 * own history was the other way: it keeps every write of a key (not only one per turn), at most 64 of them,
 * as one bucket-wide setting, and it holds no record of what a turn did.
 *
 * Bounded three ways: per thread (`keep`), in age (the thread bucket's max age: checkpoints do not outlive
 * their threads by more than that), and in bytes (`maxBytes`, the oldest of any thread going first).
 * Erasing a thread purges its subject. Only node users publish or read below `nodes`; operators and owners
 * read checkpoints through the node (ctl and req verbs).
 */
import {
  DiscardPolicy,
  type MsgRequest,
  type NextMsgRequest,
  RetentionPolicy,
  StorageType,
  jetstream,
  jetstreamManager,
  type JetStreamManager,
} from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { DEFAULT_MAX_PAYLOAD, TroupeError } from '../protocol/index.js';
import { silentLogger, type Logger } from '../observability/logger.js';
import { subjects } from '../transport/subjects.js';
import { checkReplicas, ensureStream } from '../transport/jetstream/replicas.js';
import { isCreateOrBindTransient, retrySetup, retryTransient } from '../transport/jetstream/retry.js';
import { checkKeep, decodeCheckpoint, encodeCheckpoint, type CheckpointStore, type StoredCheckpoint } from './checkpoints.js';
import { DEFAULT_THREAD_TTL_MS } from './kv.js';

export const CHECKPOINT_STREAM = 'TROUPE_CHECKPOINTS';
/**
 * The stream's cap on disk by default: past it the oldest checkpoints of any thread go first. The stream
 * reserves it (times its replicas) from the account's JetStream storage (4 GiB for a `troupe creds` tenant).
 */
export const DEFAULT_CHECKPOINT_MAX_BYTES = 64 * 1024 * 1024;
/** How long one read or write waits for the stream. */
const CALL_TIMEOUT_MS = 5_000;

export interface StreamCheckpointStoreOptions {
  tenant: string;
  /** Checkpoints per thread (the stream's `max_msgs_per_subject`); an existing stream is set to it. */
  keep: number;
  /** Max age of a checkpoint in ms (default the thread bucket's, 24 h); 0 keeps them until `keep` or `maxBytes` push them out. */
  ttlMs?: number;
  maxBytes?: number;
  replicas?: number;
  storage?: 'file' | 'memory';
  setupDeadlineMs?: number;
  logger?: Logger;
}

export class StreamCheckpointStore implements CheckpointStore {
  readonly keep: number;
  readonly #nc: NatsConnection;
  readonly #jsm: JetStreamManager;
  readonly #tenant: string;
  readonly #maxBytes: number;

  private constructor(nc: NatsConnection, jsm: JetStreamManager, tenant: string, keep: number) {
    this.#nc = nc;
    this.#jsm = jsm;
    this.#tenant = tenant;
    this.keep = keep;
    this.#maxBytes = nc.info?.max_payload ?? DEFAULT_MAX_PAYLOAD;
  }

  /** Makes the stream, or sets an existing one's per-thread limit, age and size to these. Does not take ownership of `nc`. */
  static async open(nc: NatsConnection, opts: StreamCheckpointStoreOptions): Promise<StreamCheckpointStore> {
    const keep = checkKeep(opts.keep);
    checkReplicas(opts.replicas);
    const log = opts.logger ?? silentLogger();
    const ttlMs = opts.ttlMs ?? DEFAULT_THREAD_TTL_MS;
    const jsm = await retrySetup(
      `opening the checkpoint stream ${CHECKPOINT_STREAM}`,
      async () => {
        const jsm = await jetstreamManager(nc, { timeout: CALL_TIMEOUT_MS });
        const want = {
          name: CHECKPOINT_STREAM,
          subjects: [subjects.checkpointAll(opts.tenant)],
          retention: RetentionPolicy.Limits,
          storage: opts.storage === 'memory' ? StorageType.Memory : StorageType.File,
          max_msgs_per_subject: Math.max(1, keep),
          max_age: ttlMs * 1_000_000,
          max_bytes: opts.maxBytes ?? DEFAULT_CHECKPOINT_MAX_BYTES,
          discard: DiscardPolicy.Old,
          duplicate_window: 60 * 1_000_000_000,
          num_replicas: opts.replicas ?? 1,
        };
        if (!(await ensureStream(jsm, want, opts.replicas, log))) {
          // A team that changed its `checkpoints` setting: the stream follows it.
          const info = await jsm.streams.info(CHECKPOINT_STREAM);
          const c = info.config;
          if (c.max_msgs_per_subject !== want.max_msgs_per_subject || c.max_age !== want.max_age || c.max_bytes !== want.max_bytes) {
            await jsm.streams.update(CHECKPOINT_STREAM, {
              ...c,
              max_msgs_per_subject: want.max_msgs_per_subject,
              max_age: want.max_age,
              max_bytes: want.max_bytes,
            });
            log.info({ stream: CHECKPOINT_STREAM, keep, ttlMs }, 'set the checkpoint stream to the team settings');
          }
        }
        return jsm;
      },
      { deadlineMs: opts.setupDeadlineMs, log, transient: isCreateOrBindTransient },
    );
    return new StreamCheckpointStore(nc, jsm, opts.tenant, keep);
  }

  async append(checkpoint: StoredCheckpoint): Promise<void> {
    if (this.keep === 0) return;
    const data = encodeCheckpoint(checkpoint, this.#maxBytes);
    const subject = subjects.checkpoint(checkpoint.tenant, checkpoint.threadId);
    // The same checkpoint published twice (a retry after a lost acknowledgement) is stored once.
    await retryTransient(() => jetstream(this.#nc, { timeout: CALL_TIMEOUT_MS }).publish(subject, data, { msgID: `${checkpoint.threadId}:${checkpoint.n}` }), {
      deadlineMs: 20_000,
    }).catch((err: unknown) => {
      throw transportError(`could not store checkpoint ${checkpoint.n} of thread ${checkpoint.threadId}`, err);
    });
  }

  async list(tenant: string, threadId: string): Promise<StoredCheckpoint[]> {
    const subject = subjects.checkpoint(tenant, threadId);
    try {
      const info = await this.#jsm.streams.info(CHECKPOINT_STREAM, { subjects_filter: subject });
      const count = info.state.subjects?.[subject] ?? 0;
      if (count === 0) return [];
      // The thread's messages one after another (`next_by_subj`, which servers from 2.9 answer): at most `keep`.
      const out: StoredCheckpoint[] = [];
      let seq = 0;
      while (out.length < count) {
        // The API takes `next_by_subj` with `seq` (the first message at or after it on the subject); the client's type lists only its direct-get form.
        const m = await this.#jsm.streams.getMessage(CHECKPOINT_STREAM, { seq: seq + 1, next_by_subj: subject } as NextMsgRequest as unknown as MsgRequest);
        if (!m) break;
        out.push(decodeCheckpoint(m.data, `checkpoint at ${CHECKPOINT_STREAM} seq ${m.seq}`));
        seq = m.seq;
      }
      return out;
    } catch (err) {
      throw transportError(`could not read the checkpoints of thread ${threadId}`, err);
    }
  }

  async get(tenant: string, threadId: string, n: number): Promise<StoredCheckpoint | undefined> {
    return (await this.list(tenant, threadId)).find((c) => c.n === n);
  }

  async erase(tenant: string, threadId: string): Promise<void> {
    await this.#jsm.streams.purge(CHECKPOINT_STREAM, { filter: subjects.checkpoint(tenant, threadId) }).catch((err: unknown) => {
      throw transportError(`could not erase the checkpoints of thread ${threadId}`, err);
    });
  }

  async close(): Promise<void> {
    // The connection is the caller's; nothing else is held.
  }

  /** The tenant this store writes for. */
  get tenant(): string {
    return this.#tenant;
  }
}

function transportError(what: string, err: unknown): TroupeError {
  if (err instanceof TroupeError) return err;
  return new TroupeError('TRANSPORT_ERROR', `${what}: ${(err as Error).message}`, undefined, { cause: err });
}
