/**
 * The partition consumers on TROUPE_IN, one per partition (`p<N>`): made afresh when a node starts
 * consuming a partition, or kept when it is this node's own and idle (`notIdleOwn`), each carrying the ack
 * floor of the consumers before it in its description (see `IngressMessage.ackedBefore`).
 */
import { AckPolicy, DeliverPolicy, JetStreamApiCodes, type ConsumerConfig, type ConsumerInfo, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from '../../observability/logger.js';
import { subjects } from '../subjects.js';
import { INGRESS_STREAM, errText, msToNanos } from './ingress-types.js';
import { consumerName } from './partition-map.js';
import { isApiError } from './replicas.js';
import { isTransientJetStreamError, retryTransient } from './retry.js';

/** Prefix of a partition consumer's description: the ack floor of the consumers before it. */
const ACKED_THROUGH = 'troupe: earlier consumers acked through ';
/**
 * How long a node taking a partition back asks its own consumer's info before making a fresh one
 * (`fresh`). Making one needs the cluster's meta leader, and so, while the meta leader is being
 * elected, does the info of a consumer whose leader is alive (a test run: 10 of 43 such consumers not
 * answered in 10 s): waiting costs nothing that making one afresh would not.
 */
const KEEP_OWN_WAIT_MS = 20_000;
export const OWN_INFO_TIMEOUT_MS = 1_000;
/** Tries at making a partition consumer while JetStream is unavailable (about 20 s with the backoff). */
export const FRESH_CONSUMER_ATTEMPTS = 12;

export interface PartitionConsumersOptions {
  tenant: string;
  nodeId: string;
  nc: NatsConnection;
  /** The ingress's JetStream manager, and one that asks a consumer's info with a short timeout (`OWN_INFO_TIMEOUT_MS`). */
  jsm: () => JetStreamManager;
  ownInfoJsm: () => JetStreamManager;
  ackWaitMs: number;
  maxAckPending: number;
  /** Whether to keep trying to make partition p's consumer: the node is not stopping and still holds p. */
  keepTrying: (p: number) => boolean;
  log: Logger;
}

export class PartitionConsumers {
  readonly #opts: PartitionConsumersOptions;
  /**
   * Per partition, the consumer this node made last (`madeMark`); null once a run of it did not stop
   * cleanly (see `notIdleOwn`).
   */
  readonly #made = new Map<number, string | null>();
  #makes = 0;

  constructor(opts: PartitionConsumersOptions) {
    this.#opts = opts;
  }

  config(p: number): Partial<ConsumerConfig> {
    return {
      durable_name: consumerName(p),
      filter_subject: subjects.threadInPartition(this.#opts.tenant, p),
      ack_policy: AckPolicy.Explicit,
      // Work-queue streams only allow deliver-all; it means "from the oldest message still there".
      deliver_policy: DeliverPolicy.All,
      ack_wait: msToNanos(this.#opts.ackWaitMs),
      max_ack_pending: this.#opts.maxAckPending,
      // Redelivery limits are ours (maxDeliver, then term), so the server never parks a message.
      max_deliver: -1,
    };
  }

  /**

   * partition's consumers reached so far (0 when unknown): see `PartitionRun.ackedThrough`. A consumer's
   * floor dies with it, and a partition can change hands several times before anyone consumes it (a node
   * takes it and gives it back at once while the nodes balance), so each fresh consumer carries the
   * floor of the one it replaces in its description (`ACKED_THROUGH`), and the next reads the higher of
   * the two.
   */
  async fresh(p: number, opts: { keepOwn?: boolean } = {}): Promise<{ ackedThrough: number; how: ConsumerHow }> {
    const jsm = this.#opts.jsm();
    const name = consumerName(p);
    let ackedThrough = 0;
    // On a cluster, consumers are made by the JetStream meta leader: while a new one is elected (a server
    // died, which is also when nodes reconnect and restart their consumers) every attempt times out for a
    // few seconds. Keep trying while this node holds the partition rather than giving it up: handing it
    // around the nodes during the election only moves its messages.
    const started = Date.now();
    // Only a consumer this node made may be kept; a partition it never consumed is simply made afresh.
    const mine = opts.keepOwn ? this.#made.get(p) : undefined;
    let waitingOwn = false;
    let madeBecause: string | undefined;
    /** The description of the consumer this call last asked to be made. */
    let asked: string | undefined;
    return retryTransient(
      async () => {
        // This node's own consumer, not answering: its leader died with its server, and its replicas are
        // electing another. Ask again for a while rather than make it anew: that asks the meta leader,
        // which a crash often takes too, and throws away a consumer about to answer. The info is answered
        // in milliseconds by a consumer with a leader, so it is asked with a short timeout.
        const asking = typeof mine === 'string' && madeBecause === undefined && Date.now() - started < KEEP_OWN_WAIT_MS;
        let infoError = '';
        const old = await (asking ? this.#opts.ownInfoJsm() : jsm).consumers.info(INGRESS_STREAM, name).catch((err: unknown) => {
          waitingOwn = asking && isTransientJetStreamError(err);
          if (waitingOwn) throw err;
          infoError = errText(err);
          return undefined;
        });
        waitingOwn = false;
        ackedThrough = Math.max(ackedThrough, old?.ack_floor?.stream_seq ?? 0, carriedFloor(old?.config.description));
        // The first attempt's reason is the one: a later attempt finds the consumer this one deleted.
        madeBecause ??= mine === undefined ? undefined : old ? notIdleOwn(mine, old) : `no info of it: ${infoError}`;
        if (mine !== undefined && madeBecause === undefined) return { ackedThrough, how: { consumer: 'kept' } };
        // The make this call asked for timed out but was stored (a meta leader too slow to answer in
        // time): that consumer is the one wanted, and untouched, so it is taken rather than deleted and
        // made again, two more calls to that slow meta leader. Once it runs: on a cluster, until its
        // replicas have started it, a member answers its info from the assignment (the config, zero state,
        // no cluster info, where its leader's answer names the leader), and it would answer no pull; so it
        // is asked again, not made again, which would start that over.
        if (old !== undefined && asked !== undefined && old.config.description === asked && untouched(old)) {
          if (this.#opts.nc.info?.cluster !== undefined && !old.cluster?.leader)
            throw new ConsumerNotStarted(`the partition consumer p${p} this node made is stored but not started yet (no leader)`);
          this.#made.set(p, madeMark(old));
          this.#opts.log.info({ partition: p }, 'a make of the partition consumer that timed out had been stored; taking it');
          return { ackedThrough, how: { consumer: 'made', ...(madeBecause ? { madeBecause } : {}) } };
        }
        this.#made.delete(p);
        try {
          await jsm.consumers.delete(INGRESS_STREAM, name);
        } catch (err) {
          if (!isApiError(err, JetStreamApiCodes.ConsumerNotFound)) throw err;
        }
        // The description names who made it and which of its makes this is: another consumer of the same
        // name and floor, made by another node or by this one later, is told apart (`madeMark`).
        const description = `${ACKED_THROUGH}${ackedThrough}; made by ${this.#opts.nodeId} #${++this.#makes}`;
        asked = description;
        const made = await jsm.consumers.add(INGRESS_STREAM, { ...this.config(p), description });
        this.#made.set(p, madeMark(made));
        return { ackedThrough, how: { consumer: 'made', ...(madeBecause ? { madeBecause } : {}) } };
      },
      {
        attempts: FRESH_CONSUMER_ATTEMPTS,
        transient: (err) => err instanceof ConsumerNotStarted || isTransientJetStreamError(err),
        // Not while the partition is being given back: its release waits behind this (the per-partition
        // order of the lease's callbacks), and the next owner with it.
        keepTrying: () => this.#opts.keepTrying(p),
        onRetry: (attempt, err) =>
          this.#opts.log.info(
            { partition: p, attempt, err: errText(err) },
            waitingOwn ? 'the partition consumer does not answer yet; asking again' : 'could not make the partition consumer yet; trying again',
          ),
      },
    );
  }

  /** A run of partition p did not stop cleanly: its consumer is not taken again as it is. */
  unclean(p: number): void {
    if (this.#made.has(p)) this.#made.set(p, null);
  }
}

/**
 * Why a partition's consumer, as the server describes it in `info`, may not be consumed again as it is
 * instead of made afresh, given `mine`, what this node kept of the one it made last (`PartitionConsumers`). Kept when it
 * is that one, unchanged (same config, whose description names this node and the make; another node taking
 * the partition deletes it and makes its own, so this one was consumed by this node only), this node's
 * last run of it stopped cleanly, and nothing is left in it: no message delivered and not
 * acknowledged (which it would give again only after ack_wait, behind newer ones), no pull waiting (one of
 * the stopped run's, which could take a message to an inbox nobody reads). Then it starts at the oldest
 * message not acknowledged, as a fresh one would. This is what a node that fenced itself off its leases
 * during an election of the lease bucket finds on taking them back: making every partition's consumer
 * again then asked the cluster's meta leader, itself recovering, for two operations per partition.
 */
function notIdleOwn(mine: string | null, info: ConsumerInfo): string | undefined {
  if (mine === null) return 'its last run here did not stop cleanly';
  if (mine !== madeMark(info)) return 'not the consumer this node made, or changed since';
  if (info.num_ack_pending > 0) return 'messages delivered and not acknowledged';
  if (info.num_waiting > 0) return 'pulls waiting';
  return undefined;
}

/** A consumer this node made is stored, but its replicas have not started it: asked again (`fresh`). */
class ConsumerNotStarted extends Error {}

/** A consumer nothing was delivered from (so nothing is pending) and no pull waits at. */
function untouched(info: ConsumerInfo): boolean {
  return info.delivered.consumer_seq === 0 && info.num_waiting === 0;
}

/** How a partition's consumption began: its consumer kept or made, and why one this node had made was not kept. */
export interface ConsumerHow {
  consumer: 'kept' | 'made';
  madeBecause?: string;
}

/**
 * What tells one consumer of a partition from another, and one changed since it was made: its config,
 * whose description names the node that made it and that node's count of makes. (Not its `created`: a
 * cluster answers the make with a time other than the one its info gives afterwards.)
 */
function madeMark(info: ConsumerInfo): string {
  return JSON.stringify(info.config);
}

/** The floor a partition consumer carries over from the one it replaced (see `fresh`). */
function carriedFloor(description: string | undefined): number {
  if (!description?.startsWith(ACKED_THROUGH)) return 0;
  const n = Number(/^\d{1,16}/.exec(description.slice(ACKED_THROUGH.length))?.[0]);
  return Number.isSafeInteger(n) && n > 0 ? n : 0;
}
