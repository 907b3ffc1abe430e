/**
 * What makes a lease round run before its timer (leases.ts): the tenant's keys changing in the bucket, the
 * connection coming back, the bucket's stream electing a new leader. Each only makes takeovers faster;
 * the timed rounds alone keep the leases right.
 */
import { KvWatchInclude, type KV, type KvWatchEntry } from '@nats-io/kv';
import type { NatsConnection, QueuedIterator, Status, Subscription } from '@nats-io/transport-node';
import type { Logger } from '../../observability/logger.js';
import { errText } from './ingress-types.js';
import { isOwnWrite } from './lease-entries.js';
import type { LeaseKeys } from './lease-keys.js';

/** Where JetStream announces a stream's new leader: `<this>.<stream>`. */
const STREAM_LEADER_ELECTED = '$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED';

export interface LeaseWatchContext {
  keys: LeaseKeys;
  log: Logger;
  /** Runs a balance round soon. */
  kick: () => void;
  /** Renews every held lease now. */
  renewAll: () => Promise<void>;
  /** Refreshes the heartbeat and renews every held lease now. */
  renewRound: () => Promise<void>;
  /** Whether the last survey counted this node live. */
  knowsNode: (nodeId: string) => boolean;
  /** The revision this node last wrote of partition p's lease, when it holds it. */
  heldRevision: (p: number) => number | undefined;
  stopping: () => boolean;
}

/**
 * Watches the tenant's keys: a lease (or heartbeat) given back or a new node runs the next balance round
 * at once, so a clean stop is taken over in milliseconds; another node's write of a lease this node holds
 * renews now, to find out. Undefined when the bucket cannot be watched (logged).
 */
export async function watchLeaseKeys(kv: KV, ctx: LeaseWatchContext): Promise<QueuedIterator<KvWatchEntry> | undefined> {
  const { keys } = ctx;
  let watch: QueuedIterator<KvWatchEntry>;
  try {
    watch = await kv.watch({ key: `${keys.tenant}.>`, include: KvWatchInclude.UpdatesOnly });
  } catch (err) {
    ctx.log.warn({ err: errText(err) }, 'could not watch the lease bucket');
    return undefined;
  }
  void (async () => {
    for await (const e of watch) {
      if (e.operation !== 'PUT') {
        // A lease (or heartbeat) given back: take it now rather than at the next round.
        if (e.key !== keys.node()) ctx.kick();
        continue;
      }
      if (e.key.startsWith(keys.nodePrefix)) {
        // A new node: rebalance now.
        if (!ctx.knowsNode(e.key.slice(keys.nodePrefix.length))) ctx.kick();
        continue;
      }
      const p = keys.partitionOf(e.key);
      const revision = p === undefined ? undefined : ctx.heldRevision(p);
      // Someone else wrote a lease this node thinks it holds: renew now to find out.
      if (revision !== undefined && e.revision !== revision && !isOwnWrite(e, keys.nodeId)) void ctx.renewAll();
    }
  })().catch((err: unknown) => ctx.log.debug({ err: errText(err) }, 'lease watch ended'));
  return watch;
}

/** After a reconnect, renews and rebalances at once instead of waiting for the next round. */
export function watchReconnects(nc: NatsConnection, ctx: LeaseWatchContext): { stop?: () => void } {
  const status = nc.status() as AsyncIterable<Status> & { stop?: () => void };
  void (async () => {
    for await (const s of status) {
      if (s.type !== 'reconnect') continue;
      void ctx.renewRound();
      ctx.kick();
    }
  })().catch(() => undefined);
  return status;
}

/**
 * While the bucket's stream elects a leader (its leader's server crashed) no lease can be renewed, and
 * with an election longer than most of the TTL every node fences itself off its partitions. The server
 * announces the new leader in the account: renew and balance then, rather than at the next round, which
 * during the outage comes every ttl/3 after a survey that waited ttl/3 for its answer (bench/cluster-crash.ts
 * with CRASH_LEASES=1 kills the bucket's leader and measures the takeover).
 * Nothing of the announcement is read but its subject, and a round asked for while one runs folds into
 * the next. The rounds stay the fallback: where the node's user may not subscribe to advisories the server
 * refuses this subscription, and an announcement can go missing.
 */
export function watchLeaseElections(nc: NatsConnection, bucket: string, ctx: LeaseWatchContext): Subscription {
  return nc.subscribe(`${STREAM_LEADER_ELECTED}.KV_${bucket}`, {
    callback: (err) => {
      if (err || ctx.stopping()) return;
      ctx.log.info('lease bucket has a new leader; renewing and balancing now');
      void ctx.renewAll();
      ctx.kick();
    },
  });
}
