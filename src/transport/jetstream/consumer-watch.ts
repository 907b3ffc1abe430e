/**
 * Keeping a partition consumer alive: what its status stream says (pulls refused, the consumer gone, its
 * heartbeats missed) restarts it; JetStream's announcement of a new leader for it makes it pull again at once.
 */
import type { ConsumerMessages } from '@nats-io/jetstream';
import type { NatsConnection, Subscription as NatsSubscription } from '@nats-io/transport-node';
import { z } from 'zod';
import { decode } from '../../protocol/codec.js';
import type { Logger } from '../../observability/logger.js';
import { INGRESS_STREAM, errText, type PartitionRun } from './ingress-types.js';
import { partitionOfConsumer } from './partition-map.js';

/**
 * The idle heartbeat a pull asks for. The client pulls again once two are missed: that is how long a
 * partition waits when its pull is lost without a word, as at every change of its consumer's leader on a
 * cluster: about 2 s, where the client's default (half the expiry) makes it several seconds
 * (bench/cluster.ts measures the turn after a stepdown). The cost: one heartbeat a second from each idle
 * partition consumer.
 */
export const HEARTBEAT_MS = 1_000;
/**
 * Idle heartbeats a partition consumer may miss in a row (10 × HEARTBEAT_MS: 10 s) before it is made
 * again: a consumer that exists but has lost its leader for good answers no pull and reports no error, and
 * the node, still holding the partition's lease, would consume nothing from it: the partition's messages
 * would stay unanswered for as long as the node holds the lease.
 */
const STALLED_HEARTBEATS = 10;
/**
 * Pulls refused in a row (409: a limit of the consumer's, such as its max batch or max waiting pulls)
 * before the consumer is made again. The client answers a refusal by waiting for two missed heartbeats
 * and pulling again; the refusal itself counts as a sign of life, so the missed heartbeats never reach
 * STALLED_HEARTBEATS and a consumer that refuses every pull would leave its partition unconsumed for good.
 * Each refusal comes 2–3 s after the one before (two missed heartbeats), which spaces the remakes when a
 * fresh consumer is refused too.
 */
const REFUSED_PULLS = 3;

/** Where JetStream announces a consumer's new leader: `<this>.<stream>.<consumer>`. */
const LEADER_ELECTED = '$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED';

/** What the node reads of an advisory of a consumer's new leader: the server's name. */
const LeaderElectedSchema = z.object({ leader: z.string().min(1).max(256) });
/** Such an advisory is about 1 KiB (the replicas with their state): anything past this is not one. */
const ADVISORY_BYTES = 64 * 1024;

export interface ConsumerWatchContext {
  log: Logger;
  /** Restarts consumption of the partition from a fresh consumer (`JetStreamIngress`'s restart). */
  restart: (p: number, why: string) => Promise<void>;
  refreshLeases: () => Promise<void>;
}

export async function watchConsumer(run: PartitionRun, messages: ConsumerMessages, ctx: ConsumerWatchContext): Promise<void> {
  try {
    for await (const s of messages.status()) {
      if (!run.active) break;
      if (s.type === 'exceeded_limits' || (s.type === 'debug' && s.code !== 408 && s.code !== 404)) {
        // A pull the server refused (409, other than for a deleted consumer): the client waits for missed
        // heartbeats before it pulls again.
        run.refusedPulls++;
        ctx.log.warn(
          { partition: run.partition, event: s.type, code: s.code, description: s.description, refused: run.refusedPulls },
          'partition consumer: the server refused a pull',
        );
        if (run.refusedPulls >= REFUSED_PULLS) {
          ctx.log.warn({ partition: run.partition, refused: run.refusedPulls }, 'partition consumer refuses every pull: making it again');
          void ctx.restart(run.partition, 'pulls refused');
          break;
        }
        continue;
      }
      if (s.type === 'consumer_deleted' || s.type === 'consumer_not_found') {
        ctx.log.warn({ partition: run.partition, event: s.type }, 'partition consumer vanished');
        // Another node took the partition (then our lease is gone too) or someone deleted it.
        await ctx.refreshLeases();
        void ctx.restart(run.partition, s.type);
        break;
      }
      if (s.type === 'heartbeats_missed') {
        // The client tells of missed heartbeats from the second on (then once a heartbeat interval while
        // nothing comes): nothing came from the consumer for two intervals, and the client pulls again.
        // The partition's turns waited that long. Said once per silence; the remake below ends a long one.
        if (s.count === 2) ctx.log.warn({ partition: run.partition, silentForMs: s.count * HEARTBEAT_MS }, 'partition consumer silent; pulling again');
        else ctx.log.debug({ partition: run.partition, count: s.count }, 'partition consumer still silent');
        if (s.count >= STALLED_HEARTBEATS) {
          ctx.log.warn({ partition: run.partition, missed: s.count }, 'partition consumer silent: making it again');
          void ctx.restart(run.partition, 'heartbeats missed');
          break;
        }
      }
    }
  } catch {
    // status iterator closed
  }
}

export interface LeaderWatchContext {
  partitions: number;
  /** The partition's run on this node, if any. */
  runOf: (p: number) => PartitionRun | undefined;
  stopping: () => boolean;
  log: Logger;
}

/**
 * A partition consumer's pull waiting at its leader goes with that leader: when a cluster elects another
 * (a server restarted, upgraded or crashed, a stepdown), nothing tells the client, which pulls again only
 * after two missed heartbeats (about 2 s), and after a crash only once the consumer's info is answered
 * again. The server announces each election in the account, so the node pulls again when its consumer's
 * is announced, milliseconds after the election instead of seconds (bench/cluster.ts measures it:
 * summary.clusterTurnAfterLeaderChangeP50Us). The pull is the client's own after
 * missed heartbeats, less its check of the consumer's info (`resetPendingNoInfo`: the advisory says the
 * consumer has a leader). That method is not public API: test/cluster.nats.test.ts fails if a client
 * version drops it, and the heartbeats would still bring the partition back. Where the node's NATS user
 * may not subscribe to `$JS.EVENT.ADVISORY.>`, the server refuses this subscription (logged as a
 * transport error) and the heartbeats do it alone.
 */
export function watchLeaders(nc: NatsConnection, ctx: LeaderWatchContext): NatsSubscription {
  const prefix = `${LEADER_ELECTED}.${INGRESS_STREAM}.`;
  return nc.subscribe(`${prefix}*`, {
    callback: (err, m) => {
      if (err || ctx.stopping()) return;
      const p = partitionOfConsumer(m.subject.slice(prefix.length), ctx.partitions);
      const run = p === undefined ? undefined : ctx.runOf(p);
      if (!run?.active || !run.messages) return;
      let leader: string;
      try {
        leader = decode(LeaderElectedSchema, m.data, 'consumer leader advisory', ADVISORY_BYTES).leader;
      } catch (e) {
        ctx.log.warn({ partition: run.partition, err: errText(e) }, 'ignored a consumer leader advisory that could not be read');
        return;
      }
      // The leader the run pulls from already (the election that made its consumer, announced late).
      if (leader === run.leader) return;
      run.leader = leader;
      // Not `resetPending`, which asks for the info first and does nothing while a reset of its own is
      // under way: after a crash, the client's reset begun when the heartbeats stopped is still waiting
      // for an info when the election is announced, and the partition would wait for it
      // (test/cluster.nats.test.ts kills the leader's server).
      const messages = run.messages as ConsumerMessages & { resetPendingNoInfo?: () => Promise<boolean> };
      if (typeof messages.resetPendingNoInfo !== 'function') return;
      ctx.log.info({ partition: run.partition, leader }, 'partition consumer has a new leader; pulling again');
      messages.resetPendingNoInfo().catch(() => undefined);
    },
  });
}
