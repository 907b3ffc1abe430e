/**
 * Durable inbound thread messages: JetStream stream + partition leases.
 *
 * Client principal P publishes to `troupe.<tenant>.in.<P>.<threadId>` (a core request with
 * `Nats-Msg-Id: <threadId>/<messageId>`). The account's subject mapping rewrites that to `...<threadId>.<N>`,
 * N = FNV-1a(threadId) mod partitions (`partitionOf`), and the stream `TROUPE_IN` (work-queue retention)
 * stores it and answers the request with a PubAck (`{ stream, seq, duplicate? }`), de-duplicated on that
 * id for 2 minutes (scoped to the thread: a messageId reused in another thread is another message). One
 * node at a time holds the lease of a partition (PartitionLeases) and consumes it with a durable pull
 * consumer `p<N>`. The principal is a subject token the broker checked (a client may only publish under
 * its own), so it is who sent the message; a message whose subject is malformed, or that sits in another
 * partition than its thread's (published straight to a partition subject), is refused.
 *
 * Ordering: a thread lives in one partition, a partition in one consumer, and the consumer delivers in
 * stream order; here each thread's messages go through a FIFO promise chain (different threads run
 * concurrently), and a message is acked only after the handler resolved, i.e. after the thread state that
 * includes it was committed. On every (re)start of a partition the consumer is deleted and created afresh:
 * with work-queue retention acked messages are gone, so a fresh consumer starts at the oldest unacked
 * message of the partition and redelivers in order. An old consumer would redeliver its unacked messages
 * only after ack_wait, behind newer ones. The same restart happens after a reconnect (messages in flight
 * while disconnected would otherwise come back late) and when the consumer vanished. One exception: a node
 * taking back a partition it let go, or restarting one after a reconnect, keeps the consumer when it is its
 * own and holds nothing an old one would give late, neither unacknowledged messages nor waiting pulls
 * (`notIdleOwn`).
 *
 * Failures: a TroupeError with a client-error code (the message itself is bad; redelivery cannot fix it,
 * and the handler already told the user on the thread's `out`) is terminated. Anything else is nak'ed
 * with exponential backoff, and the thread is held: its later messages are sent back too, and the thread
 * takes nothing newer until every message it sent back has come back, oldest first, so none can overtake
 * another (a message sent back and overtaken would look like an old redelivery to the thread). Messages
 * sent back behind a failed one do not count as failed attempts. After `maxDeliver` failed attempts the
 * message is moved to the dead-letter stream `TROUPE_DLQ` (with its error, `troupe dlq` lists them), the host is told
 * (`onDeadLetter`: the thread gets a typed error), and it is terminated, so one poisoned message cannot
 * stall its thread forever. Only once its copy is stored: when the dead-letter stream does not take it, the
 * message is sent back (after the longest retry delay) and dead-lettered when it fails again; so is a
 * message refused before any handler (its sender is told once). Attempts are counted here too, not only
 * by the consumer: a consumer made afresh (after a reconnect) starts its delivery counts at 1 again.
 *
 * Delivery is at-least-once: after a takeover or a lost ack the handler may see a message again
 * (`redelivered`); it de-duplicates on `messageId`.
 */
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  jetstream,
  jetstreamManager,
  JetStreamApiCodes,
  RetentionPolicy,
  StorageType,
  type ConsumerConfig,
  type ConsumerInfo,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  type StreamConfig,
} from '@nats-io/jetstream';
import { headers as jsHeaders, type NatsConnection, type Status, type Subscription as NatsSubscription } from '@nats-io/transport-node';
import { z } from 'zod';
import { parseThreadIn, subjects } from '../subjects.js';
import { decode } from '../../protocol/codec.js';
import { HEADERS } from '../../protocol/headers.js';
import { isTerminal, TroupeError } from '../../protocol/errors.js';
import { DEFAULT_LEASE_TTL_MS, DEFAULT_PARTITIONS, fnv1a32, PartitionLeases, type LeaseLossReason } from './leases.js';
import { silentLogger, type Logger } from '../../observability/logger.js';
import { checkReplicas, ensureReplicas, ensureStream, isApiError } from './replicas.js';
import { jsHeadersOf } from '../nats-headers.js';
import { isCreateOrBindTransient, isTransientJetStreamError, retrySetup, retryTransient } from './retry.js';

export const INGRESS_STREAM = 'TROUPE_IN';
export const DEAD_LETTER_STREAM = 'TROUPE_DLQ';
/** Headers of a dead-lettered message (the original headers are kept too). */
export const DEAD_LETTER_HEADERS = {
  code: 'Troupe-Error-Code',
  message: 'Troupe-Error',
  subject: 'Troupe-Original-Subject',
  seq: 'Troupe-Original-Seq',
  attempts: 'Troupe-Attempts',
} as const;
export const DEFAULT_INGRESS_MAX_AGE_MS = 24 * 60 * 60 * 1000;
export const INGRESS_DUPLICATE_WINDOW_MS = 2 * 60 * 1000;
const ATTEMPTS_TRACKED = 10_000;
/** How long one pull request lasts. */
const PULL_EXPIRES_MS = 5_000;
/**
 * The idle heartbeat a pull asks for. The client pulls again once two are missed: that is how long a
 * partition waits when its pull is lost without a word, as at every change of its consumer's leader on a
 * cluster (measured on 3 servers, a stepdown then a message: 4.7–6.9 s with the client's default of half
 * the expiry, 2.5 s; bench/PROFILE.md). The cost: one heartbeat a second from each idle
 * partition consumer.
 */
const HEARTBEAT_MS = 1_000;
/** Acks sent again (each waiting up to ACK_CONFIRM_MS for the server's confirmation) before asking the stream. */
const ACK_ATTEMPTS = 3;
const ACK_CONFIRM_MS = 5_000;
const JS_ACK = new TextEncoder().encode('+ACK');
/** Prefix of a partition consumer's description: the ack floor of the consumers before it. */
const ACKED_THROUGH = 'troupe: earlier consumers acked through ';
/**
 * How long a node taking a partition back asks its own consumer's info before making a fresh one
 * (`#freshConsumer`). Making one needs the cluster's meta leader, and so, while the meta leader is being
 * elected, does the info of a consumer whose leader is alive (a test run: 10 of 43 such consumers not
 * answered in 10 s): waiting costs nothing that making one afresh would not.
 */
const KEEP_OWN_WAIT_MS = 20_000;
const OWN_INFO_TIMEOUT_MS = 1_000;
/** Tries at making a partition consumer while JetStream is unavailable (about 20 s with the backoff). */
const FRESH_CONSUMER_ATTEMPTS = 12;
/**
 * Idle heartbeats a partition consumer may miss in a row (10 × HEARTBEAT_MS: 10 s) before it is made
 * again: a consumer that exists but has lost its leader for good answers no pull and reports no error, and
 * the node, still holding the partition's lease, would consume nothing from it (a cluster chaos run: one
 * partition silent for the last 50 s of the run, two messages never answered, their copies included).
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

/** A partition's consumer on TROUPE_IN. */
function consumerName(p: number): string {
  return `p${p}`;
}

/** The partition whose consumer has this name, if it is one of `partitions`. */
function partitionOfConsumer(name: string, partitions: number): number | undefined {
  const m = /^p(\d{1,4})$/.exec(name);
  const p = m ? Number(m[1]) : -1;
  return p >= 0 && p < partitions && consumerName(p) === name ? p : undefined;
}

/**
 * The partition nats-server's `{{partition(n,1)}}` mapping puts a thread in: FNV-1a 32-bit over the
 * thread id's bytes, modulo n (checked against a real server in test/ingress.test.ts).
 */
export function partitionOf(threadId: string, partitions: number = DEFAULT_PARTITIONS): number {
  return fnv1a32(threadId) % partitions;
}

export interface IngressMessage {
  threadId: string;
  /** The broker-checked principal that published the message. */
  principal: string;
  partition: number;
  /** `Nats-Msg-Id`: the A2A messageId. */
  messageId: string | undefined;
  data: Uint8Array;
  headers: Record<string, string>;
  /** Seen before by some node (redelivery after a failure, a takeover or a lost ack). */
  redelivered: boolean;
  deliveryCount: number;
  /**
   * At or below the ack floor of the partition's previous consumer: acknowledged before, yet the stream
   * gave it again. A replicated work-queue stream on nats-server 2.9 can keep acknowledged messages when a
   * consumer's leader changes or the consumer is deleted right after the acks (the deletes ride on the
   * consumer's replication, not the stream's). A hint for what to publish, not a reason to skip the
   * message: the floor comes from the server's consumer state, which these same faults can leave ahead
   * of what was handled, so the handler still sees it (and finds it handled in its own state).
   */
  ackedBefore: boolean;
  /** Stream sequence. */
  seq: number;
  /** When the stream stored this copy (ms since the epoch, the server's clock). */
  storedAt: number;
  subject: string;
}

export interface IngressHandlerContext {
  /** Aborted when this node lost the partition (another node may already be handling the thread). */
  signal: AbortSignal;
}

/**
 * Handles one message. It may return a function to run once the message's ack is settled (e.g.
 * publishing an answer: a crash before the ack makes the message come back to the next owner, which
 * answers it; a crash after cannot, so nothing is answered twice). It is told whether the message is
 * known to be acknowledged (`acked`): the server confirmed the ack, or the stream no longer holds the
 * message. When that is not known (the consumer's leader was being elected, the consumer was remade by
 * the partition's next owner), the message may come again, to this node or another, and is answered then.
 * The thread's next message is handed over only after this step ran.
 */
export type AfterAck = (outcome: { acked: boolean }) => void;
export type IngressHandler = (msg: IngressMessage, ctx: IngressHandlerContext) => void | Promise<void | AfterAck | undefined>;

export interface JetStreamIngressOptions {
  nc: NatsConnection;
  tenant: string;
  nodeId: string;
  /** Must equal the partition count of the server's mapping. Default 8. */
  partitions?: number;
  leaseTtlMs?: number;
  /** Lease KV bucket; default `troupe_leases`. */
  leaseBucket?: string;
  /** Resolve when the message is done with (the host: its turn answered and committed); throw to refuse or retry. It may run longer than ack_wait: the ingress keeps the message in progress meanwhile. */
  handler: IngressHandler;
  /** This node now consumes partition p (e.g. rehydrate its threads that were mid-turn). */
  onPartitionAcquired?: (partition: number) => void | Promise<void>;
  /** This node no longer consumes partition p and its handlers have finished (e.g. passivate its threads). */
  onPartitionReleased?: (partition: number) => void | Promise<void>;
  /** A message was refused before the handler saw it (malformed subject, wrong partition). */
  onRefused?: (msg: { subject: string; principal?: string; threadId?: string; messageId?: string; error: TroupeError }) => void;
  /** A message failed `maxDeliver` times and was dead-lettered. */
  onDeadLetter?: (msg: IngressMessage, error: TroupeError) => void;
  logger?: Logger;
  /** Stream max age; default 24 h. */
  maxAgeMs?: number;
  /** Default 30 s: a message unacked this long (node stuck) is redelivered. */
  ackWaitMs?: number;
  /** Default 1000 per partition. */
  maxAckPending?: number;
  /** Failed attempts after which a message is terminated; default 10. */
  maxDeliver?: number;
  /** Nak backoff: `base * 2^(attempt-1)`, capped at `max`. Default 250 ms .. 30 s. */
  retryDelayMs?: { base?: number; max?: number };
  /**
   * Replicas of TROUPE_IN, TROUPE_DLQ and the lease bucket (1..5). Created with 1 when absent; given, an
   * existing stream with another count is scaled to it.
   */
  replicas?: number;
  /** How long setup keeps asking a cluster that does not answer yet (a leader election); default 60 s. */
  setupDeadlineMs?: number;
  /**
   * On a voluntary release (rebalance, stop), how long in-flight handlers may run before their signal is
   * aborted. Default 10 s. On a lost lease they are aborted at once.
   */
  releaseTimeoutMs?: number;
}

/**
 * A thread held behind a message that failed: the sequences it sent back to the stream (the failed one,
 * and each later one nak'ed behind it) and has not taken again. It takes them in stream order, and nothing
 * newer meanwhile.
 */
interface Hold {
  back: Set<number>;
  /** When the oldest of them is due back (then: when the hold last moved on); a hold stuck long after it is given up. */
  until: number;
}

/** One consumption run of a partition; a restart makes a new one, and the old one's messages are dropped. */
interface PartitionRun {
  readonly partition: number;
  readonly abort: AbortController;
  /** Tail of each thread's FIFO chain. */
  readonly chains: Map<string, Promise<void>>;
  /** Every queued or running message, plus pending ack confirmations. */
  readonly inflight: Set<Promise<unknown>>;
  /** Threads held behind a nak'ed message: later messages wait until it, and every one sent back behind it, came back. */
  readonly held: Map<string, Hold>;
  /**
   * Stream sequence up to which the partition's previous consumer had every message acknowledged (its ack
   * floor, read before it was deleted; 0 when it could not be read). See `IngressMessage.ackedBefore`.
   */
  readonly ackedThrough: number;
  messages?: ConsumerMessages;
  active: boolean;
  /**
   * The lease was lost (expired, or another node holds it), not given back: another node may consume the
   * partition now, with a consumer of the same name that would take this run's acks as its own.
   */
  lost?: boolean;
  /** Pulls the server refused since the consumer last delivered a message (see REFUSED_PULLS). */
  refusedPulls: number;
  /** The server leading the partition's consumer, as its info said at the start or an advisory since (clusters only). */
  leader?: string;
}

export class JetStreamIngress {
  readonly tenant: string;
  readonly nodeId: string;
  readonly partitions: number;
  readonly stream = INGRESS_STREAM;
  readonly #nc: NatsConnection;
  readonly #opts: JetStreamIngressOptions;
  readonly #log: Logger;
  readonly #runs = new Map<number, PartitionRun>();
  /** Per-partition chain of start/stop operations, so they never overlap. */
  readonly #ops = new Map<number, Promise<void>>();
  /**
   * Per partition, the consumer this node made last (`madeMark`); null once a run of it did not stop
   * cleanly (see `notIdleOwn`).
   */
  readonly #made = new Map<number, string | null>();
  #makes = 0;
  readonly #ackWaitMs: number;
  readonly #maxAckPending: number;
  readonly #maxDeliver: number;
  readonly #retryBase: number;
  readonly #retryMax: number;
  readonly #releaseTimeoutMs: number;
  #jsm?: JetStreamManager;
  /** Asks a consumer's info with a short timeout (see `#freshConsumer`). */
  #ownInfoJsm?: JetStreamManager;
  #js?: JetStreamClient;
  #leases?: PartitionLeases;
  #status?: AsyncIterable<Status> & { stop?: () => void };
  /** JetStream's advisories of a new leader for a partition consumer (see #watchLeaders). */
  #leaders?: NatsSubscription;
  #started = false;
  #stopping = false;
  /** Failed attempts per stream sequence, across consumers of this node. */
  readonly #attempts = new Map<number, number>();
  /** Times a message was sent back untried because its thread was held (not failed attempts). */
  readonly #parked = new Map<number, number>();
  /** Refused messages whose sender was told, sent back because their dead-letter copy was not stored (value unused). */
  readonly #refusedTold = new Map<number, number>();

  constructor(opts: JetStreamIngressOptions) {
    this.tenant = opts.tenant;
    this.nodeId = opts.nodeId;
    this.partitions = opts.partitions ?? DEFAULT_PARTITIONS;
    checkReplicas(opts.replicas);
    this.#nc = opts.nc;
    this.#opts = opts;
    this.#log = (opts.logger ?? silentLogger()).child({ component: 'ingress', node: opts.nodeId, tenant: opts.tenant });
    this.#ackWaitMs = opts.ackWaitMs ?? 30_000;
    this.#maxAckPending = opts.maxAckPending ?? 1000;
    this.#maxDeliver = opts.maxDeliver ?? 10;
    this.#retryBase = opts.retryDelayMs?.base ?? 250;
    this.#retryMax = opts.retryDelayMs?.max ?? 30_000;
    this.#releaseTimeoutMs = opts.releaseTimeoutMs ?? 10_000;
  }

  /** Subjects the stream captures: every partition of every thread of the tenant. */
  get streamSubject(): string {
    return subjects.threadInStream(this.tenant);
  }

  /** Partitions this node is consuming right now, ascending. */
  owned(): number[] {
    return [...this.#runs.values()].filter((r) => r.active && r.messages).map((r) => r.partition).sort((a, b) => a - b);
  }

  /**
   * Inbound lag of this node: messages of its partitions not acknowledged yet (waiting in the stream or
   * in a turn), from its consumers' info. One request per owned partition: for scrapes, not hot paths.
   */
  async pending(): Promise<number | undefined> {
    const jsm = this.#jsm;
    if (!jsm) return undefined;
    let total = 0;
    for (const p of this.owned()) {
      const info = await jsm.consumers.info(INGRESS_STREAM, this.#consumerName(p)).catch(() => undefined);
      if (info) total += info.num_pending + info.num_ack_pending;
    }
    return total;
  }

  /** The lease manager (owned leases, live node count). */
  get leases(): PartitionLeases | undefined {
    return this.#leases;
  }

  async start(): Promise<this> {
    if (this.#started) throw new Error('JetStreamIngress already started');
    this.#started = true;
    this.#jsm = await retrySetup(
      `creating the inbound streams ${INGRESS_STREAM} and ${DEAD_LETTER_STREAM}`,
      async () => {
        const jsm = await jetstreamManager(this.#nc);
        await this.#ensureStream(jsm);
        await this.#ensureDeadLetterStream(jsm);
        return jsm;
      },
      // The step makes the streams when they are missing: "stream not found" is the cluster recovering.
      { log: this.#opts.logger, deadlineMs: this.#opts.setupDeadlineMs, transient: isCreateOrBindTransient },
    );
    this.#js = jetstream(this.#nc);
    this.#ownInfoJsm = await jetstreamManager(this.#nc, { timeout: OWN_INFO_TIMEOUT_MS, checkAPI: false });
    this.#watchStatus();
    this.#watchLeaders();
    this.#leases = new PartitionLeases({
      nc: this.#nc,
      tenant: this.tenant,
      nodeId: this.nodeId,
      partitions: this.partitions,
      leaseTtlMs: this.#opts.leaseTtlMs ?? DEFAULT_LEASE_TTL_MS,
      ...(this.#opts.leaseBucket ? { bucket: this.#opts.leaseBucket } : {}),
      ...(this.#opts.replicas !== undefined ? { replicas: this.#opts.replicas } : {}),
      logger: this.#opts.logger ?? silentLogger(),
      setupDeadlineMs: this.#opts.setupDeadlineMs,
      onAcquired: (p) => this.#op(p, () => this.#acquire(p)),
      onLost: (p, reason) => this.#op(p, () => this.#release(p, reason)),
    });
    await this.#leases.start();
    return this;
  }

  /** Gives every partition back (after in-flight handlers finish), so other nodes take over at once. */
  async stop(): Promise<void> {
    if (!this.#started || this.#stopping) return;
    this.#stopping = true;
    this.#status?.stop?.();
    this.#leaders?.unsubscribe();
    await this.#leases?.stop({ release: true });
    // Anything the leases did not cover (e.g. a restart under way).
    await Promise.all([...this.#runs.keys()].map((p) => this.#op(p, () => this.#release(p, 'released'))));
    await Promise.all([...this.#ops.values()]);
  }

  // ---- stream and consumers -----------------------------------------------------------------------

  async #ensureStream(jsm: JetStreamManager): Promise<void> {
    const want: Partial<StreamConfig> & { name: string } = {
      name: INGRESS_STREAM,
      subjects: [this.streamSubject],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      duplicate_window: msToNanos(INGRESS_DUPLICATE_WINDOW_MS),
      max_age: msToNanos(this.#opts.maxAgeMs ?? DEFAULT_INGRESS_MAX_AGE_MS),
      num_replicas: this.#opts.replicas ?? 1,
    };
    let info;
    try {
      info = await jsm.streams.info(INGRESS_STREAM);
    } catch (err) {
      if (!isApiError(err, JetStreamApiCodes.StreamNotFound)) throw err;
      try {
        await jsm.streams.add(want);
        this.#log.info({ stream: INGRESS_STREAM, subjects: want.subjects }, 'created inbound stream');
        return;
      } catch (addErr) {
        // Another node created it at the same moment.
        info = await jsm.streams.info(INGRESS_STREAM).catch(() => {
          throw addErr;
        });
      }
    }
    const cfg = info.config;
    if (cfg.retention !== RetentionPolicy.Workqueue) {
      throw new TroupeError(
        'TRANSPORT_ERROR',
        `stream ${INGRESS_STREAM} exists with ${cfg.retention} retention; it must be workqueue (the retention of a stream cannot change: delete it)`,
      );
    }
    const subjectsOk = cfg.subjects?.length === 1 && cfg.subjects[0] === this.streamSubject;
    if (!subjectsOk || cfg.max_age !== want.max_age || cfg.duplicate_window !== want.duplicate_window) {
      await jsm.streams.update(INGRESS_STREAM, {
        ...cfg,
        subjects: want.subjects!,
        max_age: want.max_age!,
        duplicate_window: want.duplicate_window!,
      });
      this.#log.info({ stream: INGRESS_STREAM }, 'updated inbound stream configuration');
    }
    await ensureReplicas(jsm, INGRESS_STREAM, this.#opts.replicas, this.#log);
  }

  async #ensureDeadLetterStream(jsm: JetStreamManager): Promise<void> {
    const want: Partial<StreamConfig> & { name: string } = {
      name: DEAD_LETTER_STREAM,
      subjects: [subjects.deadLetterAll(this.tenant)],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      max_age: msToNanos(7 * DEFAULT_INGRESS_MAX_AGE_MS),
      max_msgs: 10_000,
      max_bytes: 32 * 1024 * 1024,
      discard: DiscardPolicy.Old,
      num_replicas: this.#opts.replicas ?? 1,
    };
    await ensureStream(jsm, want, this.#opts.replicas, this.#log);
  }

  #consumerName(p: number): string {
    return consumerName(p);
  }

  #consumerConfig(p: number): Partial<ConsumerConfig> {
    return {
      durable_name: this.#consumerName(p),
      filter_subject: subjects.threadInPartition(this.tenant, p),
      ack_policy: AckPolicy.Explicit,
      // Work-queue streams only allow deliver-all; it means "from the oldest message still there".
      deliver_policy: DeliverPolicy.All,
      ack_wait: msToNanos(this.#ackWaitMs),
      max_ack_pending: this.#maxAckPending,
      // Redelivery limits are ours (maxDeliver, then term), so the server never parks a message.
      max_deliver: -1,
    };
  }

  /**
   * Deletes the partition's consumer (whoever made it) and creates it afresh. Returns the ack floor the
   * partition's consumers reached so far (0 when unknown): see `PartitionRun.ackedThrough`. A consumer's
   * floor dies with it, and a partition can change hands several times before anyone consumes it (a node
   * takes it and gives it back at once while the nodes balance), so each fresh consumer carries the
   * floor of the one it replaces in its description (`ACKED_THROUGH`), and the next reads the higher of
   * the two.
   */
  async #freshConsumer(p: number, opts: { keepOwn?: boolean } = {}): Promise<{ ackedThrough: number; how: ConsumerHow }> {
    const jsm = this.#jsm!;
    const name = this.#consumerName(p);
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
        const old = await (asking ? this.#ownInfoJsm! : jsm).consumers.info(INGRESS_STREAM, name).catch((err: unknown) => {
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
          if (this.#nc.info?.cluster !== undefined && !old.cluster?.leader) throw new ConsumerNotStarted(`the partition consumer p${p} this node made is stored but not started yet (no leader)`);
          this.#made.set(p, madeMark(old));
          this.#log.info({ partition: p }, 'a make of the partition consumer that timed out had been stored; taking it');
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
        const description = `${ACKED_THROUGH}${ackedThrough}; made by ${this.nodeId} #${++this.#makes}`;
        asked = description;
        const made = await jsm.consumers.add(INGRESS_STREAM, { ...this.#consumerConfig(p), description });
        this.#made.set(p, madeMark(made));
        return { ackedThrough, how: { consumer: 'made', ...(madeBecause ? { madeBecause } : {}) } };
      },
      {
        attempts: FRESH_CONSUMER_ATTEMPTS,
        transient: (err) => err instanceof ConsumerNotStarted || isTransientJetStreamError(err),
        // Not while the partition is being given back: its release waits behind this (the per-partition
        // order of the lease's callbacks), and the next owner with it.
        keepTrying: () => !this.#stopping && this.#leases?.keeps(p) === true,
        onRetry: (attempt, err) =>
          this.#log.info(
            { partition: p, attempt, err: errText(err) },
            waitingOwn ? 'the partition consumer does not answer yet; asking again' : 'could not make the partition consumer yet; trying again',
          ),
      },
    );
  }

  // ---- partition lifecycle ------------------------------------------------------------------------

  /** Runs `fn` after every earlier start/stop of partition p. */
  #op(p: number, fn: () => Promise<void>): Promise<void> {
    const prev = this.#ops.get(p) ?? Promise.resolve();
    const next = prev.catch(() => undefined).then(fn);
    const settled = next.catch(() => undefined);
    this.#ops.set(p, settled);
    void settled.then(() => {
      if (this.#ops.get(p) === settled) this.#ops.delete(p);
    });
    return next;
  }

  /**
   * Lease acquired: fresh consumer (or this node's own, idle, see `notIdleOwn`), host hook, then consume. A
   * throw gives the lease back.
   */
  async #acquire(p: number): Promise<void> {
    if (this.#stopping) return;
    try {
      const { ackedThrough, how } = await this.#freshConsumer(p, { keepOwn: true });
      await this.#opts.onPartitionAcquired?.(p);
      try {
        await this.#startRun(p, ackedThrough);
      } catch (err) {
        // The host was told it has the partition: tell it it does not, then let the leases give it back.
        await Promise.resolve(this.#opts.onPartitionReleased?.(p)).catch(() => undefined);
        throw err;
      }
      this.#log.info({ partition: p, ...how }, 'consuming partition');
    } catch (err) {
      // Stopped trying because the partition is no longer this node's to consume (given back in a
      // rebalance, its lease lost, the node stopping): nothing is wrong, its release follows.
      if (!this.#stopping && this.#leases?.keeps(p) !== false) throw err;
      this.#log.info({ partition: p, err: errText(err) }, 'partition not consumed: it was given back or lost meanwhile');
    }
  }

  /** A run of partition p did not stop cleanly: its consumer is not taken again as it is. */
  #unclean(p: number): void {
    if (this.#made.has(p)) this.#made.set(p, null);
  }

  async #startRun(p: number, ackedThrough: number): Promise<void> {
    const run: PartitionRun = {
      partition: p,
      ackedThrough,
      abort: new AbortController(),
      chains: new Map(),
      inflight: new Set(),
      held: new Map(),
      active: true,
      refusedPulls: 0,
    };
    this.#runs.set(p, run);
    try {
      // A consumer just made on a cluster has no leader until its replicas elect one, and until then the
      // meta leader answers its info "JetStream system temporarily unavailable" (on a loaded 2-core
      // machine, for seconds). Giving the partition back on that answer made the next owner delete and
      // make the consumer again, and so on: the chaos campaign saw partitions go unconsumed for minutes
      // that way. Wait for the leader instead, for as long as this node holds the partition.
      const consumer = await retryTransient(() => this.#js!.consumers.get(INGRESS_STREAM, this.#consumerName(p)), {
        attempts: FRESH_CONSUMER_ATTEMPTS,
        keepTrying: () => !this.#stopping && run.active && this.#leases?.keeps(p) === true,
        onRetry: (attempt, err) => this.#log.info({ partition: p, attempt, err: errText(err) }, 'the partition consumer has no leader yet; asking again'),
      });
      run.leader = (await consumer.info(true)).cluster?.leader;
      const messages = await consumer.consume({
        max_messages: Math.min(this.#maxAckPending, 256),
        // Pulls expire (and heartbeats come) often: a pull the server dropped (its consumer leader changed,
        // a server was frozen and cut off) is noticed and sent again within seconds, not after 30 s.
        expires: PULL_EXPIRES_MS,
        idle_heartbeat: HEARTBEAT_MS,
        callback: (m) => this.#onMessage(run, m),
      });
      run.messages = messages;
      void this.#watchConsumer(run, messages);
    } catch (err) {
      run.active = false;
      if (this.#runs.get(p) === run) this.#runs.delete(p);
      throw err;
    }
  }

  /** Lease lost or given back: stop consuming, let handlers finish (or abort them), tell the host. */
  async #release(p: number, reason: LeaseLossReason): Promise<void> {
    const run = this.#runs.get(p);
    if (!run) return;
    if (reason !== 'released') run.lost = true;
    await this.#stopRun(run, reason === 'released' ? this.#releaseTimeoutMs : 0);
    if (this.#runs.get(p) === run) this.#runs.delete(p);
    this.#log.info({ partition: p, reason }, 'stopped consuming partition');
    await this.#opts.onPartitionReleased?.(p);
  }

  /**
   * Stops a run: no new pulls, queued messages dropped (not acked: the next consumer of the partition
   * redelivers them), running handlers awaited for up to `graceMs`, then aborted and awaited again.
   */
  async #stopRun(run: PartitionRun, graceMs: number): Promise<void> {
    run.active = false;
    const messages = run.messages;
    if (messages) {
      messages.stop();
      // Not closed in time: it might still pull, so its consumer is not taken again as it is.
      if (!(await withTimeout(messages.closed(), 2_000))) this.#unclean(run.partition);
    }
    if (graceMs > 0 && run.inflight.size > 0) await withTimeout(Promise.allSettled([...run.inflight]), graceMs);
    run.abort.abort(new TroupeError('TRANSPORT_ERROR', `partition ${run.partition} is no longer owned by ${this.nodeId}`));
    while (run.inflight.size > 0) {
      // Handlers ignoring the signal still get time; one that never settles is logged, not awaited forever.
      const settled = await withTimeout(Promise.allSettled([...run.inflight]), Math.max(this.#releaseTimeoutMs, 1_000));
      if (!settled) {
        this.#log.error({ partition: run.partition, pending: run.inflight.size }, 'handlers did not finish after abort; giving up on them');
        this.#unclean(run.partition);
        break;
      }
    }
    // Acks sent so far reach the server before the next consumer is made.
    if (!this.#nc.isClosed()) await this.#nc.flush().catch(() => undefined);
  }

  /**
   * Restarts consumption of a partition this node still owns, from a fresh consumer (after a reconnect,
   * or when the consumer vanished). The host hooks do not run: ownership did not change.
   */
  #restart(p: number, why: string): Promise<void> {
    return this.#op(p, async () => {
      const run = this.#runs.get(p);
      if (!run || !run.active || this.#stopping) return;
      if (!this.#leases?.keeps(p)) return;
      this.#log.info({ partition: p, why }, 'restarting partition consumer');
      await this.#stopRun(run, this.#releaseTimeoutMs);
      if (this.#runs.get(p) === run) this.#runs.delete(p);
      if (this.#stopping || !this.#leases?.keeps(p)) {
        await this.#opts.onPartitionReleased?.(p);
        return;
      }
      try {
        // After a reconnect the consumer is usually as the run left it: kept then (`notIdleOwn`). Made
        // afresh when it vanished, stalled, or refused pulls: that is what is wrong with it.
        const { ackedThrough, how } = await this.#freshConsumer(p, { keepOwn: why === 'reconnect' });
        await this.#startRun(p, ackedThrough);
        this.#log.info({ partition: p, why, ...how }, 'partition consumer restarted');
      } catch (err) {
        // Not consuming what we hold: let the leases hand it to someone who can (maybe us, later). A lease
        // that lapsed, or a partition given back, meanwhile (the restart stops trying then) is the expected
        // end, not an error.
        if (this.#leases?.keeps(p) === false) this.#log.info({ partition: p, why }, 'partition consumer not restarted: it was given back or lost meanwhile');
        else this.#log.error({ partition: p, err: errText(err) }, 'could not restart partition consumer; giving it up');
        await this.#opts.onPartitionReleased?.(p);
        this.#leases?.giveBack(p);
      }
    });
  }

  async #watchConsumer(run: PartitionRun, messages: ConsumerMessages): Promise<void> {
    try {
      for await (const s of messages.status()) {
        if (!run.active) break;
        if (s.type === 'exceeded_limits' || (s.type === 'debug' && s.code !== 408 && s.code !== 404)) {
          // A pull the server refused (409, other than for a deleted consumer): the client waits for missed
          // heartbeats before it pulls again.
          run.refusedPulls++;
          this.#log.warn({ partition: run.partition, event: s.type, code: s.code, description: s.description, refused: run.refusedPulls }, 'partition consumer: the server refused a pull');
          if (run.refusedPulls >= REFUSED_PULLS) {
            this.#log.warn({ partition: run.partition, refused: run.refusedPulls }, 'partition consumer refuses every pull: making it again');
            void this.#restart(run.partition, 'pulls refused');
            break;
          }
          continue;
        }
        if (s.type === 'consumer_deleted' || s.type === 'consumer_not_found') {
          this.#log.warn({ partition: run.partition, event: s.type }, 'partition consumer vanished');
          // Another node took the partition (then our lease is gone too) or someone deleted it.
          await this.#leases?.refresh();
          void this.#restart(run.partition, s.type);
          break;
        }
        if (s.type === 'heartbeats_missed') {
          // The client tells of missed heartbeats from the second on (then once a heartbeat interval while
          // nothing comes): nothing came from the consumer for two intervals, and the client pulls again.
          // The partition's turns waited that long. Said once per silence; the remake below ends a long one.
          if (s.count === 2) this.#log.warn({ partition: run.partition, silentForMs: s.count * HEARTBEAT_MS }, 'partition consumer silent; pulling again');
          else this.#log.debug({ partition: run.partition, count: s.count }, 'partition consumer still silent');
          if (s.count >= STALLED_HEARTBEATS) {
            this.#log.warn({ partition: run.partition, missed: s.count }, 'partition consumer silent: making it again');
            void this.#restart(run.partition, 'heartbeats missed');
            break;
          }
        }
      }
    } catch {
      // status iterator closed
    }
  }

  /** Pause on disconnect; on reconnect, check the leases and restart every partition (`#restart`). */
  #watchStatus(): void {
    const status = this.#nc.status() as AsyncIterable<Status> & { stop?: () => void };
    this.#status = status;
    void (async () => {
      for await (const s of status) {
        if (this.#stopping) break;
        if (s.type === 'disconnect') {
          // No more pulls until the leases are confirmed: a node cut off longer than the lease TTL must
          // not pull from the consumer its successor made.
          for (const run of this.#runs.values()) run.messages?.stop();
        } else if (s.type === 'reconnect') {
          await this.#leases?.refresh().catch(() => undefined);
          for (const p of [...this.#runs.keys()]) void this.#restart(p, 'reconnect').catch(() => undefined);
        }
      }
    })().catch(() => undefined);
  }

  /**
   * A partition consumer's pull waiting at its leader goes with that leader: when a cluster elects another
   * (a server restarted, upgraded or crashed, a stepdown), nothing tells the client, which pulls again only
   * after two missed heartbeats (about 2 s), and after a crash only once the consumer's info is answered
   * again. The server announces each election in the account, so the node pulls again when its consumer's
   * is announced: a stepdown, then a turn 500 ms later, 2.24 s before and 8 ms after (bench/cluster.ts,
   * summary.clusterTurnAfterLeaderChangeP50Us); after a kill -9 of the leader's server, about 10 ms after
   * the election is announced, where the partition waited 3-6 s more. The pull is the client's own after
   * missed heartbeats, less its check of the consumer's info (`resetPendingNoInfo`: the advisory says the
   * consumer has a leader). That method is not public API: test/cluster.nats.test.ts fails if a client
   * version drops it, and the heartbeats would still bring the partition back. Where the node's NATS user
   * may not subscribe to `$JS.EVENT.ADVISORY.>`, the server refuses this subscription (logged as a
   * transport error) and the heartbeats do it alone.
   */
  #watchLeaders(): void {
    const prefix = `${LEADER_ELECTED}.${INGRESS_STREAM}.`;
    this.#leaders = this.#nc.subscribe(`${prefix}*`, {
      callback: (err, m) => {
        if (err || this.#stopping) return;
        const p = partitionOfConsumer(m.subject.slice(prefix.length), this.partitions);
        const run = p === undefined ? undefined : this.#runs.get(p);
        if (!run?.active || !run.messages) return;
        let leader: string;
        try {
          leader = decode(LeaderElectedSchema, m.data, 'consumer leader advisory', ADVISORY_BYTES).leader;
        } catch (e) {
          this.#log.warn({ partition: run.partition, err: errText(e) }, 'ignored a consumer leader advisory that could not be read');
          return;
        }
        // The leader the run pulls from already (the election that made its consumer, announced late).
        if (leader === run.leader) return;
        run.leader = leader;
        // Not `resetPending`, which asks for the info first and does nothing while a reset of its own is
        // under way: after a crash, the client's reset begun when the heartbeats stopped was still waiting
        // for an info when the election was announced (a .tmp rig, kill -9 of the leader's server: the turn
        // 10-13 s after the kill, against 5-8 s now; test/cluster.nats.test.ts).
        const messages = run.messages as ConsumerMessages & { resetPendingNoInfo?: () => Promise<boolean> };
        if (typeof messages.resetPendingNoInfo !== 'function') return;
        this.#log.info({ partition: run.partition, leader }, 'partition consumer has a new leader; pulling again');
        messages.resetPendingNoInfo().catch(() => undefined);
      },
    });
  }

  // ---- messages -----------------------------------------------------------------------------------

  #onMessage(run: PartitionRun, m: JsMsg): void {
    if (!run.active) return; // the next consumer of the partition redelivers it
    run.refusedPulls = 0;
    const parsed = parseThreadIn(m.subject);
    const headers = jsHeadersOf(m);
    const messageId = headers[HEADERS.msgId] || undefined;
    if ('problem' in parsed) {
      this.#refuse(m, { subject: m.subject, error: new TroupeError('INVALID_MESSAGE', `refused a message on a malformed subject: ${parsed.problem}`) });
      return;
    }
    const { threadId, principal } = parsed;
    if (parsed.partition !== run.partition || partitionOf(threadId, this.partitions) !== run.partition) {
      // Published straight to a partition subject, or the server's mapping and this node disagree on the
      // partition count. Handling it here could let two nodes run one thread: refuse it instead.
      const expected = partitionOf(threadId, this.partitions);
      this.#log.error(
        { subject: m.subject, threadId, partition: run.partition, expected, partitions: this.partitions },
        'message in the wrong partition: check that the server maps to as many partitions as the nodes use (troupe up --partitions)',
      );
      this.#refuse(m, {
        subject: m.subject,
        principal,
        threadId,
        ...(messageId ? { messageId } : {}),
        error: new TroupeError('INVALID_MESSAGE', `message for thread ${threadId} arrived in partition ${run.partition}, not ${expected}; publish to the thread's subject, not a partition`),
      });
      return;
    }
    const prev = run.chains.get(threadId) ?? Promise.resolve();
    const next = prev
      .then(() => this.#process(run, m, threadId, principal, headers))
      .catch((err: unknown) => {
        // #process handles handler errors itself; this is a bug guard that keeps the chain alive.
        this.#log.error({ partition: run.partition, threadId, seq: m.seq, err: errText(err) }, 'processing a message failed');
      });
    run.chains.set(threadId, next);
    run.inflight.add(next);
    void next.then(() => {
      run.inflight.delete(next);
      if (run.chains.get(threadId) === next) run.chains.delete(threadId);
    });
  }

  /** Handles one message; never rejects. */
  async #process(run: PartitionRun, m: JsMsg, threadId: string, principal: string, headers: Record<string, string>): Promise<void> {
    if (!run.active) return;
    const seq = m.seq;
    const hold = run.held.get(threadId);
    if (hold) {
      const now = Date.now();
      const oldest = Math.min(...hold.back);
      if (now > hold.until + Math.max(5_000, this.#ackWaitMs)) {
        // Give up holding when what was sent back does not come back (e.g. someone terminated it).
        run.held.delete(threadId);
      } else if (seq > oldest) {
        // Behind a message sent back: come back after it. Sent back itself, it must not be overtaken either.
        hold.back.add(seq);
        this.#count(this.#parked, seq, (this.#parked.get(seq) ?? 0) + 1);
        m.nak(Math.max(0, hold.until - now) + 50);
        return;
      } else {
        hold.back.delete(seq);
        hold.until = Math.max(hold.until, now);
        if (hold.back.size === 0) run.held.delete(threadId);
      }
    }
    const info = m.info;
    // A fresh consumer counts from 1 again; our own count survives it (bounded map, oldest first out). Times
    // it was sent back untried behind a failed message of its thread are not attempts.
    const deliveryCount = Math.max(info.deliveryCount - (this.#parked.get(seq) ?? 0), (this.#attempts.get(seq) ?? 0) + 1);
    const msg: IngressMessage = {
      threadId,
      principal,
      partition: run.partition,
      messageId: headers[HEADERS.msgId] || undefined,
      data: m.data,
      headers,
      redelivered: info.redelivered || deliveryCount > 1,
      deliveryCount,
      ackedBefore: seq <= run.ackedThrough,
      seq,
      storedAt: Math.floor(info.timestampNanos / 1_000_000),
      subject: m.subject,
    };
    if (msg.redelivered || msg.ackedBefore) {
      this.#log.info({ partition: run.partition, seq, thread: threadId, message: msg.messageId, deliveryCount, ackedBefore: msg.ackedBefore }, 'a message delivered again');
    } else if (this.#log.isLevelEnabled('debug')) {
      this.#log.debug({ partition: run.partition, seq, thread: threadId, message: msg.messageId, storedAt: msg.storedAt }, 'a message delivered');
    }
    // A turn can outlast ack_wait (a slow model, a long tool): tell the server it is still in progress.
    const working = setInterval(() => {
      if (run.active) m.working();
    }, Math.max(1_000, Math.floor(this.#ackWaitMs / 3)));
    let afterAck: void | AfterAck | undefined;
    try {
      afterAck = await this.#opts.handler(msg, { signal: run.abort.signal });
    } catch (err) {
      // Awaited: the thread's next message waits until this one is sent back or dead-lettered.
      await this.#onHandlerError(run, m, msg, err);
      return;
    } finally {
      clearInterval(working);
    }
    this.#attempts.delete(seq);
    this.#parked.delete(seq);
    // Done: ack, then the after-ack step, told whether the message is known to be acknowledged. The
    // thread's next message waits for both (its chain includes this), so when a later message of a thread
    // has been accepted, every earlier one was settled: its answer published, or, ack unknown, left for
    // the delivery that comes again.
    // Not once the lease is lost: the partition's next owner makes a consumer of the same name, which
    // takes this ack as its own and drops the message it has delivered too; this node would publish an
    // answer while the next owner runs the turn again (a chaos run: the bucket leader's kill held this
    // node's commit 4.7 s, past its lease, and both answered). Unacknowledged, the message stays with the
    // next owner, which answers it from the stored state (or runs it, if this node's write never took).
    const acked = await this.#settleAck(run, m);
    if (typeof afterAck !== 'function') return;
    try {
      afterAck({ acked });
    } catch (err) {
      this.#log.error({ partition: run.partition, seq, err: errText(err) }, 'the after-ack step failed');
    }
  }

  /**
   * Acks a handled message and finds out whether the ack took: confirmed by the server (asked again a few
   * times while this node still consumes the partition: during an election the consumer's leader does not
   * answer for a while), else, while it still consumes the partition, whether the stream still holds the
   * message (gone: it was acknowledged). False when neither is known; the message then comes again if it
   * was not acknowledged.
   */
  async #settleAck(run: PartitionRun, m: JsMsg): Promise<boolean> {
    const seq = m.seq;
    let lastErr: unknown;
    if (run.lost) {
      this.#log.info({ partition: run.partition, seq }, 'lease lost while the message was handled: not acknowledged, the next owner answers it');
      return false;
    }
    // (JsMsg does not type the reply subject its implementation carries: the ack subject.)
    const ackSubject = (m as unknown as { reply?: unknown }).reply;
    try {
      // The ack and the server's confirmation of it as one request, as `JsMsg.ackAck` does, but through the
      // connection's `request`: on a transport's `jetstreamConnection` its multiplexer, which makes no Error
      // per answer (src/transport/request-mux.ts).
      if (typeof ackSubject === 'string') await this.#nc.request(ackSubject, JS_ACK, { timeout: ACK_CONFIRM_MS });
      else await m.ackAck({ timeout: ACK_CONFIRM_MS });
      return true;
    } catch (err) {
      lastErr = err;
    }
    // The same ack again, on the subject of this delivery, only while this run's consumer is the
    // partition's (a successor's consumer of the same name must not take an ack meant for this one).
    for (let attempt = 2; typeof ackSubject === 'string' && attempt <= ACK_ATTEMPTS && run.active && !this.#nc.isClosed(); attempt++) {
      await new Promise((r) => setTimeout(r, 500 * (attempt - 1)));
      if (!run.active) break;
      try {
        await this.#nc.request(ackSubject, JS_ACK, { timeout: ACK_CONFIRM_MS });
        return true;
      } catch (err) {
        lastErr = err;
      }
    }
    // Gone from the stream means acknowledged by this node's ack only while this run consumes the partition:
    // after it lost the partition, the next owner may have acked it (and published its answer).
    if (!run.active) {
      this.#log.info({ partition: run.partition, seq, err: errText(lastErr) }, 'ack not confirmed and the partition moved on: the message may come again');
      return false;
    }
    try {
      const stored = await this.#jsm!.streams.getMessage(INGRESS_STREAM, { seq });
      const gone = stored === null;
      this.#log.info({ partition: run.partition, seq, err: errText(lastErr), acked: gone }, gone ? 'ack not confirmed, but the stream no longer holds the message' : 'ack not confirmed and the stream still holds the message: it may come again');
      return gone;
    } catch (err) {
      this.#log.info({ partition: run.partition, seq, err: errText(lastErr), check: errText(err) }, 'ack not confirmed and the stream could not be asked: the message may come again');
      return false;
    }
  }

  #countAttempt(seq: number, count: number): void {
    this.#count(this.#attempts, seq, count);
  }

  /** Sets a per-sequence count (bounded map, oldest first out). */
  #count(counts: Map<number, number>, seq: number, count: number): void {
    counts.delete(seq);
    counts.set(seq, count);
    if (counts.size > ATTEMPTS_TRACKED) counts.delete(counts.keys().next().value as number);
  }

  /**
   * A message refused before any handler: tell the host (it answers the sender), dead-letter it, terminate
   * it once its copy is stored. When the copy is not stored, it is sent back and refused again later (the
   * sender is not told twice).
   */
  #refuse(m: JsMsg, refused: { subject: string; principal?: string; threadId?: string; messageId?: string; error: TroupeError }): void {
    this.#log.warn({ subject: refused.subject.slice(0, 200), code: refused.error.code }, refused.error.message);
    if (!this.#refusedTold.has(m.seq)) {
      try {
        this.#opts.onRefused?.(refused);
      } catch (err) {
        this.#log.error({ err: errText(err) }, 'onRefused failed');
      }
    }
    void this.#deadLetter(m, refused.error, m.info.deliveryCount).then((stored) => {
      if (stored) {
        this.#refusedTold.delete(m.seq);
        m.term();
        return;
      }
      this.#count(this.#refusedTold, m.seq, 1);
      m.nak(this.#retryMax);
    });
  }

  /**
   * Copies a message to the dead-letter stream with its error; never throws. Whether the stream stored it:
   * when not, the caller sends the message back for `#retryMax` (as the line logged here says) rather than
   * terminate it. The copy's de-duplication id is its inbound sequence: a copy stored after all by a
   * publish that timed out is not stored twice when the message is dead-lettered again.
   */
  async #deadLetter(m: JsMsg, error: TroupeError, attempts: number): Promise<boolean> {
    const parsed = parseThreadIn(m.subject);
    const h = jsHeaders();
    for (const [k, v] of Object.entries(jsHeadersOf(m))) h.set(k, v);
    h.set(DEAD_LETTER_HEADERS.code, error.code);
    h.set(DEAD_LETTER_HEADERS.message, error.message.replace(/[\r\n]+/g, ' ').slice(0, 1000));
    h.set(DEAD_LETTER_HEADERS.subject, m.subject.slice(0, 1000));
    h.set(DEAD_LETTER_HEADERS.seq, String(m.seq));
    h.set(DEAD_LETTER_HEADERS.attempts, String(attempts));
    // Not the message's own id (a client may send that id again later, another message to keep).
    h.set(HEADERS.msgId, `dlq/${m.seq}`);
    try {
      await this.#js!.publish(subjects.deadLetter(this.tenant, 'problem' in parsed ? '_invalid' : parsed.threadId), m.data, { headers: h, timeout: 5_000 });
      return true;
    } catch (err) {
      this.#log.error({ seq: m.seq, err: errText(err), retryInMs: this.#retryMax }, 'the message stays in the inbound stream and comes back');
      return false;
    }
  }

  async #onHandlerError(run: PartitionRun, m: JsMsg, msg: IngressMessage, err: unknown): Promise<void> {
    const fields = { partition: run.partition, threadId: msg.threadId, messageId: msg.messageId, seq: msg.seq, deliveryCount: msg.deliveryCount };
    if (run.lost) {
      // Neither term nor nak: the next owner's consumer (same name) would take them as its own.
      this.#log.debug({ ...fields, err: errText(err) }, 'handler failed after the partition was lost');
      return;
    }
    if (err instanceof TroupeError && isTerminal(err.code)) {
      this.#log.info({ ...fields, code: err.code }, 'message refused; terminating it');
      this.#attempts.delete(msg.seq);
      this.#parked.delete(msg.seq);
      m.term();
      return;
    }
    if (!run.active) {
      // Lost the partition under the handler: the next owner redelivers; nothing to report here.
      this.#log.debug({ ...fields, err: errText(err) }, 'handler failed after the partition was lost');
      return;
    }
    this.#countAttempt(msg.seq, msg.deliveryCount);
    if (msg.deliveryCount >= this.#maxDeliver) {
      const error = TroupeError.from(err, 'WORKFLOW_ERROR');
      this.#log.error({ ...fields, err: error.message }, `handler failed ${msg.deliveryCount} times; moving the message to ${DEAD_LETTER_STREAM}`);
      if (!(await this.#deadLetter(m, error, msg.deliveryCount))) {
        // Not terminated without its copy: it stays in the work queue, comes back, and when it fails
        // again is dead-lettered again.
        this.#retryLater(run, m, msg, this.#retryMax);
        return;
      }
      m.term();
      this.#attempts.delete(msg.seq);
      this.#parked.delete(msg.seq);
      try {
        this.#opts.onDeadLetter?.(msg, error);
      } catch (hookErr) {
        this.#log.error({ ...fields, err: errText(hookErr) }, 'onDeadLetter failed');
      }
      return;
    }
    const delay = Math.min(this.#retryMax, this.#retryBase * 2 ** Math.max(0, msg.deliveryCount - 1));
    this.#log.warn({ ...fields, err: errText(err), retryInMs: delay }, 'handler failed; will retry');
    this.#retryLater(run, m, msg, delay);
  }

  /** Sends a message back to come again after `delay`; its thread takes nothing newer until it is back. */
  #retryLater(run: PartitionRun, m: JsMsg, msg: IngressMessage, delay: number): void {
    m.nak(delay);
    // The thread takes nothing newer until this message is back (and anything sent back behind it).
    const hold = run.held.get(msg.threadId) ?? { back: new Set<number>(), until: 0 };
    hold.back.add(msg.seq);
    hold.until = Math.max(hold.until, Date.now() + delay);
    run.held.set(msg.threadId, hold);
  }
}


/**
 * Why a partition's consumer, as the server describes it in `info`, may not be consumed again as it is
 * instead of made afresh, given `mine`, what this node kept of the one it made last (`#made`). Kept when it
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

/** A consumer this node made is stored, but its replicas have not started it: asked again (`#freshConsumer`). */
class ConsumerNotStarted extends Error {}

/** A consumer nothing was delivered from (so nothing is pending) and no pull waits at. */
function untouched(info: ConsumerInfo): boolean {
  return info.delivered.consumer_seq === 0 && info.num_waiting === 0;
}

/** How a partition's consumption began: its consumer kept or made, and why one this node had made was not kept. */
interface ConsumerHow {
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

/** The floor a partition consumer carries over from the one it replaced (see `#freshConsumer`). */
function carriedFloor(description: string | undefined): number {
  if (!description?.startsWith(ACKED_THROUGH)) return 0;
  const n = Number(/^\d{1,16}/.exec(description.slice(ACKED_THROUGH.length))?.[0]);
  return Number.isSafeInteger(n) && n > 0 ? n : 0;
}

export function msToNanos(ms: number): number {
  return ms * 1_000_000;
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Resolves true when `p` settled within `ms`, false otherwise. */
async function withTimeout(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((res) => (timer = setTimeout(() => res(false), ms)));
  try {
    return await Promise.race([p.then(() => true as const, () => true as const), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
