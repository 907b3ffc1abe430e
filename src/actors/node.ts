/**
 * A Troupe node: the registry, the thread host (router and thread actors) and the control plane on one
 * transport. One process or twenty run the same code; nodes find each other only through subjects.
 *
 * Edges, each validated here before anything else sees it:
 * - `in.<P>.<T>` (durable: the TROUPE_IN stream; else a queue subscription): a user message of
 *   principal P into thread T. The owner of a thread is P, or `P/<user>` when P names a user in the
 *   `Troupe-User` header (the gateway serves many users on one principal). Only a gateway principal
 *   (protocol/ids.ts `isGatewayPrincipal`) may name a user; any other gets USER_FORBIDDEN.
 * - `req.<P>.<verb>`: P's owner-checked requests about its threads (task, list, cancel, history, checkpoint, fork).
 * - `ctl.<verb>`: operator requests (ps, inspect, threads, thread, rehydrate, cancel, delete, memory, dlq,
 *   history, checkpoint, fork).
 * The handlers of `req` and `ctl` are in control.ts; this file wires them, and takes user messages in.
 * Every bad input gets a typed error on the requester's reply or on its `out` subject; none can end the
 * process.
 */
import type { Logger } from 'pino';
import { v7 as uuidv7 } from 'uuid';
import type { NatsConnection } from '@nats-io/transport-node';
import type { ThreadConfig } from '../machines/thread.js';
import type { RouterPolicy } from '../routing/policy.js';
import {
  HEADERS,
  LIMITS,
  MessageSchema,
  isTerminal,
  TroupeError,
  decode,
  encodeJson,
  isGatewayPrincipal,
  isValidId,
  rejectionEvent,
  type ActorInfo,
  type PsReply,
  type ThreadAck,
} from '../protocol/index.js';
import type { ThreadStore } from '../store/types.js';
import type { CheckpointStore } from '../store/checkpoints.js';
import type { SanitiserPolicy } from '../sanitiser/sanitiser.js';
import type { Synthesizer } from '../llm/synthesis.js';
import { parseThreadIn, rejectionOutOf, subjects } from '../transport/subjects.js';
import type { InboundMessage, Subscription, Transport } from '../transport/types.js';
import { JetStreamAnsweredLog } from '../transport/jetstream/answered.js';
import { INGRESS_DUPLICATE_WINDOW_MS, JetStreamIngress, partitionOf, type AfterAck, type IngressMessage } from '../transport/jetstream/ingress.js';
import { retryTransient } from '../transport/jetstream/retry.js';
import { checkPartitionMapping } from '../transport/jetstream/partition-check.js';
import { silentLogger } from '../observability/logger.js';
import { InspectionPublisher, InspectionSwitch } from '../inspection/inspection.js';
import { answerInspectionControl, helloInspection } from '../inspection/control.js';
import { registerNodeGauges } from '../observability/metrics.js';
import type { CheckResult } from '../observability/probes.js';
import { contextFromHeaders, tracing } from '../observability/tracing.js';
import { Registry } from './registry.js';
import { ThreadHost } from './threads/host.js';
import { ControlHandlers } from './control.js';

export interface NodeOptions {
  transport: Transport;
  tenant?: string;
  nodeId?: string;
  store?: ThreadStore;
  /** Where thread checkpoints go (ThreadHostOptions.checkpoints). */
  checkpoints?: CheckpointStore;
  config?: Partial<ThreadConfig>;
  policy?: RouterPolicy;
  logger?: Logger;
  idleMs?: number;
  /** Stop the actors of threads at rest this long and keep their records in memory (ThreadHostOptions.dormantMs). */
  dormantMs?: number;
  inspect?: boolean;
  /** Context sanitiser for what agents pass each other (default policy when absent; false: off). */
  sanitiser?: SanitiserPolicy | false;
  /** Writes one answer from a fan-out's answers (teams with `aggregation: synthesis`). */
  synthesizer?: Synthesizer;
  maxPayload?: number;
  /**
   * Who may name a user in the `Troupe-User` header: `gateways` (default) only gateway principals, whose
   * subjects the broker reserves to the gateway role's credentials; `any` every principal, for an
   * in-process mesh, where no broker tells principals apart and every one of them is this process.
   */
  userAssertion?: 'gateways' | 'any';
  /**
   * Durable inbound messages: a JetStream stream partitioned by thread (the server's mapping), one owner
   * per partition through leases. Without it, `in` is a plain queue-group subscription (embedded mode).
   */
  durable?: {
    nc: NatsConnection;
    partitions?: number;
    leaseTtlMs?: number;
    /** Replicas of TROUPE_IN, TROUPE_DLQ and the lease bucket (see JetStreamIngressOptions). */
    replicas?: number;
    /** Check `partitions` against the server's mapping before taking any partition (default true). */
    checkPartitions?: boolean;
    /** How long each setup step (streams, lease bucket) keeps asking a cluster that does not answer yet; default 60 s. */
    setupDeadlineMs?: number;
  };
}

export class TroupeNode {
  readonly nodeId: string;
  readonly tenant: string;
  readonly registry: Registry;
  readonly threads: ThreadHost;
  /** Inspection records of every actor this node runs (off unless `inspect`, or switched by ctl.inspection). */
  readonly inspection: InspectionPublisher;
  private readonly transport: Transport;
  private readonly log: Logger;
  private readonly maxMessageBytes: number;
  private subs: Subscription[] = [];
  private readonly startedAt = Date.now();
  /** The answers to `req.*` and `ctl.*` requests (control.ts). */
  private readonly control: ControlHandlers;
  private ingress?: JetStreamIngress;
  private readonly answered?: JetStreamAnsweredLog;
  private readonly partitions: number;
  /** Partitions acquired in the last few ms, resumed together; and the resume passes still running. */
  private resumeBatch?: Set<number>;
  private readonly resuming = new Set<Promise<void>>();
  private stopping = false;
  private unregisterGauges?: () => void;

  constructor(private readonly opts: NodeOptions) {
    this.transport = opts.transport;
    this.tenant = opts.tenant ?? 'demo';
    this.nodeId = opts.nodeId ?? `node-${uuidv7().slice(-12)}`;
    this.log = (opts.logger ?? silentLogger()).child({ tenant: this.tenant, node: this.nodeId });
    this.maxMessageBytes = Math.min(opts.maxPayload ?? LIMITS.userMessageBytes, LIMITS.userMessageBytes);
    this.partitions = opts.durable?.partitions ?? 8;
    this.inspection = new InspectionPublisher({ transport: this.transport, process: this.nodeId, switch: new InspectionSwitch(opts.inspect ?? false) });
    this.registry = new Registry(this.transport, this.tenant, { logger: opts.logger ?? silentLogger() });
    // Durable nodes mark each final answer as published, for a thread's next owner (issue 14). The marker
    // follows the answer on one connection when `durable.nc` is the transport's (as `troupe up` makes it).
    if (opts.durable) {
      this.answered = new JetStreamAnsweredLog({
        nc: opts.durable.nc,
        tenant: this.tenant,
        ...(opts.durable.replicas ? { replicas: opts.durable.replicas } : {}),
        setupDeadlineMs: opts.durable.setupDeadlineMs,
        ...(opts.logger ? { logger: opts.logger } : {}),
      });
    }
    this.threads = new ThreadHost({
      transport: this.transport,
      registry: this.registry,
      tenant: this.tenant,
      nodeId: this.nodeId,
      ...(opts.store ? { store: opts.store } : {}),
      ...(opts.checkpoints ? { checkpoints: opts.checkpoints } : {}),
      ...(opts.config ? { config: opts.config } : {}),
      ...(opts.policy ? { policy: opts.policy } : {}),
      ...(opts.idleMs !== undefined ? { idleMs: opts.idleMs } : {}),
      ...(opts.dormantMs !== undefined ? { dormantMs: opts.dormantMs } : {}),
      ...(opts.sanitiser !== undefined ? { sanitiser: opts.sanitiser } : {}),
      ...(opts.synthesizer ? { synthesizer: opts.synthesizer } : {}),
      inspection: this.inspection,
      ...(this.answered ? { answered: this.answered, duplicateWindowMs: INGRESS_DUPLICATE_WINDOW_MS } : {}),
      // Other nodes' heartbeats, once the ingress holds the lease bucket.
      ...(opts.durable ? { nodeAlive: (id: string) => this.ingress?.leases?.nodeAlive(id) ?? Promise.resolve(undefined) } : {}),
      logger: opts.logger ?? silentLogger(),
    });
    this.control = new ControlHandlers({
      tenant: this.tenant,
      nodeId: this.nodeId,
      threads: this.threads,
      registry: this.registry,
      log: this.log,
      ps: () => this.ps(),
      ownsThread: (threadId) => this.ownsThread(threadId),
      ownerOf: (principal, headers) => this.ownerOf(principal, headers),
      maxPayload: () => opts.maxPayload ?? this.transport.maxPayload ?? LIMITS.payloadBytes,
    });
  }

  async start(): Promise<this> {
    // A node with another partition count than the server's mapping would refuse every message.
    if (this.opts.durable && this.opts.durable.checkPartitions !== false) await checkPartitionMapping(this.opts.durable.nc, this.tenant, this.partitions);
    this.threads.start();
    await this.registry.start();
    const t = this.transport;
    const durable = this.opts.durable;
    if (durable) {
      await this.answered?.start();
      this.ingress = new JetStreamIngress({
        nc: durable.nc,
        tenant: this.tenant,
        nodeId: this.nodeId,
        partitions: this.partitions,
        ...(durable.leaseTtlMs ? { leaseTtlMs: durable.leaseTtlMs } : {}),
        ...(durable.replicas ? { replicas: durable.replicas } : {}),
        setupDeadlineMs: durable.setupDeadlineMs,
        handler: (m) => this.onDurableIn(m),
        onPartitionAcquired: (p) => this.resumePartition(p),
        onPartitionReleased: (p) => this.threads.releaseThreads((id) => partitionOf(id, this.partitions) === p),
        onRefused: (m) => {
          if (m.principal && m.threadId) this.publishRejection(m.principal, m.threadId, bareMessageId(m.threadId, m.messageId), m.error);
          else this.publishMalformedRejection(m.subject, m.error);
        },
        onDeadLetter: (m, error) =>
          this.publishRejection(
            m.principal,
            m.threadId,
            bareMessageId(m.threadId, m.messageId),
            new TroupeError(
              'WORKFLOW_ERROR',
              `your message could not be handled after ${m.deliveryCount} attempts and was set aside (${error.code}: ${error.message})`,
              { deadLettered: true },
            ),
          ),
        ...(this.opts.logger ? { logger: this.opts.logger } : {}),
      });
      await this.ingress.start();
    } else {
      // One node in-process: a queue group delivers each message once.
      this.subs.push(t.subscribe(subjects.threadInAll(this.tenant), (m) => this.onThreadIn(m), { queue: 'troupe-threads' }));
    }
    // Reads come from the store: any node may answer. Changes go to the node that owns the thread.
    this.subs.push(t.subscribe(subjects.clientRequestAll(this.tenant, 'task'), (m) => this.control.onClientRequest(m, 'task'), { queue: 'troupe-req' }));
    this.subs.push(t.subscribe(subjects.clientRequestAll(this.tenant, 'list'), (m) => void this.control.onClientList(m), { queue: 'troupe-req' }));
    this.subs.push(
      t.subscribe(subjects.clientRequestAll(this.tenant, 'cancel'), (m) => this.control.onClientRequest(m, 'cancel'), durable ? {} : { queue: 'troupe-req' }),
    );
    // Checkpoints are read from their store and a fork is a new record: any node may answer.
    for (const verb of ['history', 'checkpoint', 'fork'] as const) {
      this.subs.push(t.subscribe(subjects.clientRequestAll(this.tenant, verb), (m) => void this.control.onClientCheckpoint(m, verb), { queue: 'troupe-req' }));
      this.subs.push(t.subscribe(subjects.ctl(this.tenant, verb), (m) => void this.control.onCheckpointCtl(m, verb), { queue: 'troupe-ctl' }));
    }
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'ps'), (m) => this.control.onPs(m)));
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'inspect'), (m) => this.control.onInspect(m)));
    // Only the owner of a thread acts on it, so these reach every node and the owner answers.
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'cancel'), (m) => this.control.onThreadCtl(m, 'cancel'), durable ? {} : { queue: 'troupe-ctl' }));
    this.subs.push(
      t.subscribe(subjects.ctl(this.tenant, 'rehydrate'), (m) => this.control.onThreadCtl(m, 'rehydrate'), durable ? {} : { queue: 'troupe-ctl' }),
    );
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'delete'), (m) => void this.control.onDelete(m, durable?.nc), durable ? {} : { queue: 'troupe-ctl' }));
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'threads'), (m) => this.control.onThreads(m), { queue: 'troupe-ctl' }));
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'thread'), (m) => this.control.onThread(m), { queue: 'troupe-ctl' }));
    if (durable) this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'dlq'), (m) => this.control.onDeadLetters(m, durable.nc), { queue: 'troupe-ctl' }));
    this.subs.push(t.subscribe(subjects.ctl(this.tenant, 'memory'), (m) => this.control.onMemory(m)));
    this.subs.push(
      t.subscribe(subjects.ctl(this.tenant, 'inspection'), (m) =>
        answerInspectionControl(m, { publisher: this.inspection, transport: t, tenant: this.tenant, node: this.nodeId }),
      ),
    );
    if (this.inspection.switch.all) helloInspection(t, this.tenant, true);
    await t.flush();
    this.unregisterGauges = registerNodeGauges({
      liveThreads: () => this.threads.liveCount(),
      passivatedThreads: () => this.threads.passivatedCount(),
      dormantThreads: () => this.threads.dormantCount(),
      partitionsOwned: () => this.ingress?.owned().length,
      inboundPending: async () => this.ingress?.pending(),
    });
    this.log.info({ transport: t.name }, 'node started');
    return this;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.unregisterGauges?.();
    await this.ingress?.stop();
    await Promise.all(this.resuming);
    await Promise.all(this.subs.map((s) => s.drain().catch(() => undefined)));
    this.subs = [];
    await this.threads.stop();
    await this.registry.stop();
    this.log.info('node stopped');
  }

  /**
   * The node's readiness check (`troupe up --metrics-port`: GET /readyz): with durable ingress, whether the
   * leases bucket answers its surveys (three lease ttls without one: it cannot take or keep partitions).
   */
  partitionsCheck(): CheckResult {
    const leases = this.ingress?.leases;
    if (!leases) return { ok: true, detail: 'no durable ingress: every message goes to this node' };
    const owns = `owns ${leases.owned().length} of ${this.partitions} partitions`;
    const since = Date.now() - leases.surveyedAt;
    if (leases.surveyedAt > 0 && since <= 3 * leases.ttlMs) return { ok: true, detail: owns };
    return {
      ok: false,
      detail: `${leases.surveyedAt > 0 ? `the leases bucket has not answered for ${Math.round(since / 1000)} s` : 'the leases bucket has not answered yet'}: this node can neither take nor keep partitions (${owns})`,
    };
  }

  /** Every actor this node holds, and the agents its registry sees (for `troupe ps`). */
  ps(): PsReply {
    const { actors, passivated } = this.threads.list();
    const node: ActorInfo = {
      kind: 'node',
      id: this.nodeId,
      state: 'running',
      node: this.nodeId,
      status: 'live',
      detail: {
        liveThreads: this.threads.liveCount(),
        passivatedThreads: passivated,
        dormantThreads: this.threads.dormantCount(),
        uptimeS: Math.round((Date.now() - this.startedAt) / 1000),
        rssBytes: process.memoryUsage.rss(),
        heapUsedBytes: process.memoryUsage().heapUsed,
        ...(this.ingress ? { partitions: this.ingress.owned(), partitionCount: this.partitions } : {}),
      },
    };
    const registry: ActorInfo = {
      kind: 'registry',
      id: `${this.nodeId}/registry`,
      state: `${this.registry.agents().length} agents`,
      node: this.nodeId,
      status: 'live',
      detail: {
        agents: this.registry.agents().map((a) => `${a.id}×${this.registry.instanceCount(a.id)}`),
        instances: this.registry.agents().flatMap((a) => this.registry.statuses(a.id).map((i) => [a.id, i.instanceId])),
        refused: this.registry.refusedCount,
      },
    };
    return { node: this.nodeId, actors: [node, registry, ...actors], passivated };
  }

  /**
   * Threads of a partition just taken over that need an actor now (a turn in progress, an open handoff).
   * Partitions taken together share one pass over the store: a takeover of many partitions lists the
   * threads once, not once per partition.
   */
  /**
   * A partition this node now consumes: its threads that go on without a message (an open handoff and its
   * deadline, an answer committed but not yet published, a turn stored mid-way) are loaded again. In the
   * background: the partition is consumed at once. Finding those threads means listing the tenant's
   * records, which takes seconds on a busy cluster (the listing makes a consumer on the bucket, and
   * reads every record of the partitions); a takeover that waited for it would hold every message of its
   * partitions meanwhile. No message needs it: a delivered message loads its own thread, and one thread's loads
   * are shared (ThreadHost.obtain), so the pass and the messages meet in the same live thread.
   */
  private resumePartition(p: number): void {
    if (this.resumeBatch) {
      this.resumeBatch.add(p);
      return;
    }
    const partitions = new Set([p]);
    this.resumeBatch = partitions;
    // Not a partition being given back: its threads are the next owner's to resume.
    const holds = (q: number) => this.ingress?.leases?.keeps(q) === true;
    const owns = (threadId: string) => {
      const q = partitionOf(threadId, this.partitions);
      return !this.stopping && partitions.has(q) && holds(q);
    };
    // A takeover acquires its partitions within a few ms of each other: 25 ms gathers them into one pass.
    const pass = new Promise<void>((resolve) => setTimeout(resolve, 25))
      .then(async () => {
        this.resumeBatch = undefined;
        // Listing the store makes a consumer: on a cluster electing its JetStream meta leader that times
        // out, or finds no responder ("jetstream is not enabled"), for a few seconds. JetStream answered
        // this node a moment ago (it holds the leases), so whatever fails is asked again, for as long as
        // the node holds one of the partitions.
        const started = Date.now();
        const over = () => this.stopping || ![...partitions].some(holds);
        const { resumed, listed } = await retryTransient(() => this.threads.resumeThreads(owns, over), {
          transient: () => true,
          keepTrying: () => !over(),
          onRetry: (attempt, err) => this.log.info({ attempt, err: (err as Error).message }, 'could not list the threads to resume yet; trying again'),
        });
        // A partition given away while its pass ran: its threads belong to the next owner.
        for (const threadId of resumed) if (!owns(threadId)) await this.threads.passivateThread(threadId).catch(() => undefined);
        this.log.info({ partitions: [...partitions].sort((a, b) => a - b), listed, resumed: resumed.length, ms: Date.now() - started }, 'resume pass done');
      })
      .catch((err: unknown) => {
        if (!this.stopping)
          this.log.warn(
            { err: (err as Error).message, partitions: [...partitions] },
            'could not resume the threads of taken partitions; each resumes with its next message',
          );
      })
      .finally(() => this.resuming.delete(pass));
    this.resuming.add(pass);
  }

  /** Whether this node owns the thread now (always, without durable ingress). */
  ownsThread(threadId: string): boolean {
    return !this.ingress || this.ingress.owned().includes(partitionOf(threadId, this.partitions));
  }

  // ---- user messages ---------------------------------------------------------------------------------

  /** The owner a message speaks for: its principal, and the user the principal names (if a valid one). */
  private ownerOf(principal: string, headers: Record<string, string>): string | TroupeError {
    const user = headers[HEADERS.user];
    if (user === undefined) return principal;
    if (!isValidId('user', user)) return new TroupeError('INVALID_MESSAGE', `header ${HEADERS.user} is not a valid user id`);
    // Identity comes from the subject the broker let this principal publish on, never from the payload.
    if ((this.opts.userAssertion ?? 'gateways') === 'gateways' && !isGatewayPrincipal(principal)) {
      return new TroupeError('USER_FORBIDDEN', `principal "${principal}" is not a gateway: it may not name a user in header ${HEADERS.user}`);
    }
    return `${principal}/${user}`;
  }

  /**
   * A message from the durable stream: resolves once its turn is answered and the thread state that
   * includes the answer is committed (then the ingress acks it: one write per turn). A message that can never be accepted is refused on the sender's `out`
   * subject and thrown as a client error, so it is not redelivered.
   */
  private async onDurableIn(msg: IngressMessage): Promise<AfterAck | undefined> {
    const { threadId, principal } = msg;
    let messageId = bareMessageId(threadId, msg.messageId);
    try {
      const owner = this.ownerOf(principal, msg.headers);
      if (owner instanceof TroupeError) throw owner;
      // Headers against their caps before any work: the record keeps the Nats-Msg-Id, and one over its cap
      // would be refused only at the commit, after the agent ran.
      if (msg.messageId !== undefined && msg.messageId.length > LIMITS.msgIdChars) {
        throw new TroupeError('INVALID_MESSAGE', `header Nats-Msg-Id is ${msg.messageId.length} characters; the limit is ${LIMITS.msgIdChars}`);
      }
      const message = decode(MessageSchema, msg.data, `message into thread ${threadId}`, this.maxMessageBytes);
      messageId = message.messageId;
      // Acked once the turn is answered and committed (a crash mid-turn replays the message elsewhere);
      // the answer is published once the ack is known to have taken (a crash in between never sends it
      // twice; an ack whose fate is unknown leaves it to the delivery that comes again).
      const { publish } = await this.threads.deliver(threadId, message, owner, {
        seq: msg.seq,
        until: 'answered',
        ackedBefore: msg.ackedBefore,
        resend: msg.headers[HEADERS.resend] !== undefined,
        ...(msg.messageId ? { stored: { at: msg.storedAt, id: msg.messageId } } : {}),
        ...(tracing.on ? { trace: contextFromHeaders(msg.headers) } : {}),
      });
      return publish;
    } catch (err) {
      const error = TroupeError.from(err, 'INVALID_MESSAGE');
      if (isTerminal(error.code)) {
        this.publishRejection(principal, threadId, messageId, error);
        this.log.warn({ thread: threadId, code: error.code, redelivered: msg.redelivered }, error.message);
        // Terminal for this message: the ingress terminates it instead of redelivering.
        throw error;
      }
      this.log.warn({ thread: threadId, code: error.code, redelivered: msg.redelivered }, error.message);
      throw error;
    }
  }

  /** Tells the sender on its `out` subject for the thread that its message was refused (final for that message). */
  private publishRejection(principal: string, threadId: string, messageId: string | undefined, error: TroupeError): void {
    if (!isValidId('principal', principal) || !isValidId('thread', threadId)) return;
    const event = rejectionEvent({ taskId: threadId, contextId: threadId, messageId: isValidId('message', messageId) ? messageId : undefined, error });
    try {
      this.transport.publish(subjects.threadOut(this.tenant, principal, threadId), encodeJson(event));
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'could not publish a rejection');
    }
  }

  /**
   * A message whose subject tokens break the id rule (`in.<P>.a=b`) has no thread to answer on: the refusal
   * goes to `out.<P>.<token>` as the subject spells it, where a sender of that thread listens.
   */
  private publishMalformedRejection(inbound: string, error: TroupeError): void {
    const out = rejectionOutOf(this.tenant, inbound);
    if (!out) {
      this.log.warn({ subject: inbound.slice(0, 200) }, 'refused a message whose sender cannot be answered (its subject has no literal thread token)');
      return;
    }
    const event = rejectionEvent({ taskId: out.threadToken, contextId: out.threadToken, error });
    try {
      this.transport.publish(out.subject, encodeJson(event));
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'could not publish a rejection');
    }
  }

  /** Without durable ingress: a request on `in.<P>.<T>`, answered with an ack or a typed error. */
  private async onThreadIn(msg: InboundMessage): Promise<void> {
    const parsed = parseThreadIn(msg.subject);
    if ('problem' in parsed) {
      const error = new TroupeError('INVALID_MESSAGE', `refused a message on a malformed subject: ${parsed.problem}`);
      if (!msg.respond(encodeJson(error.toReply()))) this.publishMalformedRejection(msg.subject, error);
      return;
    }
    const { threadId, principal } = parsed;
    try {
      const owner = this.ownerOf(principal, msg.headers);
      if (owner instanceof TroupeError) throw owner;
      const message = decode(MessageSchema, msg.data, `message into thread ${threadId}`, this.maxMessageBytes);
      const { duplicate } = await this.threads.deliver(threadId, message, owner, {
        resend: msg.headers[HEADERS.resend] !== undefined,
        ...(tracing.on ? { trace: contextFromHeaders(msg.headers) } : {}),
      });
      const ack: ThreadAck = { kind: 'ack', threadId, messageId: message.messageId, ...(duplicate ? { duplicate } : {}) };
      msg.respond(encodeJson(ack));
    } catch (err) {
      const error = TroupeError.from(err, 'INVALID_MESSAGE');
      this.log.warn({ thread: threadId, code: error.code }, error.message);
      // A plain publish has nobody to answer; say it on the sender's output so it is not lost.
      if (!msg.respond(encodeJson(error.toReply()))) this.publishRejection(principal, threadId, undefined, error);
    }
  }
}

/**
 * The client's messageId out of a de-duplication id `<owner>/<threadId>/<messageId>` (or a bare
 * `<threadId>/<messageId>`), for a refusal sent before the body is read.
 */
function bareMessageId(threadId: string, scoped: string | undefined): string | undefined {
  if (!scoped) return undefined;
  if (scoped.startsWith(`${threadId}/`)) return scoped.slice(threadId.length + 1);
  const at = scoped.indexOf(`/${threadId}/`);
  return at >= 0 ? scoped.slice(at + threadId.length + 2) : scoped;
}
