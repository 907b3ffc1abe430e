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
 * (`notIdleOwn` in partition-consumers.ts).
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
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import type { NatsConnection, Status, Subscription as NatsSubscription } from '@nats-io/transport-node';
import { parseThreadIn, subjects } from '../subjects.js';
import { HEADERS } from '../../protocol/headers.js';
import { isTerminal, TroupeError } from '../../protocol/errors.js';
import { DEFAULT_LEASE_TTL_MS, DEFAULT_PARTITIONS, PartitionLeases, type LeaseLossReason } from './leases.js';
import { silentLogger, type Logger } from '../../observability/logger.js';
import { checkReplicas } from './replicas.js';
import { jsHeadersOf } from '../nats-headers.js';
import { isCreateOrBindTransient, retrySetup, retryTransient } from './retry.js';
import { settleAck } from './ack-confirm.js';
import { HEARTBEAT_MS, watchConsumer, watchLeaders } from './consumer-watch.js';
import { deadLetter, type DeadLetterContext } from './dead-lettering.js';
import { ensureDeadLetterStream, ensureIngressStream, type IngressStreamOptions } from './ingress-streams.js';
import {
  DEAD_LETTER_STREAM,
  INGRESS_STREAM,
  errText,
  withTimeout,
  type AfterAck,
  type IngressMessage,
  type JetStreamIngressOptions,
  type PartitionRun,
} from './ingress-types.js';
import { FRESH_CONSUMER_ATTEMPTS, OWN_INFO_TIMEOUT_MS, PartitionConsumers } from './partition-consumers.js';
import { consumerName, partitionOf } from './partition-map.js';

export {
  DEAD_LETTER_HEADERS,
  DEAD_LETTER_STREAM,
  INGRESS_DUPLICATE_WINDOW_MS,
  INGRESS_STREAM,
  msToNanos,
  type AfterAck,
  type IngressHandler,
  type IngressMessage,
  type JetStreamIngressOptions,
} from './ingress-types.js';
export { partitionOf } from './partition-map.js';

const ATTEMPTS_TRACKED = 10_000;
/** How long one pull request lasts. */
const PULL_EXPIRES_MS = 5_000;

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
  /** The partition consumers this node made or keeps (partition-consumers.ts). */
  readonly #consumers: PartitionConsumers;
  readonly #ackWaitMs: number;
  readonly #maxAckPending: number;
  readonly #maxDeliver: number;
  readonly #retryBase: number;
  readonly #retryMax: number;
  readonly #releaseTimeoutMs: number;
  #jsm?: JetStreamManager;
  /** Asks a consumer's info with a short timeout (see `PartitionConsumers.fresh`). */
  #ownInfoJsm?: JetStreamManager;
  #js?: JetStreamClient;
  #leases?: PartitionLeases;
  #status?: AsyncIterable<Status> & { stop?: () => void };
  /** JetStream's advisories of a new leader for a partition consumer (consumer-watch.ts `watchLeaders`). */
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
    this.#consumers = new PartitionConsumers({
      tenant: this.tenant,
      nodeId: this.nodeId,
      nc: this.#nc,
      jsm: () => this.#jsm!,
      ownInfoJsm: () => this.#ownInfoJsm!,
      ackWaitMs: this.#ackWaitMs,
      maxAckPending: this.#maxAckPending,
      // Not while the partition is being given back: its release waits behind this (the per-partition
      // order of the lease's callbacks), and the next owner with it.
      keepTrying: (p) => !this.#stopping && this.#leases?.keeps(p) === true,
      log: this.#log,
    });
  }

  /** Subjects the stream captures: every partition of every thread of the tenant. */
  get streamSubject(): string {
    return subjects.threadInStream(this.tenant);
  }

  /** Partitions this node is consuming right now, ascending. */
  owned(): number[] {
    return [...this.#runs.values()]
      .filter((r) => r.active && r.messages)
      .map((r) => r.partition)
      .sort((a, b) => a - b);
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
      const info = await jsm.consumers.info(INGRESS_STREAM, consumerName(p)).catch(() => undefined);
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
        await ensureIngressStream(jsm, this.#streamOptions());
        await ensureDeadLetterStream(jsm, this.#streamOptions());
        return jsm;
      },
      // The step makes the streams when they are missing: "stream not found" is the cluster recovering.
      { log: this.#opts.logger, deadlineMs: this.#opts.setupDeadlineMs, transient: isCreateOrBindTransient },
    );
    this.#js = jetstream(this.#nc);
    this.#ownInfoJsm = await jetstreamManager(this.#nc, { timeout: OWN_INFO_TIMEOUT_MS, checkAPI: false });
    this.#watchStatus();
    this.#leaders = watchLeaders(this.#nc, { partitions: this.partitions, runOf: (p) => this.#runs.get(p), stopping: () => this.#stopping, log: this.#log });
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
  #streamOptions(): IngressStreamOptions {
    return { tenant: this.tenant, streamSubject: this.streamSubject, maxAgeMs: this.#opts.maxAgeMs, replicas: this.#opts.replicas, log: this.#log };
  }

  #deadLetterContext(): DeadLetterContext {
    return { js: this.#js!, tenant: this.tenant, log: this.#log, retryMax: this.#retryMax };
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
      const { ackedThrough, how } = await this.#consumers.fresh(p, { keepOwn: true });
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
      // meta leader answers its info "JetStream system temporarily unavailable" (for seconds on a loaded
      // machine). Giving the partition back on that answer would make the next owner delete and make the
      // consumer again, and so on, leaving the partition unconsumed for minutes. Wait for the leader
      // instead, for as long as this node holds the partition.
      const consumer = await retryTransient(() => this.#js!.consumers.get(INGRESS_STREAM, consumerName(p)), {
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
      void watchConsumer(run, messages, {
        log: this.#log,
        restart: (p, why) => this.#restart(p, why),
        refreshLeases: async () => void (await this.#leases?.refresh()),
      });
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
      if (!(await withTimeout(messages.closed(), 2_000))) this.#consumers.unclean(run.partition);
    }
    if (graceMs > 0 && run.inflight.size > 0) await withTimeout(Promise.allSettled([...run.inflight]), graceMs);
    run.abort.abort(new TroupeError('TRANSPORT_ERROR', `partition ${run.partition} is no longer owned by ${this.nodeId}`));
    while (run.inflight.size > 0) {
      // Handlers ignoring the signal still get time; one that never settles is logged, not awaited forever.
      const settled = await withTimeout(Promise.allSettled([...run.inflight]), Math.max(this.#releaseTimeoutMs, 1_000));
      if (!settled) {
        this.#log.error({ partition: run.partition, pending: run.inflight.size }, 'handlers did not finish after abort; giving up on them');
        this.#consumers.unclean(run.partition);
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
        const { ackedThrough, how } = await this.#consumers.fresh(p, { keepOwn: why === 'reconnect' });
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
        error: new TroupeError(
          'INVALID_MESSAGE',
          `message for thread ${threadId} arrived in partition ${run.partition}, not ${expected}; publish to the thread's subject, not a partition`,
        ),
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
      this.#log.info(
        { partition: run.partition, seq, thread: threadId, message: msg.messageId, deliveryCount, ackedBefore: msg.ackedBefore },
        'a message delivered again',
      );
    } else if (this.#log.isLevelEnabled('debug')) {
      this.#log.debug({ partition: run.partition, seq, thread: threadId, message: msg.messageId, storedAt: msg.storedAt }, 'a message delivered');
    }
    // A turn can outlast ack_wait (a slow model, a long tool): tell the server it is still in progress.
    const working = setInterval(
      () => {
        if (run.active) m.working();
      },
      Math.max(1_000, Math.floor(this.#ackWaitMs / 3)),
    );
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
    // answer while the next owner runs the turn again (a kill of the bucket's leader can hold this node's
    // commit past its lease, and both would answer). Unacknowledged, the message stays with the
    // next owner, which answers it from the stored state (or runs it, if this node's write never took).
    const acked = await settleAck(run, m, { nc: this.#nc, jsm: this.#jsm!, log: this.#log });
    if (typeof afterAck !== 'function') return;
    try {
      afterAck({ acked });
    } catch (err) {
      this.#log.error({ partition: run.partition, seq, err: errText(err) }, 'the after-ack step failed');
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
    void deadLetter(m, refused.error, m.info.deliveryCount, this.#deadLetterContext()).then((stored) => {
      if (stored) {
        this.#refusedTold.delete(m.seq);
        m.term();
        return;
      }
      this.#count(this.#refusedTold, m.seq, 1);
      m.nak(this.#retryMax);
    });
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
      if (!(await deadLetter(m, error, msg.deliveryCount, this.#deadLetterContext()))) {
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
