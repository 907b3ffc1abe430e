/**
 * In-process ThreadStore for embedded mode and tests. It keeps the encoded bytes, not objects, so callers
 * cannot reach stored state through a reference, values round-trip through JSON exactly as in KV, and
 * reads validate like KV does.
 */
import { DEFAULT_MAX_PAYLOAD, TroupeError } from '../protocol/index.js';
import { decodeRecord, encodeRecord, listEntry, matchesFilter, storeClosed, tenantPrefix, threadKey } from './codec.js';
import type { StoredThread, ThreadListEntry, ThreadListFilter, ThreadRecord, ThreadStore } from './types.js';

interface Slot {
  data: Uint8Array;
  revision: number;
  writtenAt: Date;
}

export interface MemoryThreadStoreOptions {
  /** Largest encoded record; defaults to NATS' default max_payload so embedded mode fails where KV would. */
  maxValueBytes?: number;
}

export class MemoryThreadStore implements ThreadStore {
  readonly #slots = new Map<string, Slot>();
  readonly #maxValueBytes: number;
  /** One sequence for the whole store, like a KV bucket's stream sequence: a re-created key never reuses a revision. */
  #sequence = 0;
  #closed = false;

  constructor(opts: MemoryThreadStoreOptions = {}) {
    this.#maxValueBytes = opts.maxValueBytes ?? DEFAULT_MAX_PAYLOAD;
  }

  async get(tenant: string, threadId: string): Promise<StoredThread | undefined> {
    this.#checkOpen();
    const slot = this.#slots.get(threadKey(tenant, threadId));
    if (!slot) return undefined;
    return { record: decodeRecord(slot.data, tenant, threadId, slot.revision), revision: slot.revision };
  }

  async create(record: ThreadRecord): Promise<number> {
    this.#checkOpen();
    const { key, data } = encodeRecord(record, this.#maxValueBytes);
    const slot = this.#slots.get(key);
    if (slot) {
      throw new TroupeError('STORE_CONFLICT', `thread record "${key}" already exists (revision ${slot.revision})`, {
        key,
        revision: slot.revision,
      });
    }
    return this.#write(key, data);
  }

  async update(record: ThreadRecord, expectedRevision: number): Promise<number> {
    this.#checkOpen();
    const { key, data } = encodeRecord(record, this.#maxValueBytes);
    const slot = this.#slots.get(key);
    if (slot?.revision !== expectedRevision) {
      const now = slot ? `is at revision ${slot.revision}` : 'does not exist';
      throw new TroupeError('STORE_CONFLICT', `thread record "${key}" ${now}, not ${expectedRevision}`, { key, expectedRevision });
    }
    return this.#write(key, data);
  }

  async delete(tenant: string, threadId: string): Promise<void> {
    this.#checkOpen();
    this.#slots.delete(threadKey(tenant, threadId));
  }

  async *list(tenant: string, filter?: ThreadListFilter): AsyncIterable<ThreadListEntry> {
    this.#checkOpen();
    const prefix = tenantPrefix(tenant);
    // Copy first: the caller may write while iterating, and KV's listing is a point-in-time key set too.
    const slots = [...this.#slots].filter(([key]) => key.startsWith(prefix) && (!filter?.threadIds || filter.threadIds(key.slice(prefix.length))));
    for (const [key, slot] of slots) {
      const entry = listEntry(slot.data, tenant, key.slice(prefix.length), slot.revision, slot.writtenAt);
      if (matchesFilter(entry, filter)) yield entry;
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
  }

  /**
   * Test hook: stores raw bytes under a key with no validation, as a broken writer or a manual
   * `nats kv put` would. Returns the revision.
   */
  putRaw(tenant: string, threadId: string, data: string | Uint8Array): number {
    this.#checkOpen();
    return this.#write(threadKey(tenant, threadId), typeof data === 'string' ? new TextEncoder().encode(data) : data.slice());
  }

  #write(key: string, data: Uint8Array): number {
    const revision = ++this.#sequence;
    this.#slots.set(key, { data, revision, writtenAt: new Date() });
    return revision;
  }

  #checkOpen(): void {
    if (this.#closed) throw storeClosed();
  }
}
