/**
 * Where a tenant's leases and heartbeats live in the lease bucket (leases.ts), and the compare-and-set
 * writes on a lease key that recognise a write of this node's the server took but never answered.
 *
 *   `<tenant>.p<N>`          the lease of partition N
 *   `<tenant>.node.<nodeId>` the heartbeat of a node
 */
import type { KV } from '@nats-io/kv';
import type { Logger } from '../../observability/logger.js';
import { encode, isLeaseOf, isWrongLastSequence } from './lease-entries.js';

export class LeaseKeys {
  constructor(
    readonly tenant: string,
    readonly nodeId: string,
    readonly partitions: number,
  ) {}

  /** The prefix of every heartbeat key; the node id follows it. */
  get nodePrefix(): string {
    return `${this.tenant}.node.`;
  }

  lease(p: number): string {
    return `${this.tenant}.p${p}`;
  }

  /** The heartbeat key of a node (this one by default). */
  node(nodeId = this.nodeId): string {
    return `${this.nodePrefix}${nodeId}`;
  }

  /** The partition a lease key names, undefined for any other key. */
  partitionOf(key: string): number | undefined {
    const prefix = `${this.tenant}.p`;
    if (!key.startsWith(prefix)) return undefined;
    const n = Number(key.slice(prefix.length));
    return Number.isSafeInteger(n) && n >= 0 && n < this.partitions ? n : undefined;
  }
}

/** What a lease this node writes knows of its tenure: the revision it last wrote and when it began. */
export interface LeaseTenure {
  revision: number;
  acquiredAt: number;
}

/**
 * Compare-and-set writes of this node's lease keys. A call that gets no answer in time (a slow cluster,
 * a stalled process: it timed out) may have been stored all the same; then the key holds this node's
 * value with the same `acquiredAt`, and the lease is this node's at that revision. Without this check the
 * key would count as someone else's: the lease lost, or a created key taken by nobody until it aged out.
 */
export class LeaseWrites {
  constructor(
    private readonly kv: KV,
    private readonly keys: LeaseKeys,
    private readonly log: Logger,
  ) {}

  /**
   * Takes partition p's free key (`kv.create`). A create answered by no revision in time that stored this
   * node's value is taken at the key's revision; anything else rethrows.
   */
  async create(p: number, startedAt: number): Promise<number> {
    try {
      return await this.kv.create(this.keys.lease(p), encode({ nodeId: this.keys.nodeId, acquiredAt: startedAt, renewedAt: startedAt }));
    } catch (err) {
      if (isWrongLastSequence(err)) throw err;
      const revision = await this.ownRevision(p, startedAt, 0);
      if (revision === undefined) throw err;
      this.log.debug({ partition: p, revision }, 'own lease write had landed unanswered; taking the lease at its revision');
      return revision;
    }
  }

  /**
   * A compare-and-set write of partition p's key on `held.revision`, the last revision this node knows it
   * wrote. A write of this node's that the server took but whose answer never came in time has moved the
   * key on: then the key still holds this same lease (this node, the same `acquiredAt`), and `write` runs
   * once more on its revision. A write by anyone else (or a delete, or the key aged out) fails as before,
   * with the server's wrong-sequence error.
   */
  async onOwnKey<T>(p: number, held: LeaseTenure, write: (revision: number) => Promise<T>): Promise<T> {
    try {
      return await write(held.revision);
    } catch (err) {
      if (!isWrongLastSequence(err)) throw err;
      const revision = await this.ownRevision(p, held.acquiredAt, held.revision);
      if (revision === undefined) throw err;
      this.log.debug({ partition: p, revision, knew: held.revision }, 'own lease write had landed unanswered; writing on its revision');
      return write(revision);
    }
  }

  /**
   * The revision of partition p's key when it holds this node's lease of the tenure begun at `acquiredAt`
   * at a revision after `after`: a write of this node's the server took unanswered. Else (another node's
   * value, a delete, the key aged out or not answering) undefined.
   */
  private async ownRevision(p: number, acquiredAt: number, after: number): Promise<number | undefined> {
    const entry = await this.kv.get(this.keys.lease(p)).catch(() => null);
    return entry?.operation === 'PUT' && entry.revision > after && isLeaseOf(entry, this.keys.nodeId, acquiredAt) ? entry.revision : undefined;
  }
}
