/**
 * Partition leases in a JetStream KV bucket (one owner per thread at a time).
 *
 * Inbound thread messages are split by the server into `partitions` partitions (the account mapping `troupe creds init` writes);
 * exactly one node at a time holds the lease of a partition and consumes it (ingress.ts).
 *
 * Bucket `troupe_leases` (one per account, so per tenant), max age = the lease TTL, history 1:
 *   `<tenant>.p<N>`          `{ nodeId, acquiredAt, renewedAt }` (epoch ms), the lease of partition N
 *   `<tenant>.node.<nodeId>` `{ nodeId, at, held }`, the node's heartbeat, used to count live nodes
 *
 * A lease is never written blindly: it is taken with `kv.create` (succeeds only when the key is absent,
 * deleted, or aged out of the bucket — on nats-server 2.9 an expired key simply vanishes), renewed with
 * `kv.update` on the revision this node last wrote, and given back with a delete on that revision.
 * A revision mismatch means someone else holds it now: the lease is lost. Unless the key still holds this
 * same lease: a write of this node's landed but its answer never came in time (a call timed out on a slow
 * cluster or in a stalled process); then the write is made again on the key's revision (lease-keys.ts).
 *
 * Every `ttl / 3` a node refreshes its heartbeat and renews its leases (one timer), and, on a second
 * timer so a slow survey can never delay a renewal, counts live nodes and moves towards its share
 * (`shareOf`: the partitions split evenly in node-id order, so 3 nodes × 64 partitions hold 22/21/21):
 * it takes free partitions up to that target and gives back the ones above it, so a joining node gets
 * its share without anyone crashing. Partitions left free for a whole ttl (a node counted live that
 * cannot take its share) may be taken up to `ceil(partitions / liveNodes)`. The survey is one stream-info
 * request (the bucket's subjects under `<tenant>.`) plus a get per key, no consumer (lease-survey.ts). A KV watch on the
 * tenant's keys (lease-watch.ts) runs the next balance round at once when a lease is given back or a node appears, so a
 * clean stop is taken over in milliseconds; a crashed node's leases are taken over as they age out: each
 * survey notes when the earliest key of another node expires (server timestamp + ttl) and the next
 * round runs right then, so takeover comes within one ttl of the dead node's last renewal (plus a 50 ms
 * margin and the time to make a consumer), i.e. at most one ttl after the crash.
 *
 * Self-fencing: a lease that could not be renewed for `ttl - ttl/10` (measured from the start of the
 * last successful renewal, which precedes the server's timestamp) is dropped locally (`onLost` with
 * reason `expired`) before the server lets anyone else take it.
 *
 * Callbacks (`onAcquired`, `onLost`) may be async; for one partition they never overlap and run in the
 * order of the events. A partition given back voluntarily (rebalance, `stop`) is deleted from the bucket
 * only after its `onLost` resolved, and it keeps being renewed meanwhile, so its consumer can finish
 * in-flight work before the next owner starts.
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { KV, KvEntry, KvWatchEntry } from '@nats-io/kv';
import type { NatsConnection, QueuedIterator, Subscription } from '@nats-io/transport-node';
import { silentLogger, type Logger } from '../../observability/logger.js';
import { metrics } from '../../observability/metrics.js';
import { checkReplicas } from './replicas.js';
import { fnv1a32 } from './fnv.js';
import { openLeaseBucket } from './lease-bucket.js';
import { encode, isWrongLastSequence } from './lease-entries.js';
import { LeaseKeys, LeaseWrites } from './lease-keys.js';
import { freeForLong, shareOf } from './lease-share.js';
import { surveyLeases, type LeaseSurvey } from './lease-survey.js';
import { watchLeaseElections, watchLeaseKeys, watchReconnects, type LeaseWatchContext } from './lease-watch.js';
import { errText } from './ingress-types.js';

export { freeForLong } from './lease-share.js';

export const DEFAULT_LEASE_BUCKET = 'troupe_leases';
export const DEFAULT_PARTITIONS = 8;
export const DEFAULT_LEASE_TTL_MS = 5_000;
/** How long after a key's expected expiry the next balance round runs (server and local clocks differ a little). */
const EXPIRY_MARGIN_MS = 50;

/**
 * Why a node stopped holding a partition:
 * - `conflict`: the lease key was written by someone else (renewal failed on the revision);
 * - `expired`: it could not be renewed in time (disconnected, server slow) and was dropped locally;
 * - `released`: this node gave it back (rebalance or `stop`), the lease is still held until `onLost` resolves.
 */
export type LeaseLossReason = 'conflict' | 'expired' | 'released';

export interface PartitionLeasesOptions {
  nc: NatsConnection;
  tenant: string;
  /** Unique per running process; a subject token (A-Z, a-z, 0-9, `_`, `-`). */
  nodeId: string;
  /** Must equal the partition count of the server's mapping. Default 8. */
  partitions?: number;
  /**
   * Lease time-to-live in ms, the bucket's max age. Default 5000. Applied when the bucket is created; an
   * existing bucket keeps its own max age, which then wins (see `ttlMs`), so all nodes agree.
   */
  leaseTtlMs?: number;
  /** KV bucket. Default `troupe_leases`. */
  bucket?: string;
  /** Replicas of the bucket (created with 1 when absent; given, an existing bucket is scaled to it). */
  replicas?: number;
  /** File (default) keeps leases over a server restart, so owners keep their partitions. */
  storage?: 'file' | 'memory';
  onAcquired?: (partition: number) => void | Promise<void>;
  onLost?: (partition: number, reason: LeaseLossReason) => void | Promise<void>;
  logger?: Logger;
  /** How long to keep asking a cluster that does not answer yet (a leader election); default 60 s. */
  setupDeadlineMs?: number;
}

interface HeldLease {
  revision: number;
  acquiredAt: number;
  /** Local time after which the lease is no longer trusted (see self-fencing). */
  validUntil: number;
  /** Being given back: `onLost` is running; the key is deleted once `drained`. */
  releasing: boolean;
  drained: boolean;
}

const KEY_TOKEN = /^[A-Za-z0-9_-]+$/;

export class PartitionLeases {
  readonly tenant: string;
  readonly nodeId: string;
  readonly partitions: number;
  readonly bucket: string;
  readonly #nc: NatsConnection;
  readonly #opts: PartitionLeasesOptions;
  readonly #log: Logger;
  #ttlMs: number;
  readonly #keys: LeaseKeys;
  #kv?: KV;
  #writes?: LeaseWrites;
  readonly #held = new Map<number, HeldLease>();
  /** Partitions this node self-fenced, with the revision it last knew it wrote: reclaimable while nobody else wrote since. */
  readonly #fenced = new Map<number, { revision: number; acquiredAt: number }>();
  /** Per-partition callback chain. */
  readonly #chains = new Map<number, Promise<void>>();
  #liveNodes = 1;
  #knownNodes = new Set<string>();
  #started = false;
  #stopping = false;
  #jsm?: JetStreamManager;
  #renewTimer?: NodeJS.Timeout;
  #balanceTimer?: NodeJS.Timeout;
  #fenceTimer?: NodeJS.Timeout;
  #balancing?: Promise<void>;
  #balanceAgain = false;
  /** Local time at which the earliest key of another node ages out (from the last survey). */
  #nextExpiry = Infinity;
  /** Local time of the last survey the bucket answered (0: none yet). */
  #surveyedAt = 0;
  #renewing?: Promise<void>;
  /** Per partition nobody holds, since when every survey has seen it free (see `freeForLong`). */
  readonly #freeSince = new Map<number, number>();
  /** When the bucket last took this node's heartbeat, and since when it has taken each one (no gap of a ttl). */
  #heartbeatAt?: number;
  #heartbeatSince?: number;
  #watch?: QueuedIterator<KvWatchEntry>;
  #status?: { stop?: () => void };
  #elections?: Subscription;

  constructor(opts: PartitionLeasesOptions) {
    if (!KEY_TOKEN.test(opts.tenant)) throw new RangeError(`invalid tenant "${opts.tenant}": use A-Z, a-z, 0-9, _ and -`);
    if (!KEY_TOKEN.test(opts.nodeId)) throw new RangeError(`invalid nodeId "${opts.nodeId}": use A-Z, a-z, 0-9, _ and -`);
    const partitions = opts.partitions ?? DEFAULT_PARTITIONS;
    if (!Number.isSafeInteger(partitions) || partitions < 1) throw new RangeError(`partitions must be a whole number >= 1, got ${partitions}`);
    const ttl = opts.leaseTtlMs ?? DEFAULT_LEASE_TTL_MS;
    if (!Number.isSafeInteger(ttl) || ttl < 100) throw new RangeError(`leaseTtlMs must be a whole number of ms >= 100, got ${ttl}`);
    checkReplicas(opts.replicas);
    this.tenant = opts.tenant;
    this.nodeId = opts.nodeId;
    this.partitions = partitions;
    this.bucket = opts.bucket ?? DEFAULT_LEASE_BUCKET;
    this.#ttlMs = ttl;
    this.#keys = new LeaseKeys(opts.tenant, opts.nodeId, partitions);
    this.#nc = opts.nc;
    this.#opts = opts;
    this.#log = (opts.logger ?? silentLogger()).child({ component: 'leases', node: opts.nodeId, tenant: opts.tenant });
  }

  /** The effective lease TTL: the bucket's max age. */
  get ttlMs(): number {
    return this.#ttlMs;
  }

  /** How often leases are renewed and the balance is checked. */
  get renewIntervalMs(): number {
    return Math.max(30, Math.floor(this.#ttlMs / 3));
  }

  /** Live nodes of the tenant as last counted (this one included). */
  get liveNodes(): number {
    return this.#liveNodes;
  }

  /**
   * Local time of the last survey of the bucket that was answered (0: none yet). A round surveys it at
   * least every `renewIntervalMs`: a survey long ago means the bucket does not answer this node, which
   * then can neither take partitions nor keep the ones it holds.
   */
  get surveyedAt(): number {
    return this.#surveyedAt;
  }

  /** Partitions whose lease this node holds right now (including ones it is giving back), ascending. */
  owned(): number[] {
    return [...this.#held.keys()].sort((a, b) => a - b);
  }

  /**
   * Whether this node holds partition p's lease and is not giving it back: work that only serves
   * consuming p (making its consumer, resuming its threads) is worth starting or trying again.
   */
  keeps(p: number): boolean {
    const lease = this.#held.get(p);
    return lease !== undefined && !lease.releasing;
  }

  /** Runs a round now (renew, rebalance, acquire) and resolves when it is done. */
  async refresh(): Promise<void> {
    if (!this.#started || this.#stopping) return;
    await this.#renewRound();
    await this.#runBalance();
  }

  /**
   * Gives partition p back as in a rebalance (`onLost(p, 'released')`, then the key is deleted), e.g.
   * because this node cannot consume it. Another node, or this one in a later round, takes it.
   */
  giveBack(p: number): void {
    this.#release(p);
  }

  async start(): Promise<this> {
    if (this.#started) throw new Error('PartitionLeases already started');
    this.#started = true;
    const { kv, jsm, ttlMs } = await openLeaseBucket({
      nc: this.#nc,
      bucket: this.bucket,
      ttlMs: this.#ttlMs,
      replicas: this.#opts.replicas,
      storage: this.#opts.storage,
      setupDeadlineMs: this.#opts.setupDeadlineMs,
      log: this.#log,
    });
    this.#ttlMs = ttlMs;
    this.#jsm = jsm;
    this.#kv = kv;
    this.#writes = new LeaseWrites(kv, this.#keys, this.#log);
    const watching: LeaseWatchContext = {
      keys: this.#keys,
      log: this.#log,
      kick: () => this.#kick(),
      renewAll: () => this.#renewAll(),
      renewRound: () => this.#renewRound(),
      knowsNode: (nodeId) => this.#knownNodes.has(nodeId),
      heldRevision: (p) => this.#held.get(p)?.revision,
      stopping: () => this.#stopping,
    };
    this.#watch = await watchLeaseKeys(kv, watching);
    this.#status = watchReconnects(this.#nc, watching);
    this.#elections = watchLeaseElections(this.#nc, this.bucket, watching);
    await this.#renewRound();
    await this.#runBalance();
    this.#scheduleRenew();
    this.#scheduleBalance();
    return this;
  }

  /**
   * Stops renewing. With `release` (default) every held partition goes through `onLost(p, 'released')`
   * and is then deleted from the bucket, and the heartbeat too, so other nodes take over at once.
   * Without it, `onLost` still runs (reason `released`) but the keys stay until they age out.
   */
  async stop(opts: { release?: boolean } = {}): Promise<void> {
    if (!this.#started || this.#stopping) return;
    this.#stopping = true;
    const release = opts.release ?? true;
    clearTimeout(this.#balanceTimer);
    clearTimeout(this.#fenceTimer);
    this.#watch?.stop();
    this.#status?.stop?.();
    this.#elections?.unsubscribe();
    await this.#balancing?.catch(() => undefined);
    // The renewal timer keeps running while the callbacks drain, so leases cannot age out under
    // in-flight work.
    const waits: Promise<void>[] = [];
    for (const [p, lease] of this.#held) {
      // One being given back already has its onLost queued: wait for it rather than calling it twice.
      if (lease.releasing) waits.push(this.#chains.get(p) ?? Promise.resolve());
      else {
        lease.releasing = true;
        metrics.leasesLost.inc({ reason: 'released' });
        waits.push(this.#enqueue(p, () => this.#opts.onLost?.(p, 'released')));
      }
    }
    await Promise.all(waits);
    clearTimeout(this.#renewTimer);
    this.#renewTimer = undefined;
    await this.#renewing?.catch(() => undefined);
    const kv = this.#kv;
    if (release && kv && !this.#nc.isClosed()) {
      // The heartbeat first: the others then count one node less when they see the leases go.
      await kv.delete(this.#keys.node()).catch(() => undefined);
      await Promise.all(
        [...this.#held.entries()].map(async ([p, lease]) => {
          try {
            await this.#writes!.onOwnKey(p, lease, (on) => kv.delete(this.#keys.lease(p), { previousSeq: on }));
          } catch (err) {
            if (!isWrongLastSequence(err)) this.#log.warn({ partition: p, err: errText(err) }, 'could not release lease');
          }
        }),
      );
    }
    this.#held.clear();
    this.#fenced.clear();
    clearTimeout(this.#fenceTimer);
    await Promise.all([...this.#chains.values()]);
  }

  // ---- renewal: heartbeat and held leases, on its own timer -----------------------------------------

  #scheduleRenew(): void {
    // A closed connection cannot renew anything: the fence timer drops the leases as they run out.
    if (this.#nc.isClosed() || (this.#stopping && this.#renewTimer === undefined)) return;
    this.#renewTimer = setTimeout(() => {
      void this.#renewRound().finally(() => {
        if (this.#renewTimer !== undefined) this.#scheduleRenew();
      });
    }, this.renewIntervalMs);
  }

  /** Refreshes the heartbeat and renews every held lease, all in parallel. */
  async #renewRound(): Promise<void> {
    const kv = this.#kv;
    if (!kv || this.#nc.isClosed()) return;
    const heartbeat = this.#stopping
      ? Promise.resolve()
      : kv.put(this.#keys.node(), encode({ nodeId: this.nodeId, at: Date.now(), held: this.#held.size })).then(
          () => {
            const at = Date.now();
            if (this.#heartbeatAt === undefined || at - this.#heartbeatAt > this.#ttlMs) this.#heartbeatSince = at;
            this.#heartbeatAt = at;
          },
          (err: unknown) => this.#log.debug({ err: errText(err) }, 'heartbeat failed'),
        );
    await Promise.all([heartbeat, this.#renewAll()]);
  }

  // ---- balance: count nodes, give back surplus, take free partitions ---------------------------------

  /**
   * The next round runs after the usual interval, or just after the earliest key of another node ages
   * out if that is sooner: a crashed node's partitions are then taken within one TTL of its last write,
   * not up to a TTL plus an interval.
   */
  #scheduleBalance(delayMs = Math.min(this.renewIntervalMs, Math.max(0, this.#nextExpiry + EXPIRY_MARGIN_MS - Date.now()))): void {
    if (this.#stopping || this.#nc.isClosed()) return;
    clearTimeout(this.#balanceTimer);
    this.#balanceTimer = setTimeout(() => void this.#runBalance().finally(() => this.#scheduleBalance()), delayMs);
  }

  /** Balances soon (a lease was given back, a node appeared, the connection came back). */
  #kick(): void {
    if (this.#stopping) return;
    if (this.#balancing) {
      this.#balanceAgain = true;
      return;
    }
    this.#scheduleBalance(0);
  }

  /** One balance round at a time; a kick during a round runs another right after it. */
  #runBalance(): Promise<void> {
    if (this.#balancing) {
      this.#balanceAgain = true;
      return this.#balancing;
    }
    const run = (async () => {
      do {
        this.#balanceAgain = false;
        try {
          await this.#balance();
        } catch (err) {
          this.#log.warn({ err: errText(err) }, 'lease balance round failed');
        }
      } while (this.#balanceAgain && !this.#stopping);
    })();
    this.#balancing = run.finally(() => {
      this.#balancing = undefined;
    });
    return this.#balancing;
  }

  async #balance(): Promise<void> {
    const kv = this.#kv;
    if (!kv || this.#stopping || this.#nc.isClosed()) return;
    this.#fenceExpired();
    await this.#finishReleases(kv);
    let survey: LeaseSurvey;
    try {
      survey = await surveyLeases({ jsm: this.#jsm!, kv, bucket: this.bucket, keys: this.#keys, ttlMs: this.#ttlMs, holds: (p) => this.#held.has(p) });
    } catch (err) {
      this.#log.debug({ err: errText(err) }, 'lease survey failed');
      return;
    }
    if (this.#stopping) return;
    this.#surveyedAt = Date.now();
    const { nodes, taken } = survey;
    this.#nextExpiry = survey.nextExpiry;
    this.#knownNodes = nodes;
    this.#liveNodes = nodes.size;
    // Free partitions nobody has taken for a whole ttl (a node counted live cannot take its share): then
    // everyone may go up to ceil(partitions / nodes), so no partition stays unconsumed.
    const stuck = freeForLong(this.#freeSince, taken, this.partitions, Date.now(), this.#ttlMs);
    const target = stuck ? Math.ceil(this.partitions / this.#liveNodes) : shareOf(this.nodeId, nodes, this.partitions);

    // Give back what is above the target, highest partitions first.
    const keeping = [...this.#held.entries()]
      .filter(([, l]) => !l.releasing)
      .map(([p]) => p)
      .sort((a, b) => b - a);
    for (let surplus = keeping.length - target, i = 0; surplus > 0; surplus--, i++) this.#release(keeping[i]!);
    let want = target - Math.min(keeping.length, target);
    if (want <= 0) return;

    // Partitions this node fenced itself off: reclaim on the revision it last wrote (nobody wrote since).
    const reclaim = [...this.#fenced].filter(([p]) => !this.#held.has(p)).slice(0, want);
    const reclaimed = await Promise.all(
      reclaim.map(async ([p, last]) => {
        this.#fenced.delete(p);
        const startedAt = Date.now();
        try {
          const value = encode({ nodeId: this.nodeId, acquiredAt: startedAt, renewedAt: startedAt });
          const rev = await this.#writes!.onOwnKey(p, last, (on) => kv.update(this.#keys.lease(p), value, on));
          this.#took(p, rev, startedAt, 'reclaimed');
          return true;
        } catch (err) {
          if (!isWrongLastSequence(err)) this.#log.debug({ partition: p, err: errText(err) }, 'reclaim failed');
          return false;
        }
      }),
    );
    want -= reclaimed.filter(Boolean).length;
    if (want <= 0 || this.#stopping) return;

    // Free partitions, starting at a node-specific offset so nodes starting together rarely collide.
    const offset = fnv1a32(this.nodeId) % this.partitions;
    const free: number[] = [];
    for (let i = 0; i < this.partitions && free.length < want; i++) {
      const p = (offset + i) % this.partitions;
      if (!this.#held.has(p) && !taken.has(p)) free.push(p);
    }
    await Promise.all(
      free.map(async (p) => {
        const startedAt = Date.now();
        try {
          const rev = await this.#writes!.create(p, startedAt);
          if (this.#stopping) {
            // Stopped meanwhile: hand it straight back.
            await kv.delete(this.#keys.lease(p), { previousSeq: rev }).catch(() => undefined);
            return;
          }
          this.#fenced.delete(p);
          this.#took(p, rev, startedAt, 'created');
        } catch (err) {
          // Someone else was faster: fine. Anything else: try again next round.
          if (!isWrongLastSequence(err)) this.#log.debug({ partition: p, err: errText(err) }, 'acquire failed');
        }
      }),
    );
  }

  /** `how`: `created` (the key was free) or `reclaimed` (this node's own key, after it fenced itself off). */
  #took(p: number, revision: number, startedAt: number, how: 'created' | 'reclaimed'): void {
    this.#held.set(p, { revision, acquiredAt: startedAt, validUntil: startedAt + this.#validityMs(), releasing: false, drained: false });
    this.#armFenceTimer();
    this.#log.debug({ partition: p, revision, how }, 'lease acquired');
    metrics.leasesTaken.inc({ how });
    this.#enqueue(p, async () => {
      try {
        await this.#opts.onAcquired?.(p);
      } catch (err) {
        // Could not start on it: give it back (its onLost runs next in this chain) so this node or another
        // can try again.
        this.#log.error({ partition: p, err: errText(err) }, 'onAcquired failed; giving the partition back');
        this.#release(p);
      }
    });
  }

  #release(p: number): void {
    const lease = this.#held.get(p);
    if (!lease || lease.releasing) return;
    lease.releasing = true;
    metrics.leasesLost.inc({ reason: 'released' });
    this.#log.debug({ partition: p, liveNodes: this.#liveNodes }, 'giving lease back');
    void this.#enqueue(p, () => this.#opts.onLost?.(p, 'released')).then(() => {
      lease.drained = true;
      this.#kick();
    });
  }

  /** Deletes the keys of partitions whose `onLost('released')` has finished, on the revision held. */
  async #finishReleases(kv: KV): Promise<void> {
    const done = [...this.#held.entries()].filter(([, l]) => l.releasing && l.drained);
    await Promise.all(
      done.map(async ([p, lease]) => {
        try {
          await this.#writes!.onOwnKey(p, lease, (on) => kv.delete(this.#keys.lease(p), { previousSeq: on }));
          if (this.#held.get(p) === lease) this.#held.delete(p);
        } catch (err) {
          if (isWrongLastSequence(err)) {
            if (this.#held.get(p) === lease) this.#held.delete(p);
          } else this.#log.debug({ partition: p, err: errText(err) }, 'could not delete released lease; retrying next round');
        }
      }),
    );
  }

  /** Renews every held lease in parallel (at most one renewal pass at a time). */
  #renewAll(): Promise<void> {
    this.#renewing ??= this.#renewAllOnce().finally(() => {
      this.#renewing = undefined;
    });
    return this.#renewing;
  }

  async #renewAllOnce(): Promise<void> {
    const kv = this.#kv;
    if (!kv) return;
    await Promise.all(
      [...this.#held.entries()]
        .filter(([, l]) => !(l.releasing && l.drained))
        .map(async ([p, lease]) => {
          const startedAt = Date.now();
          try {
            const value = encode({ nodeId: this.nodeId, acquiredAt: lease.acquiredAt, renewedAt: startedAt });
            const rev = await this.#writes!.onOwnKey(p, lease, (on) => kv.update(this.#keys.lease(p), value, on));
            if (this.#held.get(p) !== lease) return;
            lease.revision = rev;
            lease.validUntil = startedAt + this.#validityMs();
          } catch (err) {
            if (this.#held.get(p) !== lease) return;
            if (isWrongLastSequence(err)) this.#lose(p, 'conflict');
            else this.#log.debug({ partition: p, err: errText(err) }, 'renewal failed');
          }
        }),
    );
    this.#fenceExpired();
    this.#armFenceTimer();
  }

  #lose(p: number, reason: LeaseLossReason): void {
    const lease = this.#held.get(p);
    if (!lease) return;
    this.#held.delete(p);
    if (reason === 'expired') this.#fenced.set(p, { revision: lease.revision, acquiredAt: lease.acquiredAt });
    this.#log.warn({ partition: p, reason }, 'lease lost');
    // A partition being given back already had its onLost (and counts as released); losing it only skips the delete.
    if (lease.releasing) return;
    metrics.leasesLost.inc({ reason });
    void this.#enqueue(p, () => this.#opts.onLost?.(p, reason));
  }

  #validityMs(): number {
    return this.#ttlMs - Math.max(10, Math.floor(this.#ttlMs / 10));
  }

  #fenceExpired(): void {
    const now = Date.now();
    for (const [p, lease] of [...this.#held]) if (now >= lease.validUntil) this.#lose(p, 'expired');
  }

  #armFenceTimer(): void {
    clearTimeout(this.#fenceTimer);
    if (this.#held.size === 0) return;
    const next = Math.min(...[...this.#held.values()].map((l) => l.validUntil));
    this.#fenceTimer = setTimeout(
      () => {
        this.#fenceExpired();
        this.#armFenceTimer();
      },
      Math.max(0, next - Date.now()) + 1,
    );
  }

  /** Runs `fn` after every earlier callback of partition `p`; never rejects. */
  #enqueue(p: number, fn: () => void | Promise<void>): Promise<void> {
    const prev = this.#chains.get(p) ?? Promise.resolve();
    const next = prev.then(fn).catch((err: unknown) => this.#log.error({ partition: p, err: errText(err) }, 'lease callback failed'));
    this.#chains.set(p, next);
    void next.then(() => {
      if (this.#chains.get(p) === next) this.#chains.delete(p);
    });
    return next;
  }

  /**
   * Whether node `nodeId` is alive by its heartbeat in the bucket: true while its key is there and younger
   * than one TTL (refreshed every ttl/3), false when a clean stop deleted it, undefined when the bucket does
   * not answer. A heartbeat that aged out (or older than a TTL) says its node is gone only while the bucket
   * takes this node's own heartbeat, and has for two renewals: while it takes none (its stream electing a
   * leader, a server fault) every node's heartbeat ages alike, a live one's too, and just after, the others'
   * still look old until their next renewal. Then it is undefined: cannot tell.
   */
  async nodeAlive(nodeId: string): Promise<boolean | undefined> {
    const kv = this.#kv;
    if (!kv) return undefined;
    let entry: KvEntry | null;
    try {
      entry = await kv.get(this.#keys.node(nodeId));
    } catch {
      return undefined;
    }
    if (entry !== null && entry.operation !== 'PUT') return false;
    const now = Date.now();
    if (entry !== null && entry.created.getTime() + this.#ttlMs > now) return true;
    const ownTaken = this.#heartbeatAt !== undefined && now - this.#heartbeatAt <= this.#ttlMs && now - this.#heartbeatSince! >= 2 * this.renewIntervalMs;
    return ownTaken ? false : undefined;
  }
}
