/**
 * The durable thread record and the store seam. A thread record is the A2A Task plus the persisted XState
 * snapshot of the thread actor; every change is a compare-and-set on the store's revision.
 */
import { z } from 'zod';
import { LIMITS, TaskSchema, type TaskState } from '../protocol/index.js';

const THREAD_RECORD_VERSION = 1;

export const ThreadRecordSchema = z.object({
  /** Bumped on incompatible layout changes, so an old node refuses a record it would misread. */
  version: z.literal(THREAD_RECORD_VERSION),
  tenant: z.string().min(1),
  threadId: z.string().min(1),
  task: TaskSchema,
  /** XState persisted snapshot. Opaque here: the thread machine validates it when it restores. */
  snapshot: z.unknown(),
  updatedAt: z.iso.datetime({ offset: true }),
  /** Inbound stream sequence of the last user message this state includes (tells redeliveries from resends). */
  inboundSeq: z.number().int().nonnegative().optional(),
  /**
   * The stream copies of the thread's last messages (when each was stored, under which Nats-Msg-Id), so
   * that the next owner too tells a second stored copy of a message (the stream's duplicate detection
   * missed it) from a client sending the message again (see ThreadHost.deliver).
   */
  taken: z
    .array(
      z.object({
        messageId: z.string().min(1).max(256),
        seq: z.number().int().nonnegative(),
        at: z.number().int().nonnegative(),
        id: z.string().min(1).max(LIMITS.msgIdChars),
      }),
    )
    .max(64)
    .optional(),
  /**
   * The thread's latest checkpoint (time travel): its number, and what it was taken of (turns and state), so
   * that whichever node writes the thread next numbers the next one and takes none for a write that
   * changed nothing a checkpoint shows.
   */
  checkpoint: z.object({ n: z.number().int().min(1), key: z.string().max(200) }).optional(),
  /** The node that wrote this revision (diagnostics; the thread's owner — who may use it — is in the Task metadata). */
  node: z.string().optional(),
  /**
   * Final status events committed with this state and published after the write (an outbox). A node
   * that reloads the record publishes them again, so a crash between the write and the publish loses no
   * answer (a client may see one twice: events name the message they answer).
   */
  outbox: z.array(z.unknown()).optional(),
});
export type ThreadRecord = z.infer<typeof ThreadRecordSchema>;

export interface StoredThread {
  record: ThreadRecord;
  /** The record's etag: pass it to `update` to write only if nobody wrote in between. */
  revision: number;
}

export interface ThreadListEntry {
  threadId: string;
  /**
   * The task's state. A record that fails validation is still listed (so it can be found and repaired),
   * with state `unknown` and `corrupt` set; `get` on it throws STORE_CORRUPT.
   */
  state: TaskState;
  /** The record's `updatedAt`; for a corrupt record, when the store last wrote the key. */
  updatedAt: string;
  revision: number;
  /** Why the record could not be read. Only set on corrupt records. */
  corrupt?: string;
  /** Who may use the thread (`troupe/owner` in the Task's metadata); absent on corrupt and owner-less records. */
  owner?: string;
  /** The Task's contextId. */
  contextId?: string;
  /** When the thread began (ISO); absent on records written before it was kept. */
  createdAt?: string;
  /** The agent holding the conversation: an open handoff's target, else the agent that answered last, else the entry agent. */
  currentActiveAgent?: string;
  /** A handoff is open on the thread (pending or active); its target is `handoffTargetAgent`. */
  isHandoffActive?: boolean;
  handoffTargetAgent?: string;
  /** Messages the record holds (its history, bounded by the thread's history limit). */
  totalMessages?: number;
}

export interface ThreadListFilter {
  /** Only threads in this state. Corrupt records count as `unknown`. */
  state?: TaskState;
  /**
   * Only threads whose id passes, asked before a record is read: a node resuming the threads of a few
   * partitions reads those records, not the tenant's.
   */
  threadIds?: (threadId: string) => boolean;
}

/**
 * Persistence of thread records, keyed by tenant and thread id. Implementations: `KvThreadStore`
 * (JetStream KV) and `MemoryThreadStore` (embedded mode, tests); both pass one conformance suite.
 *
 * Errors are TroupeErrors: STORE_CONFLICT (create on an existing key, update at a moved revision),
 * STORE_CORRUPT (a stored value that fails validation), INVALID_MESSAGE (a tenant or thread id outside
 * the key alphabet, or a record that fails the schema on write: nothing is written),
 * PAYLOAD_TOO_LARGE, TRANSPORT_ERROR (the backend failed, or the store is closed).
 */
export interface ThreadStore {
  /** The record and its revision, or undefined when there is none (never written, deleted or expired). */
  get(tenant: string, threadId: string): Promise<StoredThread | undefined>;
  /** Writes a new record and returns its revision. STORE_CONFLICT when the key already holds one. */
  create(record: ThreadRecord): Promise<number>;
  /** Compare-and-set: writes only if the key is still at `expectedRevision`, else STORE_CONFLICT. */
  update(record: ThreadRecord, expectedRevision: number): Promise<number>;
  /** Removes the record. Deleting a missing record is not an error. */
  delete(tenant: string, threadId: string): Promise<void>;
  /** The tenant's threads, in no particular order. Never yields another tenant's threads. */
  list(tenant: string, filter?: ThreadListFilter): AsyncIterable<ThreadListEntry>;
  /** How long a record lives after its last write, in ms (a KV bucket's max age); 0 or absent: it does not expire. */
  readonly ttlMs?: number;
  /** Stops using the backend; later calls fail with TRANSPORT_ERROR. Does not close a NATS connection it was given. */
  close(): Promise<void>;
}
