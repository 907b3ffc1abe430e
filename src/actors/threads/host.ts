/**
 * Holds thread actors and binds the pure thread machine to the mesh: a user message in (`deliver`), its
 * answer out. The concerns live next door: `residency.ts` (which threads are live, dormant or stored only:
 * load, drop, passivate, wake, take over), `answers.ts` (each answer published once across nodes),
 * `status.ts` (what goes to the owner), `turns.ts` (metrics and traces of turns), `committer.ts`
 * (compare-and-set writes, one per turn), `agent-calls.ts` (the wire call to agents and the relay of
 * their chunks), `record.ts` (the stored form), `views.ts` (what ps and inspect show).
 *
 * Every thread has an owner (`<principal>` or `<principal>/<user>`, from the broker-checked subject the
 * first message came on); its events go to that principal only, and a message, a cancel or a read from
 * anyone else is answered exactly like one about a thread that does not exist.
 *
 * Idle threads are passivated (state committed, actor stopped) and rehydrated on their next message
 * (residency.ts). Nothing an actor does can take the process down: listener and actor failures are caught
 * there, logged with the thread, and the thread is dropped and reloaded from its stored state.
 */
import { fromPromise } from 'xstate';
import type { Logger } from 'pino';
import { agentCallMachine, type AgentRequestInput, type AgentRequestOutput } from '../../machines/agent-call.js';
import { routerMachine, type PolicyInput } from '../../machines/router.js';
import { orchestrationMachine } from '../../machines/orchestration.js';
import { DEFAULT_THREAD_CONFIG, threadMachine, taskStateOf, type SynthesisInput, type SynthesisOutput, type ThreadConfig } from '../../machines/thread.js';
import type { RouterPolicy } from '../../routing/policy.js';
import { TERMINAL_TASK_STATES, type Message, type Task, type TaskArtifactUpdateEvent, type TaskState } from '../../protocol/a2a.js';
import { TroupeError } from '../../protocol/errors.js';
import { META } from '../../protocol/metadata.js';
import type { ActorInfo } from '../../protocol/ctl.js';
import type { RouterDecision } from '../../protocol/routing.js';
import { MemoryThreadStore } from '../../store/memory.js';
import type { ThreadStore } from '../../store/types.js';
import type { Transport } from '../../transport/types.js';
import type { AfterAck } from '../../transport/jetstream/ingress.js';
import { silentLogger } from '../../observability/logger.js';
import type { SanitiserPolicy } from '../../sanitiser/sanitiser.js';
import type { Synthesizer } from '../../llm/synthesis.js';
import { InspectionPublisher, InspectionSwitch } from '../../inspection/inspection.js';
import type { Registry } from '../registry.js';
import { AgentCaller } from './agent-calls.js';
import { Answers, answerKey, type StoredCopy } from './answers.js';
import { Committer } from './committer.js';
import { historyHas } from './history-ids.js';
import { conversationFor } from '../../machines/thread/memory.js';
import { TAKEN_KEPT, atRest, inTurnOf, type LiveThread, type RecentEvent, type TurnWatch } from './live.js';
import { SpanKind, startSpan, tracing, withSpan, type Context, type Span } from '../../observability/tracing.js';
import { appendArtifact, ownerOfRecord, recordOf } from './record.js';
import { Residency } from './residency.js';
import { StatusPublisher } from './status.js';
import { firstTurn, hopSpan } from './turns.js';
import type { AnsweredLog } from '../../transport/jetstream/answered.js';
import { v7 as uuidv7 } from 'uuid';
import { DEFAULT_CHECKPOINTS_KEPT, type ForkReply } from '../../protocol/checkpoint.js';
import { MemoryCheckpointStore, type CheckpointStore, type StoredCheckpoint } from '../../store/checkpoints.js';
import { Checkpointer, forkRecord } from './checkpoints.js';

export type { StoredCopy } from './answers.js';
export interface ThreadHostOptions {
  transport: Transport;
  registry: Registry;
  tenant?: string;
  nodeId: string;
  store?: ThreadStore;
  config?: Partial<ThreadConfig>;
  policy?: RouterPolicy;
  logger?: Logger;
  /** Passivate threads idle this long (ms): nothing of them is kept in memory. 0 disables passivation. */
  idleMs?: number;
  /**
   * Stop the actor of a thread at rest this long (ms) and keep its committed record in memory, as its
   * JSON (a quarter of the live actor), until `idleMs`: its next message wakes it without a
   * store read. Not a thread someone inspects, nor one with a turn in progress. A thread in a handoff
   * stays dormant past `idleMs` and is woken at the handoff's deadline, which then fires as it would have
   * live. Default 30 s; 0 keeps actors until `idleMs` (and those in a handoff until their deadline).
   */
  dormantMs?: number;
  /**
   * Where checkpoints go (time travel). Default: in memory when the threads are (no `store`), else none. A
   * store keeping 0 turns them off.
   */
  checkpoints?: CheckpointStore;
  /** Publish inspection records from the start (without `inspection`). */
  inspect?: boolean;
  /** Context sanitiser for what agents pass each other (default policy when absent; false: off). */
  sanitiser?: SanitiserPolicy | false;
  /** Writes one answer from a fan-out's answers (teams with `aggregation: synthesis`); streamed to the owner. */
  synthesizer?: Synthesizer;
  /** The process's inspection publisher (the node's); default one of its own. */
  inspection?: InspectionPublisher;
  /**
   * Where final answers are marked as published, for the next owner of a thread to read
   * (transport/jetstream/answered.ts; durable nodes). Without it a redelivered latest message is settled
   * by asking the node that answered it.
   */
  answered?: AnsweredLog;
  /**
   * Whether another node is alive (durable nodes: its heartbeat in the lease bucket); undefined when that
   * cannot be told. With it, a redelivered latest message whose committer does not answer and whose marker
   * is not stored is published only once the committer is gone (see `publishedBefore`).
   */
  nodeAlive?: (nodeId: string) => Promise<boolean | undefined>;
  /**
   * The inbound stream's duplicate window (durable ingress): a second stored copy of a message under the
   * same Nats-Msg-Id within it is the stream's duplicate detection missing it (see `deliver`).
   */
  duplicateWindowMs?: number;
  now?: () => number;
}

export class ThreadHost {
  readonly tenant: string;
  readonly store: ThreadStore;
  /** The live threads (residency.ts loads and unloads them). */
  private readonly threads = new Map<string, LiveThread>();
  private readonly transport: Transport;
  private readonly registry: Registry;
  private readonly log: Logger;
  private readonly config: ThreadConfig;
  private readonly machine;
  private readonly now: () => number;
  private readonly committer: Committer;
  private readonly caller: AgentCaller;
  private readonly answers: Answers;
  private readonly status: StatusPublisher;
  private readonly residency: Residency;
  /** Checkpoints of threads (time travel); undefined when off. */
  readonly checkpoints?: Checkpointer;
  readonly inspection: InspectionPublisher;
  private unsubscribeRegistry?: () => void;

  constructor(private readonly opts: ThreadHostOptions) {
    this.tenant = opts.tenant ?? 'demo';
    this.transport = opts.transport;
    this.registry = opts.registry;
    this.store = opts.store ?? new MemoryThreadStore();
    this.log = (opts.logger ?? silentLogger()).child({ tenant: this.tenant, node: opts.nodeId });
    this.config = { ...DEFAULT_THREAD_CONFIG, ...opts.config, ...(opts.policy && opts.config?.usePolicy === undefined ? { usePolicy: true } : {}) };
    this.now = opts.now ?? Date.now;
    this.inspection =
      opts.inspection ?? new InspectionPublisher({ transport: opts.transport, process: opts.nodeId, switch: new InspectionSwitch(opts.inspect ?? false) });
    this.status = new StatusPublisher({
      tenant: this.tenant,
      transport: this.transport,
      log: this.log,
      now: this.now,
      schedule: (live) => this.committer.schedule(live),
      holdAnswerSpan: (event, span) => this.answers.holdSpan(event, span),
    });
    this.answers = new Answers({
      tenant: this.tenant,
      nodeId: opts.nodeId,
      transport: this.transport,
      log: this.log,
      now: this.now,
      answered: opts.answered,
      nodeAlive: opts.nodeAlive,
      duplicateWindowMs: opts.duplicateWindowMs,
      publishToOwner: (live, event, span) => this.status.publishToOwner(live, event, span),
    });
    const checkpoints = opts.checkpoints ?? (opts.store ? undefined : new MemoryCheckpointStore({ keep: this.config.checkpoints ?? DEFAULT_CHECKPOINTS_KEPT }));
    if (checkpoints && checkpoints.keep > 0) this.checkpoints = new Checkpointer({ tenant: this.tenant, store: checkpoints, log: this.log, now: this.now });
    this.committer = new Committer({
      tenant: this.tenant,
      nodeId: opts.nodeId,
      store: this.store,
      now: this.now,
      log: this.log,
      checkpoints: this.checkpoints !== undefined,
      committed: (live, finals, wrote, written) => {
        // The node the stored record names: the one to ask whether the thread's latest answer went out. A
        // commit with nothing new wrote nothing, and the record still names the node that answered.
        if (wrote) live.committedBy = opts.nodeId;
        this.answers.afterCommit(live, finals);
        if (written) this.checkpoints?.committed(live, written.record, written.revision);
      },
      shouldWrite: (live) => atRest(live.actor.getSnapshot()),
      drop: (live, error) => this.residency.drop(live, error),
    });
    this.caller = new AgentCaller({
      tenant: this.tenant,
      transport: this.transport,
      registry: this.registry,
      log: this.log,
      ...(opts.policy ? { policy: opts.policy } : {}),
      ...(opts.sanitiser !== undefined ? { sanitiser: opts.sanitiser } : {}),
      relayChunk: (threadId, event) => {
        const live = this.threads.get(threadId);
        if (!live) return;
        this.status.publishToOwner(live, event);
        // Kept with the Task; the turn's next write (its answer) commits it.
        live.artifacts = appendArtifact(live.artifacts, event);
        live.changed = true;
      },
      conversation: (threadId, agentId, message, maxMessages) => {
        const live = this.threads.get(threadId);
        return live ? conversationFor(live.actor.getSnapshot().context, agentId, message, maxMessages) : undefined;
      },
      inspected: (threadId) => this.inspection.switch.isOn(threadId),
      hopSpan: (threadId, hop, agentId) => this.hopSpan(threadId, hop, agentId),
      turnSpan: (threadId) => this.currentTurn(threadId)?.span,
    });
    // One engine for calling an agent: the thread's own calls and each call of a fan-out are the same
    // agentCall machine with the same wire request (a fan-out's calls carry `fanOut` for the sanitiser).
    const agentCall = agentCallMachine.provide({
      actors: {
        request: fromPromise<AgentRequestOutput, AgentRequestInput>(async ({ input }) => {
          const fanOut = input.fanOut === true;
          const threadId = input.message.taskId ?? '';
          try {
            const reply = await this.caller.call(input, { fanOut });
            // The thread's clock moves with the answers: a call of its own carries the answer's time in its
            // output; a fan-out's calls tick the orchestration's clock (its executionTimeMs counts up to the last).
            if (fanOut) this.tick(threadId);
            return { kind: 'troupe.timedReply', reply, at: this.now() };
          } catch (err) {
            // A failure moves the clock too, so a fan-out's executionTimeMs counts up to the last call that settled.
            this.tick(threadId);
            throw err;
          }
        }),
      },
    });
    this.machine = threadMachine.provide({
      actors: {
        agentCall,
        router: routerMachine.provide({
          actors: { policy: fromPromise<RouterDecision, PolicyInput>(({ input }) => this.caller.decide(input)) },
        }),
        orchestration: orchestrationMachine.provide({ actors: { agentCall } }),
        ...(opts.synthesizer ? { synthesize: this.synthesizeActor(opts.synthesizer) } : {}),
      },
    });
    this.residency = new Residency({
      tenant: this.tenant,
      nodeId: opts.nodeId,
      store: this.store,
      registry: this.registry,
      log: this.log,
      now: this.now,
      config: this.config,
      givens: { config: this.config, configJson: JSON.stringify(this.config), agents: () => this.registry.directory() },
      idleMs: opts.idleMs ?? 5 * 60_000,
      dormantMs: opts.dormantMs ?? 30_000,
      machine: this.machine,
      inspection: this.inspection,
      committer: this.committer,
      threads: this.threads,
      publishStatus: (live, event) => this.status.publishStatus(live, event),
      publishToOwner: (live, event) => this.status.publishToOwner(live, event),
    });
  }

  /** The synthesis child: the model's deltas go to the thread's owner as chunks of the answer to come. */
  private synthesizeActor(synthesizer: Synthesizer) {
    return fromPromise<SynthesisOutput, SynthesisInput>(async ({ input, signal }) => {
      const started = this.now();
      const stream = (text: string) => {
        const live = this.threads.get(input.threadId);
        if (!live || text.length === 0) return;
        const contextId = live.actor.getSnapshot().context.contextId;
        const event: TaskArtifactUpdateEvent = {
          kind: 'artifact-update',
          taskId: input.threadId,
          contextId,
          artifact: { artifactId: `${input.messageId}:synthesis`, parts: [{ kind: 'text', text }], metadata: { [META.agent]: 'troupe' } },
          append: true,
          lastChunk: false,
        };
        this.status.publishToOwner(live, event);
        live.artifacts = appendArtifact(live.artifacts, event);
        live.changed = true;
      };
      try {
        const text = await synthesizer(input, stream, signal);
        this.log.debug({ thread: input.threadId, agents: input.answers.map((a) => a.agentId), ms: this.now() - started }, 'synthesised a fan-out');
        return { text };
      } catch (err) {
        this.log.warn({ thread: input.threadId, err: (err as Error).message }, 'synthesis failed; the attributed join stands');
        throw err;
      }
    });
  }

  start(): this {
    // Other nodes ask here whether this process published an answer (see `deliver`).
    this.answers.start();
    // Only a turn in progress (or an open handoff or an approval waited on, whose deadline can start one) routes with the catalog;
    // an idle thread gets it with its next message (deliver), so an agent joining does not rewrite every
    // live thread's record.
    this.unsubscribeRegistry = this.registry.onChange(() => {
      const agents = this.registry.directory();
      for (const t of this.threads.values()) {
        const snap = t.actor.getSnapshot();
        if (snap.status === 'active' && (taskStateOf(snap.value) === 'working' || snap.context.handoff || snap.context.approval))
          t.actor.send({ type: 'troupe.agents', agents });
      }
    });
    this.residency.start();
    return this;
  }

  async stop(): Promise<void> {
    this.residency.stopHousekeeping();
    this.unsubscribeRegistry?.();
    this.answers.stop();
    await this.residency.unloadAll();
    this.committer.stop();
    this.caller.stop();
  }

  /**
   * Hands a user message to its thread (created or rehydrated). With `until: 'answered'` (durable
   * ingress; `seq` is its inbound stream sequence) it resolves once the message's turn is answered and
   * committed — the caller acks then, so a crash mid-turn replays the message on the next owner; with
   * `until: 'accepted'` (the default) once the thread has it.
   *
   * With `until: 'answered'`, the answer is not published by the time it resolves: the result's `publish`
   * does that, and the ingress calls it once the ack is settled, saying whether it is known to have taken.
   * Known: the answer goes out. Not known (the consumer's leader was being elected): it does not, as the
   * message comes again if the ack did not take, and that delivery publishes the stored answer. A crash
   * after the ack and before the publish leaves the answer in the store only (clients find it there, as
   * TroupeClient does); a crash before the ack replays the message, and the next owner publishes the
   * stored answer. Either way no answer goes out twice.
   *
   * A message the thread already has: while its turn is still running here (a redelivery after a lost
   * consumer, or a thread this node resumed after a takeover), it waits for the same answer and
   * publishes it after its own ack; once answered, it gets the stored answer again unless this process
   * published that answer itself or the thread has accepted a later message since (a client sending
   * again, or the next owner after a crash before the ack, do get it).
   */
  async deliver(
    threadId: string,
    message: Message,
    owner: string,
    opts: { seq?: number; until?: 'accepted' | 'answered'; trace?: Context; ackedBefore?: boolean; resend?: boolean; stored?: StoredCopy } = {},
  ): Promise<{ duplicate: boolean; publish?: AfterAck }> {
    if (message.role !== 'user') throw new TroupeError('INVALID_MESSAGE', `messages into a thread must have role "user", not "${message.role}"`);
    // A new task of a context whose last task ended names that task (the gateway does): it continues its conversation.
    const continues = message.referenceTaskIds?.at(-1);
    const live = await this.residency.obtain(threadId, { create: { owner, contextId: message.contextId, ...(continues ? { continues } : {}) } });
    const snap = live.actor.getSnapshot();
    this.residency.checkOwner(snap.context.owner, owner, threadId);
    const key = answerKey(threadId, message.messageId);
    const ctx = snap.context;
    const inTurn = inTurnOf(ctx, message.messageId);
    const inHistory = historyHas(live, ctx.history, message.messageId);
    // Whether the thread has taken this message: in its turn, queue or history, or answered by this process.
    const has =
      inTurn || inHistory || live.waiters.some((w) => w.messageId === message.messageId) || this.answers.isPublished(key) || this.answers.isPending(key);
    // A client's second copy of a message it got no answer for (HEADERS.resend), or a second stored copy
    // the stream's duplicate detection missed (`secondCopy`): the thread has the first one (its answer is
    // on its way or stored, where the client looks), so the copy is only acknowledged. A thread that never
    // had it (the stream lost the first copy) takes it below like any new message.
    if (has && (opts.resend || this.answers.secondCopy(live, message.messageId, opts.seq, opts.stored))) return { duplicate: true };
    const behind = opts.seq !== undefined && live.inboundSeq !== undefined && opts.seq <= live.inboundSeq;
    if (snap.status === 'done' || TERMINAL_TASK_STATES.includes(taskStateOf(snap.value))) {
      // Another delivery of a message the thread answered as it ended (a cancel answers every message it
      // had taken): its final event is the answer, not THREAD_CLOSED as well.
      if (behind && opts.until === 'answered' && this.answers.answerComing(live, message.messageId)) {
        const events = await this.answers.waitFor(live, message.messageId);
        return { duplicate: true, publish: this.answers.publishOnce(live, message.messageId, events) };
      }
      if (behind && (this.answers.isPublished(key) || this.answers.isPending(key))) return { duplicate: true };
      throw new TroupeError('THREAD_CLOSED', `thread ${threadId} is ${taskStateOf(snap.value)}; start a new thread`);
    }
    // At or below the last stream sequence the thread took: another delivery of a message it has — if it
    // knows the message (in its turn, queue or history, or answered by this process). One it does not know
    // it never took (it was sent back to the stream and came back behind newer ones): taken now, late
    // rather than never — nothing a thread accepted ends without its final event.
    const redelivery = behind && has;
    if (behind && !redelivery)
      this.log.warn({ thread: threadId, seq: opts.seq, last: live.inboundSeq }, 'a message behind the last one the thread took, never taken: taking it now');
    if (redelivery || inTurn || inHistory) {
      if (
        opts.until === 'answered' &&
        (inTurn || live.waiters.some((w) => w.messageId === message.messageId) || this.answers.answerComing(live, message.messageId))
      ) {
        // Its turn is still running here (the first delivery lost its consumer, or this node resumed the
        // thread after a takeover), or its answer waits for its commit: wait for the same answer and
        // publish it after this ack.
        const events = await this.answers.waitFor(live, message.messageId);
        // A redelivery of the same stream message shares the first delivery's answer; a client sending the
        // message again is owed an answer of its own.
        return {
          duplicate: true,
          publish: redelivery
            ? this.answers.publishOnce(live, message.messageId, events)
            : ({ acked }) => (acked ? this.answers.publishAnswered(live, events, { remember: false }) : undefined),
        };
      }
      // A redelivery needs nothing when its answer was given: by this process (published, or waiting for
      // its delivery's ack to go out), by the node this one told it had not published it, before a later
      // message of the thread was accepted (the ingress hands a thread's next message over only after the
      // previous one's ack settled and its answer went out — or, its ack unknown, was left to the delivery
      // that comes again, which this is not: a later message came first), or on a delivery the partition's
      // previous consumer acknowledged (the answer goes out only once an ack is known to have taken). So a
      // message the stream gives again after its ack (a replicated work-queue stream can keep acknowledged
      // messages when its consumer is remade during an election) is not answered twice. A client sending
      // it again, or the next owner after a crash before the ack, gets the stored answer; the client's copy
      // does not count as the original's answer: that one still goes out after its own ack.
      const settled = redelivery && (opts.seq! < live.inboundSeq! || opts.ackedBefore === true);
      if (!redelivery) this.answers.answerDuplicate(live, message.messageId, { remember: false });
      else if (!settled && !this.answers.isPublished(key) && !this.answers.isPending(key) && !this.answers.isDisclaimed(key)) {
        // The thread's latest message, answered by another node (its state is what that node committed):
        // its ack may have been confirmed and then lost with a consumer's leader, so the stream gives the
        // message again. The thread's last published-answer marker says whether the answer went out
        // (whoever published it, alive or not); without one, only the node that committed knows: ask it.
        // No answer (it died, maybe between its commit and its ack) means it may never have gone out: publish it.
        const before = await this.answers.publishedBefore(live, message.messageId);
        // Asked meanwhile by the partition's next owner, this process said it had not published: that node
        // publishes it. Publishing here too would send the answer twice (the committer deciding on its own
        // redelivery while the marker stream elects a leader).
        if (!before && !this.answers.isDisclaimed(key) && !this.answers.isPublished(key)) this.answers.answerDuplicate(live, message.messageId);
      }
      return { duplicate: true };
    }
    live.lastActive = this.now();
    if (opts.stored && opts.seq !== undefined) {
      live.taken ??= [];
      live.taken.push({ messageId: message.messageId, seq: opts.seq, at: opts.stored.at, id: opts.stored.id });
      if (live.taken.length > TAKEN_KEPT) live.taken.shift();
    }
    const answered = opts.until === 'answered' ? this.answers.waitFor(live, message.messageId) : undefined;
    if (opts.seq !== undefined) live.inboundSeq = Math.max(live.inboundSeq ?? 0, opts.seq);
    // The registry's directory is one object until an agent joins or leaves: the thread has it already.
    const agents = this.registry.directory();
    if (live.actor.getSnapshot().context.agents !== agents) live.actor.send({ type: 'troupe.agents', agents });
    const watch: TurnWatch = { startedAt: this.now(), stepAt: this.now() };
    live.turns.set(message.messageId, watch);
    if (tracing.on) {
      watch.span = startSpan('troupe.turn', {
        ...(opts.trace ? { parent: opts.trace } : {}),
        kind: SpanKind.SERVER,
        attributes: { 'troupe.thread': threadId, 'troupe.tenant': this.tenant, 'troupe.message': message.messageId, 'troupe.node': this.opts.nodeId },
      });
      // The turn's work started from here (agent calls, their replies, log lines) runs in its context.
      withSpan(watch.span, () => live.actor.send({ type: 'troupe.user.message', message, now: this.now() }));
    } else {
      live.actor.send({ type: 'troupe.user.message', message, now: this.now() });
    }
    if (!answered) return { duplicate: false };
    const events = await answered;
    return { duplicate: false, publish: this.answers.publishOnce(live, message.messageId, events) };
  }

  /** Cancels a thread; with an `owner`, only that owner's (anyone else gets THREAD_NOT_FOUND). */
  async cancel(threadId: string, reason?: string, owner?: string): Promise<TaskState> {
    const live = await this.residency.obtain(threadId);
    if (owner !== undefined) this.residency.checkOwner(live.actor.getSnapshot().context.owner, owner, threadId);
    const state = taskStateOf(live.actor.getSnapshot().value);
    if (TERMINAL_TASK_STATES.includes(state)) throw new TroupeError('THREAD_CLOSED', `thread ${threadId} is already ${state}`);
    live.actor.send({ type: 'troupe.cancel', ...(reason ? { reason } : {}), now: this.now() });
    await this.committer.flush(live);
    return taskStateOf(live.actor.getSnapshot().value);
  }

  /** A thread's Task (live: as it is now; else as stored); with an `owner`, only that owner's. */
  async task(threadId: string, owner?: string): Promise<{ task: Task; revision: number }> {
    const live = this.threads.get(threadId);
    if (live && !live.stopped) {
      if (owner !== undefined && live.actor.getSnapshot().context.owner !== owner) throw this.residency.notFound(threadId);
      return { task: recordOf(live, { tenant: this.tenant, node: this.opts.nodeId, now: this.now() }).task, revision: live.revision ?? 0 };
    }
    const stored = await this.store.get(this.tenant, threadId);
    if (!stored || (owner !== undefined && ownerOfRecord(stored.record) !== owner)) throw this.residency.notFound(threadId);
    return { task: stored.record.task, revision: stored.revision };
  }

  /** Live and passivated counts, and one ActorInfo per live thread and its children. */
  list(): { actors: ActorInfo[]; passivated: number } {
    return this.residency.list();
  }

  /**
   * State, context (redacted) and recent events of a live thread, or of a child `<threadId>/<childId>`; of a
   * dormant thread, state and context from the record it keeps, and the log it kept.
   */
  inspect(actorId: string): { actor: ActorInfo; value: unknown; context: unknown; events: RecentEvent[] } | undefined {
    return this.residency.inspect(actorId);
  }

  liveCount(): number {
    return this.threads.size;
  }

  /** Threads this host passivated (and has not rehydrated since), dormant ones included. */
  passivatedCount(): number {
    return this.residency.passivatedCount();
  }

  /** Passivated threads whose records this host keeps in memory (`dormantMs`). */
  dormantCount(): number {
    return this.residency.dormantCount();
  }

  isLive(threadId: string): boolean {
    return this.threads.has(threadId);
  }

  /** Makes every thread at rest dormant now, as `dormantMs` does in its time; how many are dormant after. */
  sleepThreads(): Promise<number> {
    return this.residency.sleepThreads();
  }

  /**
   * After taking over threads (a partition of them), loads the ones that need an actor now: a turn in
   * progress (its agent call re-runs with the same idempotency key and finishes the turn) or an open
   * handoff (its deadline must keep running). `over()` ends the pass early (the node stops, or no longer
   * holds the partitions): the rest of the listing is not read.
   */
  resumeThreads(belongs: (threadId: string) => boolean, over: () => boolean = () => false): Promise<{ resumed: string[]; listed: number }> {
    return this.residency.resumeThreads(belongs, over);
  }

  /** Commits and stops the live threads that another node now owns, and forgets the dormant ones. */
  releaseThreads(belongs: (threadId: string) => boolean): Promise<void> {
    return this.residency.releaseThreads(belongs);
  }

  /** Drops the live actor (if any) and reloads the thread from the store. */
  rehydrate(threadId: string): Promise<TaskState> {
    return this.residency.rehydrate(threadId);
  }

  /**
   * Erases a thread (an operator's `troupe delete`): its actor stopped, nothing of it kept in memory, its
   * record deleted from the store. Refused while a turn is in flight (THREAD_BUSY: cancel it, or wait for its
   * answer); a thread that is nowhere is THREAD_NOT_FOUND. A message arriving meanwhile waits, then starts a
   * new thread of the same id.
   */
  async erase(threadId: string): Promise<void> {
    try {
      await this.residency.erase(threadId);
    } catch (err) {
      // A thread whose record expired may still have checkpoints: they go too.
      if (err instanceof TroupeError && err.code === 'THREAD_NOT_FOUND') await this.eraseCheckpoints(threadId);
      throw err;
    }
    await this.eraseCheckpoints(threadId);
  }

  private async eraseCheckpoints(threadId: string): Promise<void> {
    if (!this.checkpoints) return;
    await this.checkpoints.settled(threadId);
    await this.checkpoints.store.erase(this.tenant, threadId);
  }

  /** A thread's checkpoints, oldest first; with an `owner`, only that owner's thread. */
  async history(threadId: string, owner?: string): Promise<{ keep: number; checkpoints: StoredCheckpoint[] }> {
    if (!this.checkpoints) {
      // Off: the thread is still told apart from one that does not exist.
      await this.task(threadId, owner);
      return { keep: 0, checkpoints: [] };
    }
    await this.checkpoints.settled(threadId);
    return {
      keep: this.checkpoints.store.keep,
      checkpoints: await this.checkpoints.list(threadId, { threads: this.store, ...(owner !== undefined ? { owner } : {}) }),
    };
  }

  /** One checkpoint; CHECKPOINT_NOT_FOUND when the thread does not keep it. */
  async checkpoint(threadId: string, n: number, owner?: string): Promise<StoredCheckpoint> {
    if (!this.checkpoints) {
      await this.task(threadId, owner);
      throw new TroupeError('CHECKPOINT_NOT_FOUND', `thread ${threadId} has no checkpoints: they are off on this mesh (checkpoints: 0)`);
    }
    await this.checkpoints.settled(threadId);
    return this.checkpoints.get(threadId, n, { threads: this.store, ...(owner !== undefined ? { owner } : {}) });
  }

  /**
   * A new thread (a new A2A context) whose state is checkpoint `n` of `threadId`, written to the store: its
   * first message loads it on whichever node owns it. Its owner is the source's. With an `owner`, only that
   * owner's thread forks. A `newThreadId` in use is refused (INVALID_MESSAGE).
   */
  async fork(threadId: string, n: number, opts: { owner?: string; newThreadId?: string } = {}): Promise<ForkReply> {
    const source = await this.checkpoint(threadId, n, opts.owner);
    const { record, reply } = forkRecord(source, {
      threadId: opts.newThreadId ?? `t-${uuidv7()}`,
      now: this.now(),
      node: this.opts.nodeId,
      machine: this.machine,
      config: this.config,
    });
    try {
      await this.store.create(record);
    } catch (err) {
      if (err instanceof TroupeError && err.code === 'STORE_CONFLICT')
        throw new TroupeError('INVALID_MESSAGE', `thread ${record.threadId} exists already: fork into a new id`, { threadId: record.threadId });
      throw err;
    }
    this.log.info({ thread: reply.threadId, from: threadId, checkpoint: n }, 'thread forked');
    return reply;
  }

  /** Passivates one thread by id, dormant or live, keeping nothing of it; false when neither is here. */
  passivateThread(threadId: string): Promise<boolean> {
    return this.residency.passivateThread(threadId);
  }

  /** Waits until the thread's latest state is committed; throws when the commit failed. */
  async flushCommits(threadId: string): Promise<void> {
    const live = this.threads.get(threadId);
    if (live) await this.committer.flush(live);
  }

  /** Moves a thread's clock to now (its fan-out's and handoff's with it). */
  private tick(threadId: string): void {
    this.threads.get(threadId)?.actor.send({ type: 'troupe.tick', now: this.now() });
  }

  private currentTurn(threadId: string): TurnWatch | undefined {
    const live = this.threads.get(threadId);
    return live ? firstTurn(live) : undefined;
  }

  /** The span of hop `hop` of the thread's running turn (made on its first call; earlier hops end then). */
  private hopSpan(threadId: string, hop: number, agentId: string): Span | undefined {
    return hopSpan(this.currentTurn(threadId), threadId, hop, agentId);
  }
}
