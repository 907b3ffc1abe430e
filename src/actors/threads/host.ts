/**
 * Holds thread actors (in a Map, not as children of one parent: XState copies the children map on every
 * spawn) and binds the pure thread machine to the mesh. The concerns live next door: `committer.ts`
 * (compare-and-set writes, one per turn), `agent-calls.ts` (the wire call to agents and the relay of
 * their chunks), `record.ts` (the stored form), `views.ts` (what ps and inspect show).
 *
 * Every thread has an owner (`<principal>` or `<principal>/<user>`, from the broker-checked subject the
 * first message came on); its events go to that principal only, and a message, a cancel or a read from
 * anyone else is answered exactly like one about a thread that does not exist.
 *
 * Idle threads are passivated (state committed, actor stopped) and rehydrated on their next message:
 * after `dormantMs` at rest a thread's actor is stopped and its committed record kept in memory as JSON
 * (woken without a store read), after `idleMs` that goes too (rehydrated from the store). A thread in a
 * handoff is never passivated: dormant, it is woken at the handoff's deadline.
 * Nothing an actor does can take the process down: listener and actor failures are caught here, logged
 * with the thread, and the thread is dropped and reloaded from its stored state.
 */
import { createActor, fromPromise, type AnyActorRef, type InspectionEvent } from 'xstate';
import type { Logger } from 'pino';
import { agentCallMachine, type AgentRequestInput, type AgentRequestOutput } from '../../machines/agent-call.js';
import { routerMachine, type PolicyInput } from '../../machines/router.js';
import { orchestrationMachine } from '../../machines/orchestration.js';
import { DEFAULT_THREAD_CONFIG, threadMachine, taskStateOf, type SynthesisInput, type SynthesisOutput, type ThreadConfig, type ThreadStatusEmitted } from '../../machines/thread.js';
import type { RouterPolicy } from '../../routing/policy.js';
import { TERMINAL_TASK_STATES, type Message, type Task, type TaskArtifactUpdateEvent, type TaskState, type TaskStatusUpdateEvent } from '../../protocol/a2a.js';
import { TroupeError } from '../../protocol/errors.js';
import { META, answerIn, rejectionEvent } from '../../protocol/metadata.js';
import type { ActorInfo } from '../../protocol/ctl.js';
import type { RouterDecision } from '../../protocol/routing.js';
import { decode, encodeJson } from '../../protocol/codec.js';
import { AnsweredAskSchema, AnsweredReplySchema } from '../../protocol/ctl.js';
import { MemoryThreadStore } from '../../store/memory.js';
import type { ThreadStore } from '../../store/types.js';
import { subjects } from '../../transport/subjects.js';
import type { InboundMessage, Subscription, Transport } from '../../transport/types.js';
import { isValidId } from '../../protocol/ids.js';
import type { AfterAck } from '../../transport/jetstream/ingress.js';
import { silentLogger } from '../../observability/logger.js';
import type { SanitiserPolicy } from '../../sanitiser/sanitiser.js';
import type { Synthesizer } from '../../llm/synthesis.js';
import { InspectionPublisher, InspectionSwitch } from '../../inspection/inspection.js';
import type { Registry } from '../registry.js';
import { AgentCaller } from './agent-calls.js';
import { Committer } from './committer.js';
import { historyHas } from './history-ids.js';
import { conversationFor } from '../../machines/thread/memory.js';
import { packEvents, unpackEvents } from './event-log.js';
import type { DormantThread, LiveThread, RecentEvent, ThreadActor, TurnWatch } from './live.js';
import { metrics, outcomeLabel } from '../../observability/metrics.js';
import { SpanKind, injectTraceparent, markError, startSpan, traceIdOf, tracing, withSpan, type Context, type Span } from '../../observability/tracing.js';
import { appendArtifact, dormantJson, fromDormant, fullSnapshot, handoffDeadlineOf, ownerOfRecord, recordOf, wakeFromDormant, type NodeGivens } from './record.js';
import { actorsOf, inspectDormant, inspectThread } from './views.js';
import type { AnsweredLog } from '../../transport/jetstream/answered.js';

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

const EVENT_LOG_LIMIT = 25;
/** Answers a host remembers having published (oldest forgotten first). */
const PUBLISHED_ANSWERS_KEPT = 100_000;
const answerKey = (threadId: string, messageId: string) => `${threadId}/${messageId}`;
/** Adds `key` to a set of answers kept, forgetting the oldest past PUBLISHED_ANSWERS_KEPT. */
function remember(set: Set<string>, key: string): void {
  set.add(key);
  if (set.size > PUBLISHED_ANSWERS_KEPT) set.delete(set.values().next().value as string);
}
/** A stream copy of a message: when it was stored and its Nats-Msg-Id. */
/** What a thread is created from when a message starts it: its owner and context, and the task it continues. */
interface ThreadCreation {
  owner: string;
  contextId?: string | undefined;
  /** An ended task of the same owner and context whose conversation the new thread starts with. */
  continues?: string;
}

export interface StoredCopy {
  at: number;
  id: string;
}
/** Stream copies remembered per thread (`LiveThread.taken`, kept in its record). */
const TAKEN_KEPT = 8;
/** How long a node waits for another to say whether it published an answer. */
const ANSWERED_ASK_MS = 2_000;
const ANSWERED_ASK_ATTEMPTS = 3;
/** How long a node keeps asking when neither the marker stream nor the committer can tell whether a redelivered latest message was answered. */
const ANSWER_UNKNOWN_WAIT_MS = 30_000;
/** How long a node asked that question waits for an answer of its own still waiting for its ack. */
const ANSWERED_WAIT_MS = 1_500;
/**
 * A thread at rest this long gives back the JSON of its history and route log kept for its next write
 * (`LiveThread.encoded`): a thread that talks without pause writes its record without encoding them again,
 * one that waits for a person holds only its objects (at the history limit the JSON is about 15 KB).
 */
const KEEP_ENCODED_MS = 10_000;

/** The message is the thread's current turn or waits in its queue. */
function inTurnOf(ctx: { turn?: { userMessageId: string } | undefined; pending: readonly Message[] }, messageId: string): boolean {
  return ctx.turn?.userMessageId === messageId || ctx.pending.some((m) => m.messageId === messageId);
}

/** A thread in the middle of a turn (its task state `working`). */
function isWorking(value: unknown): boolean {
  return taskStateOf(value) === 'working';
}

/** No turn in progress: the thread waits for the user (or has ended). */
function resting(live: LiveThread): boolean {
  return !isWorking(live.actor.getSnapshot().value);
}

/**
 * A handoff is open. Such a thread is never passivated: its deadline must fire on time, so it stays here,
 * live or dormant (and then woken at that time, `handoffDeadlineOf` its record).
 */
function inHandoff(live: LiveThread): boolean {
  return live.actor.getSnapshot().context.handoff !== undefined;
}

/** The longest a Node timer waits; a later deadline wakes the thread early and it goes dormant again. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Between turns (waiting for the user) or ended: a state worth a write. Not `submitted`: no turn yet. */
function atRest(snapshot: { status: string; value: unknown }): boolean {
  if (snapshot.status !== 'active') return true;
  const state = taskStateOf(snapshot.value);
  return state !== 'working' && state !== 'submitted';
}

/** The principal of an owner `<principal>[/<user>]`: whose `out` subject the thread's events go to. */
export function principalOf(owner: string): string {
  const slash = owner.indexOf('/');
  return slash < 0 ? owner : owner.slice(0, slash);
}

export class ThreadHost {
  readonly tenant: string;
  readonly store: ThreadStore;
  private readonly threads = new Map<string, LiveThread>();
  /** Threads whose actors were stopped at rest, as their committed records (`dormantMs`). */
  private readonly dormant = new Map<string, DormantThread>();
  /** The timers that wake dormant threads in a handoff at its deadline (see `inHandoff`). */
  private readonly wakes = new Map<string, NodeJS.Timeout>();
  private readonly loading = new Map<string, Promise<LiveThread>>();
  /** Threads being erased (`erase`): a message for one waits until it is gone, then starts a new thread. */
  private readonly erasing = new Map<string, Promise<void>>();
  private readonly transport: Transport;
  private readonly registry: Registry;
  private readonly log: Logger;
  private readonly config: ThreadConfig;
  /** What this node gives back to a dormant thread it wakes (record.ts, `wakeFromDormant`). */
  private readonly givens: NodeGivens;
  private readonly machine;
  private readonly idleMs: number;
  private readonly dormantMs: number;
  private readonly now: () => number;
  private readonly committer: Committer;
  private readonly caller: AgentCaller;
  readonly inspection: InspectionPublisher;
  private passivator?: NodeJS.Timeout;
  private unsubscribeRegistry?: () => void;
  private answeredSub?: Subscription;
  private passivatedTotal = 0;
  /**
   * The answers this process published (`<thread>/<message>`, the newest kept). It outlives passivations
   * and releases (a NATS outage longer than the lease ttl releases and reloads threads), so a redelivery
   * after those is not answered twice; another process (after a crash) starts without it and answers.
   */
  private readonly publishedAnswers = new Set<string>();
  /**
   * The final events this process published (by identity: every delivery waiting for one turn holds the
   * same event objects), so two deliveries of one message publish its answer once, while another message
   * that reuses the messageId, answered by a turn of its own, still gets its own.
   */
  private readonly publishedEvents = new WeakSet<TaskStatusUpdateEvent>();
  /** Answers handed to a delivery's after-ack step and not yet published (count of deliveries holding one). */
  private readonly pendingAnswers = new Map<string, number>();
  /**
   * Answers this process told another node it had not published (see `onAnsweredAsk`): that node publishes
   * them, so this one never does, even if its ack is confirmed later (oldest forgotten first).
   */
  private readonly disclaimedAnswers = new Set<string>();
  /** With tracing on: the span of the turn a final answer ends, ended when that answer is published. */
  private readonly answerSpans = new WeakMap<TaskStatusUpdateEvent, Span>();

  constructor(private readonly opts: ThreadHostOptions) {
    this.tenant = opts.tenant ?? 'demo';
    this.transport = opts.transport;
    this.registry = opts.registry;
    this.store = opts.store ?? new MemoryThreadStore();
    this.log = (opts.logger ?? silentLogger()).child({ tenant: this.tenant, node: opts.nodeId });
    this.config = { ...DEFAULT_THREAD_CONFIG, ...opts.config, ...(opts.policy && opts.config?.usePolicy === undefined ? { usePolicy: true } : {}) };
    this.givens = { config: this.config, configJson: JSON.stringify(this.config), agents: () => this.registry.directory() };
    this.idleMs = opts.idleMs ?? 5 * 60_000;
    this.dormantMs = opts.dormantMs ?? 30_000;
    this.now = opts.now ?? Date.now;
    this.inspection = opts.inspection ?? new InspectionPublisher({ transport: opts.transport, process: opts.nodeId, switch: new InspectionSwitch(opts.inspect ?? false) });
    this.committer = new Committer({
      tenant: this.tenant,
      nodeId: opts.nodeId,
      store: this.store,
      now: this.now,
      log: this.log,
      committed: (live, finals, wrote) => {
        // The node the stored record names: the one to ask whether the thread's latest answer went out. A
        // commit with nothing new wrote nothing, and the record still names the node that answered.
        if (wrote) live.committedBy = opts.nodeId;
        this.afterCommit(live, finals);
      },
      shouldWrite: (live) => atRest(live.actor.getSnapshot()),
      drop: (live, error) => this.drop(live, error),
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
        this.publishToOwner(live, event);
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
        this.publishToOwner(live, event);
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
    if (isValidId('thread', this.opts.nodeId)) {
      this.answeredSub = this.transport.subscribe(subjects.answeredBy(this.tenant, this.opts.nodeId), (m) =>
        this.onAnsweredAsk(m).catch((err: unknown) => this.log.warn({ err: (err as Error).message }, 'could not answer whether an answer was published')),
      );
    }
    // Only a turn in progress (or an open handoff, whose deadline can start one) routes with the catalog;
    // an idle thread gets it with its next message (deliver), so an agent joining does not rewrite every
    // live thread's record.
    this.unsubscribeRegistry = this.registry.onChange(() => {
      const agents = this.registry.directory();
      for (const t of this.threads.values()) {
        const snap = t.actor.getSnapshot();
        if (snap.status === 'active' && (taskStateOf(snap.value) === 'working' || snap.context.handoff)) t.actor.send({ type: 'troupe.agents', agents });
      }
    });
    this.passivator = setInterval(
      () => void this.housekeeping().catch((err: unknown) => this.log.error({ err }, 'housekeeping of idle threads failed')),
      Math.min(...[this.idleMs, this.dormantMs].filter((ms) => ms > 0), KEEP_ENCODED_MS),
    );
    this.passivator.unref();
    return this;
  }

  async stop(): Promise<void> {
    if (this.passivator) clearInterval(this.passivator);
    this.unsubscribeRegistry?.();
    this.answeredSub?.unsubscribe();
    await Promise.all([...this.threads.values()].map((t) => this.passivate(t)));
    for (const threadId of [...this.dormant.keys()]) this.forgetDormant(threadId);
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
    const live = await this.obtain(threadId, { create: { owner, contextId: message.contextId, ...(continues ? { continues } : {}) } });
    const snap = live.actor.getSnapshot();
    this.checkOwner(snap.context.owner, owner, threadId);
    const key = answerKey(threadId, message.messageId);
    const ctx = snap.context;
    const inTurn = inTurnOf(ctx, message.messageId);
    const inHistory = historyHas(live, ctx.history, message.messageId);
    // Whether the thread has taken this message: in its turn, queue or history, or answered by this process.
    const has = inTurn || inHistory || live.waiters.some((w) => w.messageId === message.messageId) || this.publishedAnswers.has(key) || this.pendingAnswers.has(key);
    // A client's second copy of a message it got no answer for (HEADERS.resend), or a second stored copy
    // the stream's duplicate detection missed (`secondCopy`): the thread has the first one (its answer is
    // on its way or stored, where the client looks), so the copy is only acknowledged. A thread that never
    // had it (the stream lost the first copy) takes it below like any new message.
    if (has && (opts.resend || this.secondCopy(live, message.messageId, opts.seq, opts.stored))) return { duplicate: true };
    const behind = opts.seq !== undefined && live.inboundSeq !== undefined && opts.seq <= live.inboundSeq;
    if (snap.status === 'done' || TERMINAL_TASK_STATES.includes(taskStateOf(snap.value))) {
      // Another delivery of a message the thread answered as it ended (a cancel answers every message it
      // had taken): its final event is the answer, not THREAD_CLOSED as well.
      if (behind && opts.until === 'answered' && this.answerComing(live, message.messageId)) {
        const events = await this.waitFor(live, message.messageId);
        return { duplicate: true, publish: this.publishOnce(live, message.messageId, events) };
      }
      if (behind && (this.publishedAnswers.has(key) || this.pendingAnswers.has(key))) return { duplicate: true };
      throw new TroupeError('THREAD_CLOSED', `thread ${threadId} is ${taskStateOf(snap.value)}; start a new thread`);
    }
    // At or below the last stream sequence the thread took: another delivery of a message it has — if it
    // knows the message (in its turn, queue or history, or answered by this process). One it does not know
    // it never took (it was sent back to the stream and came back behind newer ones): taken now, late
    // rather than never — nothing a thread accepted ends without its final event.
    const redelivery = behind && has;
    if (behind && !redelivery) this.log.warn({ thread: threadId, seq: opts.seq, last: live.inboundSeq }, 'a message behind the last one the thread took, never taken: taking it now');
    if (redelivery || inTurn || inHistory) {
      if (opts.until === 'answered' && (inTurn || live.waiters.some((w) => w.messageId === message.messageId) || this.answerComing(live, message.messageId))) {
        // Its turn is still running here (the first delivery lost its consumer, or this node resumed the
        // thread after a takeover), or its answer waits for its commit: wait for the same answer and
        // publish it after this ack.
        const events = await this.waitFor(live, message.messageId);
        // A redelivery of the same stream message shares the first delivery's answer; a client sending the
        // message again is owed an answer of its own.
        return {
          duplicate: true,
          publish: redelivery ? this.publishOnce(live, message.messageId, events) : ({ acked }) => (acked ? this.publishAnswered(live, events, { remember: false }) : undefined),
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
      if (!redelivery) this.answerDuplicate(live, message.messageId, { remember: false });
      else if (!settled && !this.publishedAnswers.has(key) && !this.pendingAnswers.has(key) && !this.disclaimedAnswers.has(key)) {
        // The thread's latest message, answered by another node (its state is what that node committed):
        // its ack may have been confirmed and then lost with a consumer's leader, so the stream gives the
        // message again. The thread's last published-answer marker says whether the answer went out
        // (whoever published it, alive or not); without one, only the node that committed knows: ask it.
        // No answer (it died, maybe between its commit and its ack) means it may never have gone out: publish it.
        const before = await this.publishedBefore(live, message.messageId);
        // Asked meanwhile by the partition's next owner, this process said it had not published: that node
        // publishes it (a campaign run on 2.10.27: the committer, deciding on its own redelivery while the
        // marker stream elected a leader, told the next owner "not published", then published too).
        if (!before && !this.disclaimedAnswers.has(key) && !this.publishedAnswers.has(key)) this.answerDuplicate(live, message.messageId);
      }
      return { duplicate: true };
    }
    live.lastActive = this.now();
    if (opts.stored && opts.seq !== undefined) {
      live.taken ??= [];
      live.taken.push({ messageId: message.messageId, seq: opts.seq, at: opts.stored.at, id: opts.stored.id });
      if (live.taken.length > TAKEN_KEPT) live.taken.shift();
    }
    const answered = opts.until === 'answered' ? this.waitFor(live, message.messageId) : undefined;
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
    return { duplicate: false, publish: this.publishOnce(live, message.messageId, events) };
  }

  /**
   * Whether `stored` is a second stored copy of a message the thread took: the same Nats-Msg-Id within the
   * stream's duplicate window. JetStream should have refused it (a client re-sending within the window gets
   * a duplicate PubAck, and TroupeClient reads the answer from the store), but a clustered stream on
   * nats-server before 2.11 can store both copies when its leader changes while a client retries the
   * publish. The first copy's delivery gives the answer.
   */
  private secondCopy(live: LiveThread, messageId: string, seq: number | undefined, stored: StoredCopy | undefined): boolean {
    const window = this.opts.duplicateWindowMs;
    if (!stored || seq === undefined || window === undefined) return false;
    const first = live.taken?.find((t) => t.messageId === messageId);
    // The same stream message given again (seq) is a redelivery, settled below.
    if (!first || first.seq === seq || first.id !== stored.id || Math.abs(stored.at - first.at) >= window) return false;
    this.log.info({ thread: live.threadId, message: messageId, apartMs: stored.at - first.at }, 'a second stored copy of a message (the stream did not detect the duplicate): acknowledged, not answered again');
    metrics.inboundDuplicates.inc();
    return true;
  }

  /**
   * The after-ack step of a delivery: publishes the message's answer unless this process already did
   * (the same final events: another message reusing the messageId has answers of its own). From
   * now until it runs, the answer counts as given, so a redelivery arriving meanwhile (a consumer recreated
   * on reconnect) neither answers it again nor waits; two deliveries waiting for one turn publish it once.
   */
  private publishOnce(live: LiveThread, messageId: string, events: TaskStatusUpdateEvent[]): AfterAck {
    const key = answerKey(live.threadId, messageId);
    this.pendingAnswers.set(key, (this.pendingAnswers.get(key) ?? 0) + 1);
    return ({ acked }) => {
      const left = (this.pendingAnswers.get(key) ?? 1) - 1;
      if (left > 0) this.pendingAnswers.set(key, left);
      else this.pendingAnswers.delete(key);
      // Not known to be acknowledged: the message comes again (here or to the partition's next owner),
      // and that delivery publishes the stored answer; published now as well, it would go out twice.
      // Likewise once this process told the next owner it had not published it: that one did.
      if (!acked || this.disclaimedAnswers.has(key)) return;
      // The same final events are not published twice (another message reusing the messageId has answers of its own).
      this.publishAnswered(live, events.filter((e) => !this.publishedEvents.has(e)));
      this.rememberPublished(key);
    };
  }

  /** A final event for the message waits to be committed (in the outbox, or in the write in flight): it is about to go out. */
  private answerComing(live: LiveThread, messageId: string): boolean {
    const names = (e: TaskStatusUpdateEvent) => e.status.message?.metadata?.[META.inReplyTo] === messageId;
    return live.outbox.some(names) || (live.committing?.some(names) ?? false);
  }

  /**
   * Whether the answer to the thread's latest message went out from another node (see `deliver`). The
   * thread's published-answer marker says so when the stream can be read; else the node that committed
   * the turn, when it answers. While neither can tell (the marker stream electing a leader, the committer
   * reconnecting after the same fault: a chaos run published two answers a second time that way, their
   * markers stored), both are asked again, for up to ANSWER_UNKNOWN_WAIT_MS; only a stream that says there
   * is no marker, a committer that says it did not publish, or that wait running out lets the answer go out.
   * "No marker" alone is enough only when the committer is gone (`nodeAlive`, when the node has it): the
   * marker is stored after the answer, so a committer that is alive but does not answer may have published.
   */
  private async publishedBefore(live: LiveThread, messageId: string): Promise<boolean> {
    const by = live.committedBy;
    const askable = by !== undefined && by !== this.opts.nodeId && isValidId('thread', by);
    const deadline = Date.now() + ANSWER_UNKNOWN_WAIT_MS;
    for (let round = 1; ; round++) {
      const marked = this.opts.answered ? await this.opts.answered.published(live.threadId, messageId) : false;
      if (marked) {
        this.log.info({ thread: live.threadId, message: messageId, round }, 'a redelivered message was answered already (its published-answer marker): not published again');
        metrics.redeliveredAnswers.inc({ decision: 'marker' });
        return true;
      }
      const said = askable ? await this.publishedElsewhere(by, live.threadId, messageId) : undefined;
      // No marker settles it only when nobody else can have published: the committer answered, or is gone. A
      // committer alive but not answering (reconnecting after the server fault that moved the partition) may
      // have published with its marker not stored yet (the stream without quorum): both would publish.
      let committerGone = true;
      if (said === undefined && marked === false && askable && this.opts.nodeAlive) committerGone = (await this.opts.nodeAlive(by)) === false;
      if (said !== undefined || (marked === false && committerGone) || Date.now() >= deadline) {
        const published = said === true;
        metrics.redeliveredAnswers.inc({ decision: published ? 'node' : 'published' });
        this.log.info(
          { thread: live.threadId, message: messageId, committedBy: by, round, ...(said === undefined && marked === undefined ? { waitedMs: ANSWER_UNKNOWN_WAIT_MS } : {}) },
          published ? 'a redelivered message was answered already (the node that answered said so): not published again' : 'a redelivered message nobody says was answered: publishing its stored answer',
        );
        return published;
      }
      this.log.debug(
        { thread: live.threadId, message: messageId, committedBy: by, round, marker: marked === false ? 'none' : 'unknown' },
        marked === false
          ? 'cannot tell yet whether a redelivered message was answered (no marker, and the committer is alive but does not answer): asking again'
          : 'cannot tell yet whether a redelivered message was answered (the marker stream and the committer do not answer): asking again',
      );
      await new Promise((r) => setTimeout(r, 1_000));
    }
  }

  /**
   * Whether node `nodeId` says it published the answer to `messageId`; undefined when it does not answer,
   * asked a few times (a node that is alive may be reconnecting after the same server fault that moved its
   * partition: a trace showed one unreachable for a moment, and its answer went out twice).
   */
  private async publishedElsewhere(nodeId: string, threadId: string, messageId: string): Promise<boolean | undefined> {
    for (let attempt = 1; attempt <= ANSWERED_ASK_ATTEMPTS; attempt++) {
      try {
        const reply = await this.transport.request(subjects.answeredBy(this.tenant, nodeId), encodeJson({ threadId, messageId }), { timeoutMs: ANSWERED_ASK_MS });
        return decode(AnsweredReplySchema, reply.data, 'answer of another node', 2_048).published;
      } catch {
        if (attempt < ANSWERED_ASK_ATTEMPTS) await new Promise((r) => setTimeout(r, 500));
      }
    }
    return undefined;
  }

  /**
   * Answers another node asking whether this process published an answer (see `deliver`). An answer
   * still waiting for its delivery's ack is waited for (bounded): whether it goes out depends on the ack.
   */
  private async onAnsweredAsk(m: InboundMessage): Promise<void> {
    let ask: { threadId: string; messageId: string };
    try {
      ask = decode(AnsweredAskSchema, m.data, 'question of another node', 2_048);
    } catch (err) {
      m.respond(encodeJson(TroupeError.from(err, 'INVALID_MESSAGE').toReply()));
      return;
    }
    const { threadId, messageId } = ask;
    const key = answerKey(threadId, messageId);
    for (let waited = 0; this.pendingAnswers.has(key) && waited < ANSWERED_WAIT_MS; waited += 50) await new Promise((r) => setTimeout(r, 50));
    const published = this.publishedAnswers.has(key);
    // "Not published" is a promise: the asker publishes it, so this process must not any more (its ack
    // may still be settling, and be confirmed after this answer).
    if (!published) remember(this.disclaimedAnswers, key);
    m.respond(encodeJson({ published }));
  }

  /** Resolves with the final events of the message's turn once that turn is committed. */
  private waitFor(live: LiveThread, messageId: string): Promise<TaskStatusUpdateEvent[]> {
    return new Promise((resolve, reject) => live.waiters.push({ messageId, events: [], resolve, reject }));
  }

  private publishAnswered(live: LiveThread, events: TaskStatusUpdateEvent[], opts: { remember?: boolean } = {}): void {
    for (const event of events) this.publishFinal(live, event, opts);
  }

  /** Publishes a final answer and remembers that this process did (a redelivery then needs nothing). */
  private publishFinal(live: LiveThread, event: TaskStatusUpdateEvent, opts: { remember?: boolean } = {}): void {
    const span = tracing.on ? this.answerSpans.get(event) : undefined;
    if (this.log.isLevelEnabled('debug')) this.log.debug({ thread: live.threadId, message: event.status.message?.metadata?.[META.inReplyTo], remember: opts.remember !== false }, 'publishing a final answer');
    this.publishToOwner(live, event, span);
    // A copy for a client that sent the messageId again does not count as the message's own answer.
    if (opts.remember !== false) this.publishedEvents.add(event);
    if (span) {
      this.answerSpans.delete(event);
      span.end();
    }
    const inReplyTo = event.status.message?.metadata?.[META.inReplyTo];
    if (typeof inReplyTo !== 'string' || opts.remember === false) return;
    this.rememberPublished(answerKey(live.threadId, inReplyTo));
    // After the answer, on the same connection: a stored marker means the answer went out before it.
    this.opts.answered?.mark(live.threadId, inReplyTo);
  }

  private rememberPublished(key: string): void {
    remember(this.publishedAnswers, key);
  }

  /**
   * After a write: each committed final event goes out now, or, when a delivery waits for that message's
   * answer, to that delivery (it goes out after the ack). Then the messages whose turn has ended (the
   * thread is at rest with them) are settled.
   */
  private afterCommit(live: LiveThread, finals: TaskStatusUpdateEvent[]): void {
    live.historyIds?.follow(live.actor.getSnapshot().context.history);
    for (const event of finals) {
      const inReplyTo = event.status.message?.metadata?.[META.inReplyTo];
      const waiting = live.waiters.filter((w) => w.messageId === inReplyTo);
      if (waiting.length === 0) this.publishFinal(live, event);
      else for (const w of waiting) w.events.push(event);
    }
    if (live.waiters.length === 0) return;
    const snap = live.actor.getSnapshot();
    const ctx = snap.context;
    const resting = atRest(snap);
    const open = new Set([...ctx.pending.map((m) => m.messageId), ...(ctx.turn ? [ctx.turn.userMessageId] : [])]);
    const still: LiveThread['waiters'] = [];
    for (const w of live.waiters) {
      if (resting || (!open.has(w.messageId) && historyHas(live, ctx.history, w.messageId))) w.resolve(w.events);
      else still.push(w);
    }
    live.waiters = still;
  }

  /** Cancels a thread; with an `owner`, only that owner's (anyone else gets THREAD_NOT_FOUND). */
  async cancel(threadId: string, reason?: string, owner?: string): Promise<TaskState> {
    const live = await this.obtain(threadId);
    if (owner !== undefined) this.checkOwner(live.actor.getSnapshot().context.owner, owner, threadId);
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
      if (owner !== undefined && live.actor.getSnapshot().context.owner !== owner) throw this.notFound(threadId);
      return { task: recordOf(live, { tenant: this.tenant, node: this.opts.nodeId, now: this.now() }).task, revision: live.revision ?? 0 };
    }
    const stored = await this.store.get(this.tenant, threadId);
    if (!stored || (owner !== undefined && ownerOfRecord(stored.record) !== owner)) throw this.notFound(threadId);
    return { task: stored.record.task, revision: stored.revision };
  }

  /** Live and passivated counts, and one ActorInfo per live thread and its children. */
  list(): { actors: ActorInfo[]; passivated: number } {
    return { actors: [...this.threads.values()].flatMap((t) => actorsOf(t, this.opts.nodeId)), passivated: this.passivatedTotal };
  }

  /**
   * State, context (redacted) and recent events of a live thread, or of a child `<threadId>/<childId>`; of a
   * dormant thread, state and context from the record it keeps, and the log it kept.
   */
  inspect(actorId: string): { actor: ActorInfo; value: unknown; context: unknown; events: RecentEvent[] } | undefined {
    const slash = actorId.indexOf('/');
    const live = this.threads.get(slash < 0 ? actorId : actorId.slice(0, slash));
    if (live) return inspectThread(live, actorId, this.opts.nodeId);
    const kept = slash < 0 ? this.dormant.get(actorId) : undefined;
    return kept ? inspectDormant(actorId, fromDormant(kept, this.givens), this.opts.nodeId, unpackEvents(kept.events)) : undefined;
  }

  liveCount(): number {
    return this.threads.size;
  }

  /** Threads this host passivated (and has not rehydrated since), dormant ones included. */
  passivatedCount(): number {
    return this.passivatedTotal;
  }

  /** Passivated threads whose records this host keeps in memory (`dormantMs`). */
  dormantCount(): number {
    return this.dormant.size;
  }

  isLive(threadId: string): boolean {
    return this.threads.has(threadId);
  }

  /**
   * After taking over threads (a partition of them), loads the ones that need an actor now: a turn in
   * progress (its agent call re-runs with the same idempotency key and finishes the turn) or an open
   * handoff (its deadline must keep running). `over()` ends the pass early (the node stops, or no longer
   * holds the partitions): the rest of the listing is not read.
   */
  async resumeThreads(belongs: (threadId: string) => boolean, over: () => boolean = () => false): Promise<{ resumed: string[]; listed: number }> {
    const resumed: string[] = [];
    let listed = 0;
    for await (const entry of this.store.list(this.tenant, { threadIds: belongs })) {
      if (over()) break;
      listed++;
      if (!belongs(entry.threadId) || this.threads.has(entry.threadId)) continue;
      if (entry.state !== 'working' && entry.state !== 'input-required') continue;
      if (entry.state === 'input-required') {
        const stored = await this.store.get(this.tenant, entry.threadId).catch(() => undefined);
        if (!stored?.record.task.metadata?.[META.handoff]) continue;
      }
      try {
        await this.obtain(entry.threadId);
        resumed.push(entry.threadId);
      } catch (err) {
        this.log.error({ err: (err as Error).message, thread: entry.threadId }, 'could not resume a thread');
      }
    }
    return { resumed, listed };
  }

  /** Commits and stops the live threads that another node now owns, and forgets the dormant ones. */
  async releaseThreads(belongs: (threadId: string) => boolean): Promise<void> {
    await Promise.all([...this.threads.values()].filter((t) => belongs(t.threadId)).map((t) => this.passivate(t)));
    // After the passivations: one that was making a thread dormant when the release came has finished.
    for (const threadId of [...this.dormant.keys()]) if (belongs(threadId)) this.forgetDormant(threadId);
  }

  /** Drops the live actor (if any) and reloads the thread from the store. */
  async rehydrate(threadId: string): Promise<TaskState> {
    await this.passivateThread(threadId);
    const loaded = await this.obtain(threadId);
    return taskStateOf(loaded.actor.getSnapshot().value);
  }

  /**
   * Erases a thread (an operator's `troupe delete`): its actor stopped, nothing of it kept in memory, its
   * record deleted from the store. Refused while a turn is in flight (THREAD_BUSY: cancel it, or wait for its
   * answer); a thread that is nowhere is THREAD_NOT_FOUND. A message arriving meanwhile waits, then starts a
   * new thread of the same id.
   */
  erase(threadId: string): Promise<void> {
    // A second request while one runs gets that one's outcome.
    const erasing = this.erasing.get(threadId);
    if (erasing) return erasing;
    const run = (async () => {
      await this.loading.get(threadId)?.catch(() => undefined);
      const live = this.threads.get(threadId);
      if (live && !live.stopped && !resting(live)) {
        throw new TroupeError('THREAD_BUSY', `thread ${threadId} is in the middle of a turn: cancel it (troupe send --cancel --thread ${threadId}) or delete it once it is answered`);
      }
      if (!live && !this.dormant.has(threadId) && !(await this.store.get(this.tenant, threadId))) throw this.notFound(threadId);
      await this.passivateThread(threadId);
      await this.store.delete(this.tenant, threadId);
    })().finally(() => this.erasing.delete(threadId));
    this.erasing.set(threadId, run);
    return run;
  }

  /** Passivates one thread by id, dormant or live, keeping nothing of it; false when neither is here. */
  async passivateThread(threadId: string): Promise<boolean> {
    const live = this.threads.get(threadId);
    if (live) await this.passivate(live);
    return this.forgetDormant(threadId) !== undefined || live !== undefined;
  }

  /** Waits until the thread's latest state is committed; throws when the commit failed. */
  async flushCommits(threadId: string): Promise<void> {
    const live = this.threads.get(threadId);
    if (live) await this.committer.flush(live);
  }

  // ---- loading and owning --------------------------------------------------------------------------

  private notFound(threadId: string): TroupeError {
    return new TroupeError('THREAD_NOT_FOUND', `no thread ${threadId} in tenant ${this.tenant}`);
  }

  /** "Not yours" looks exactly like "does not exist". */
  private checkOwner(actual: string, claimed: string, threadId: string): void {
    if (actual !== claimed) throw this.notFound(threadId);
  }

  private async obtain(threadId: string, opts: { create?: ThreadCreation } = {}): Promise<LiveThread> {
    if (this.erasing.size > 0 && this.erasing.has(threadId)) {
      await this.erasing.get(threadId)!.catch(() => undefined);
      return this.obtain(threadId, opts);
    }
    const live = this.threads.get(threadId);
    if (live?.passivating) {
      // Being passivated: a message handed to it now would be refused on its way out. Wait, then load it again.
      await live.passivating;
      return this.obtain(threadId, opts);
    }
    if (live) return live;
    let pending = this.loading.get(threadId);
    if (!pending) {
      pending = this.load(threadId, opts.create).finally(() => this.loading.delete(threadId));
      this.loading.set(threadId, pending);
    }
    return pending;
  }

  /**
   * The history a new thread starts with when its first message references an ended task (`continues`) of
   * the same owner and context: that task's conversation, newest `historyLimit` messages. Anything else
   * (another owner's task, another context, none stored) starts empty.
   */
  private async historyToContinue(create: ThreadCreation): Promise<Message[] | undefined> {
    if (!create.continues || !isValidId('thread', create.continues)) return undefined;
    const prior = await this.store.get(this.tenant, create.continues).catch(() => undefined);
    if (!prior || ownerOfRecord(prior.record) !== create.owner || prior.record.task.contextId !== create.contextId) return undefined;
    return (prior.record.task.history ?? []).slice(-this.config.historyLimit);
  }

  private async load(threadId: string, create: ThreadCreation | undefined): Promise<LiveThread> {
    const kept = this.forgetDormant(threadId);
    const woken = kept ? { ...wakeFromDormant(kept, this.givens), revision: kept.revision } : undefined;
    const stored = woken ?? (await this.store.get(this.tenant, threadId));
    if (!stored && !create) throw this.notFound(threadId);
    const history = !stored && create?.continues ? await this.historyToContinue(create) : undefined;
    const live: LiveThread = {
      threadId,
      actor: undefined as unknown as ThreadActor,
      lastActive: this.now(),
      // A dormant thread wakes with the log it had; one read from the store starts a new one.
      events: unpackEvents(kept?.events),
      commit: Promise.resolve(),
      dirty: false,
      changed: false,
      outbox: [],
      waiters: [],
      historyTrimmed: 0,
      ...(woken?.encoded ? { encoded: woken.encoded } : {}),
      turns: new Map(),
      artifacts: stored?.record.task.artifacts ?? [],
      ...(stored?.record.task.status.timestamp ? { statusAt: { state: stored.record.task.status.state, at: stored.record.task.status.timestamp } } : {}),
      ...(stored ? { revision: stored.revision } : {}),
      ...(stored?.record.inboundSeq !== undefined ? { inboundSeq: stored.record.inboundSeq } : {}),
      ...(stored?.record.taken?.length ? { taken: stored.record.taken.slice(-TAKEN_KEPT) } : {}),
      ...(stored?.record.node ? { committedBy: stored.record.node } : {}),
    };
    const publish = this.inspection.observe({ subject: subjects.inspectThread(this.tenant, threadId), rootId: threadId, threadId });
    const inspect = (ev: InspectionEvent) => {
      try {
        publish(ev);
        this.onInspection(live, ev);
      } catch (err) {
        this.log.error({ err, thread: threadId }, 'inspection hook failed');
      }
    };
    live.actor = stored
      ? createActor(this.machine, { snapshot: fullSnapshot(stored.record) as never, id: threadId, inspect, input: undefined as never })
      : createActor(this.machine, {
          id: threadId,
          inspect,
          input: {
            threadId,
            tenant: this.tenant,
            owner: create!.owner,
            ...(create?.contextId ? { contextId: create.contextId } : {}),
            config: this.config,
            agents: this.registry.directory(),
            now: this.now(),
            ...(history?.length ? { history } : {}),
          },
        });
    live.actor.on('troupe.thread.status', (event) => {
      try {
        this.publishStatus(live, event);
      } catch (err) {
        this.log.error({ err, thread: threadId }, 'publishing a thread status failed');
      }
    });
    let restoring = Boolean(stored);
    live.actor.subscribe({
      next: (snapshot) => {
        // Re-arming timers on restore changes nothing worth a write.
        if (restoring) return;
        live.changed = true;
        // One write per turn: when the thread comes to rest, or when an answer waits to go out.
        if (atRest(snapshot) || live.outbox.length > 0) this.committer.schedule(live);
      },
      error: (err) => {
        const error = new TroupeError('WORKFLOW_ERROR', `thread ${threadId} failed: ${err instanceof Error ? err.message : String(err)}`);
        this.log.error({ err, thread: threadId }, 'thread actor failed; dropping it (its stored state reloads with the next message)');
        this.drop(live, error);
      },
    });
    this.threads.set(threadId, live);
    if (stored) {
      this.passivatedTotal = Math.max(0, this.passivatedTotal - 1);
      const state = taskStateOf((stored.record.snapshot as { value?: unknown })?.value);
      if (kept) this.log.debug({ thread: threadId, state }, 'dormant thread woken');
      else this.log.info({ thread: threadId, state }, 'thread rehydrated');
    }
    live.actor.start();
    // Timers (agent-call timeouts, retry delays, handoff deadlines) are not in a snapshot: re-arm them.
    live.actor.send(stored ? { type: 'troupe.restored', now: this.now() } : { type: 'troupe.tick', now: this.now() });
    live.actor.send({ type: 'troupe.agents', agents: this.registry.directory() });
    restoring = false;
    return live;
  }

  /** Drops a live actor whose state could not be kept; the user hears why unless the stored state simply won. */
  private drop(live: LiveThread, error: TroupeError): void {
    live.failed ??= error;
    live.stopped = true;
    for (const w of live.waiters.splice(0)) w.reject(error);
    try {
      live.actor.stop();
    } catch {
      // already stopped
    }
    if (this.threads.get(live.threadId) === live) this.threads.delete(live.threadId);
    for (const id of [...live.turns.keys()]) this.endTurn(live, id, 'error', error);
    if (error.code === 'STORE_CONFLICT') return;
    const ctx = live.actor.getSnapshot().context;
    const inReplyTo = ctx.turn?.userMessageId;
    this.publishToOwner(live, {
      kind: 'status-update',
      taskId: live.threadId,
      contextId: ctx.contextId,
      status: {
        state: 'input-required',
        message: {
          kind: 'message',
          role: 'agent',
          messageId: `${inReplyTo ?? live.threadId}:failed`,
          contextId: ctx.contextId,
          taskId: live.threadId,
          parts: [{ kind: 'text', text: `${error.code}: ${error.message}` }],
          metadata: { [META.agent]: 'troupe', [META.error]: error.toBody(), ...(inReplyTo ? { [META.inReplyTo]: inReplyTo } : {}) },
        },
        timestamp: new Date(this.now()).toISOString(),
      },
      final: true,
      metadata: { [META.error]: error.toBody() },
    });
  }

  // ---- what goes out -------------------------------------------------------------------------------

  private publishToOwner(live: LiveThread, event: TaskStatusUpdateEvent | TaskArtifactUpdateEvent, span?: Span): void {
    if (this.transport.closed) return;
    const owner = live.actor.getSnapshot().context.owner;
    // The answer goes back in the trace of the turn it ends (or the one running).
    const traced = tracing.on ? (span ?? this.firstTurn(live)?.span) : undefined;
    try {
      const subject = subjects.threadOut(this.tenant, principalOf(owner), live.threadId);
      if (traced) this.transport.publish(subject, encodeJson(event), { headers: injectTraceparent({}, traced) });
      else this.transport.publish(subject, encodeJson(event));
    } catch (err) {
      this.log.warn({ err: (err as Error).message, thread: live.threadId }, 'could not publish a thread event');
    }
  }

  /**
   * A message the thread already has: its final answer again (if it has one yet), at once. With
   * `remember: false` (a client sending a messageId again, not a redelivery) this copy does not count as
   * the answer this process gave for that message.
   */
  private answerDuplicate(live: LiveThread, messageId: string, opts: { remember?: boolean } = {}): void {
    const ctx = live.actor.getSnapshot().context;
    const answer = answerIn(ctx.history, messageId, isWorking(live.actor.getSnapshot().value));
    if (!answer) {
      // Still being answered (its turn runs, it is queued, or its answer waits for its commit): the answer will come.
      if (inTurnOf(ctx, messageId) || this.answerComing(live, messageId)) return;
      // Its answer is no longer kept (the history keeps the latest messages): a typed error, not silence.
      const error = new TroupeError('INVALID_MESSAGE', `message ${messageId} was already sent into thread ${live.threadId} and its answer is no longer kept; send it with a new messageId`);
      this.publishFinal(live, rejectionEvent({ taskId: live.threadId, contextId: ctx.contextId, messageId, error, timestamp: new Date(this.now()).toISOString() }), opts);
      return;
    }
    this.publishFinal(live, {
      kind: 'status-update',
      taskId: live.threadId,
      contextId: ctx.contextId,
      status: { state: taskStateOf(live.actor.getSnapshot().value), message: answer, timestamp: new Date(this.now()).toISOString() },
      final: true,
      ...(answer.metadata?.[META.error] ? { metadata: { [META.error]: answer.metadata[META.error] } } : {}),
    }, opts);
  }

  private publishStatus(live: LiveThread, event: ThreadStatusEmitted): void {
    live.lastStatus = event;
    live.statusAt = { state: event.state, at: new Date(this.now()).toISOString() };
    const ctx = live.actor.getSnapshot().context;
    const update: TaskStatusUpdateEvent = {
      kind: 'status-update',
      taskId: live.threadId,
      contextId: ctx.contextId,
      status: { state: event.state, ...(event.message ? { message: event.message } : {}), timestamp: live.statusAt.at },
      final: event.final,
      ...(event.route || event.error ? { metadata: { ...(event.route ? { [META.route]: event.route } : {}), ...(event.error ? { [META.error]: event.error } : {}) } } : {}),
    };
    const watch = this.firstTurn(live);
    const traceId = traceIdOf(watch?.span);
    if (event.route) {
      // Seed 003's structured routing log: the decision's confidence, the agents the turn has reached, its time so far.
      const agents = [...new Set([...(ctx.turn?.route ?? []).map((s) => s.to), event.route.to].filter((to) => to !== 'user'))];
      const step = { from: event.route.from, to: event.route.to, hop: event.route.hop, reason: event.route.reason, ...(event.route.confidence !== undefined ? { confidence: event.route.confidence } : {}) };
      this.log.info({ thread: live.threadId, ...step, agentsUsed: agents, ...(watch ? { durationMs: Math.max(0, this.now() - watch.startedAt) } : {}), ...(traceId ? { traceId } : {}) }, 'routed');
      metrics.hops.inc();
      if (watch) {
        const now = this.now();
        metrics.hopSeconds.observe((now - watch.stepAt) / 1000);
        watch.stepAt = now;
        watch.span?.addEvent('troupe.routed', { 'troupe.from': event.route.from, 'troupe.to': event.route.to, 'troupe.hop': event.route.hop, ...(event.route.reason ? { 'troupe.reason': event.route.reason } : {}) });
      }
    }
    if (event.error) this.log.warn({ thread: live.threadId, code: event.error.code, ...(traceId ? { traceId } : {}) }, event.error.message);
    if (event.final) {
      const inReplyTo = event.message?.metadata?.[META.inReplyTo];
      // The turn's span stays open until its answer goes out (after the commit that includes it).
      const span = this.endTurn(live, typeof inReplyTo === 'string' ? inReplyTo : undefined, event.error ? 'error' : event.state, event.error, { keepSpan: true });
      if (span) this.answerSpans.set(update, span);
    }
    if (!event.final) {
      this.publishToOwner(live, update);
      return;
    }
    // A final answer goes out after the state that includes it is committed: whoever reads the store on
    // receiving it sees that state. A crash in between: the unacknowledged message is redelivered to the
    // next owner, which finds it answered in the store and publishes the answer then.
    live.outbox.push(update);
    live.changed = true;
    this.committer.schedule(live);
  }

  /** Moves a thread's clock to now (its fan-out's and handoff's with it). */
  private tick(threadId: string): void {
    this.threads.get(threadId)?.actor.send({ type: 'troupe.tick', now: this.now() });
  }

  private onInspection(live: LiveThread, ev: InspectionEvent): void {
    if (ev.type !== '@xstate.event' || !live.actor) return;
    const type = ev.event.type;
    if (type === 'troupe.tick' || type === 'troupe.agents' || type.startsWith('xstate.init')) return;
    live.events.push({ at: this.now(), type, child: ev.actorRef === live.actor ? undefined : (ev.actorRef as AnyActorRef).id });
    if (live.events.length > EVENT_LOG_LIMIT) live.events.shift();
  }

  // ---- metrics and traces of turns -------------------------------------------------------------------

  private firstTurn(live: LiveThread): TurnWatch | undefined {
    for (const w of live.turns.values()) return w;
    return undefined;
  }

  private currentTurn(threadId: string): TurnWatch | undefined {
    const live = this.threads.get(threadId);
    return live ? this.firstTurn(live) : undefined;
  }

  /** The span of hop `hop` of the thread's running turn (made on its first call; earlier hops end then). */
  private hopSpan(threadId: string, hop: number, agentId: string): Span | undefined {
    const watch = this.currentTurn(threadId);
    if (!watch?.span) return undefined;
    watch.hops ??= new Map();
    let span = watch.hops.get(hop);
    if (!span) {
      for (const [n, earlier] of watch.hops) {
        if (n < hop) {
          earlier.end();
          watch.hops.delete(n);
        }
      }
      span = startSpan('troupe.hop', { parent: watch.span, attributes: { 'troupe.hop': hop, 'troupe.agent': agentId, 'troupe.thread': threadId } });
      watch.hops.set(hop, span);
    }
    return span;
  }

  /** A turn ended (answered, failed, or moved off this node): its metrics, and its spans end. */
  private endTurn(
    live: LiveThread,
    messageId: string | undefined,
    outcome: string,
    error?: { code: string; message: string },
    opts: { keepSpan?: boolean } = {},
  ): Span | undefined {
    const label = outcomeLabel(outcome);
    metrics.turns.inc({ outcome: label });
    // A turn this host did not start (resumed after a takeover) is counted, without its durations.
    const id = messageId ?? live.turns.keys().next().value;
    const watch = id === undefined ? undefined : live.turns.get(id);
    if (id === undefined || !watch) return undefined;
    live.turns.delete(id);
    const now = this.now();
    metrics.turnSeconds.observe({ outcome: label }, (now - watch.startedAt) / 1000);
    metrics.hopSeconds.observe((now - watch.stepAt) / 1000);
    if (!watch.span) return undefined;
    for (const span of watch.hops?.values() ?? []) span.end();
    watch.span.setAttribute('troupe.outcome', label);
    if (error) markError(watch.span, error);
    if (opts.keepSpan) return watch.span;
    watch.span.end();
    return undefined;
  }

  // ---- passivation -----------------------------------------------------------------------------------

  /**
   * Every few seconds: idle threads give back their kept encodings and history ids; those at rest for
   * `dormantMs` become dormant, those idle for `idleMs` are passivated, dormant ones included.
   */
  private async housekeeping(): Promise<void> {
    const now = this.now();
    const rested = now - KEEP_ENCODED_MS;
    for (const live of this.threads.values()) {
      if (live.lastActive > rested) continue;
      live.encoded = undefined;
      live.historyIds = undefined;
    }
    // Not a thread in a handoff: it waits here for its deadline.
    if (this.idleMs > 0) for (const [threadId, kept] of this.dormant) if (kept.lastActive <= now - this.idleMs && !this.wakes.has(threadId)) this.dormant.delete(threadId);
    if (this.idleMs > 0 || this.dormantMs > 0) await this.passivateIdle(now);
  }

  private async passivateIdle(now: number): Promise<void> {
    for (const live of [...this.threads.values()]) {
      if (!resting(live)) continue;
      if (this.idleMs > 0 && live.lastActive <= now - this.idleMs && !inHandoff(live)) await this.passivate(live);
      else if (this.dormantMs > 0 && live.lastActive <= now - this.dormantMs && this.maySleep(live)) await this.passivate(live, { dormant: true });
    }
  }

  /** Makes every thread at rest dormant now, as `dormantMs` does in its time; how many are dormant after. */
  async sleepThreads(): Promise<number> {
    for (const live of [...this.threads.values()]) if (resting(live) && this.maySleep(live)) await this.passivate(live, { dormant: true });
    return this.dormant.size;
  }

  /** Not watched: someone inspecting a thread sees its machine, not a record. */
  private maySleep(live: LiveThread): boolean {
    return !this.inspection.switch.isOn(live.threadId);
  }

  /**
   * Commits the state, stops the actor and frees its memory (once, however many ask); `dormant` keeps the
   * committed record in memory for the next message, when the thread is at rest and its commit went through.
   */
  private passivate(live: LiveThread, opts: { dormant?: boolean } = {}): Promise<void> {
    live.passivating ??= this.unload(live, opts.dormant === true);
    return live.passivating;
  }

  private async unload(live: LiveThread, dormant: boolean): Promise<void> {
    this.committer.schedule(live, { force: true });
    await this.committer.flush(live).catch(() => undefined);
    const kept = dormant ? this.dormantOf(live) : undefined;
    live.stopped = true;
    try {
      // Deliveries still waiting for their answer are not acknowledged: the next owner replays them.
      for (const w of live.waiters.splice(0)) w.reject(new TroupeError('TRANSPORT_ERROR', `thread ${live.threadId} moved off this node before its turn ended`));
      live.actor.stop();
      for (const id of [...live.turns.keys()]) this.endTurn(live, id, 'moved');
    } finally {
      if (this.threads.get(live.threadId) === live) {
        this.threads.delete(live.threadId);
        if (kept) this.dormant.set(live.threadId, kept.copy);
        if (kept?.wakeAt !== undefined) this.armWake(live.threadId, kept.wakeAt);
        this.passivatedTotal++;
      }
    }
  }

  /** Takes a thread's dormant copy (and its wake, if any) out of the host; returns the copy. */
  private forgetDormant(threadId: string): DormantThread | undefined {
    const wake = this.wakes.get(threadId);
    if (wake) {
      clearTimeout(wake);
      this.wakes.delete(threadId);
    }
    const kept = this.dormant.get(threadId);
    if (kept) this.dormant.delete(threadId);
    return kept;
  }

  /**
   * Wakes a dormant thread in a handoff at the handoff's deadline, as its live actor's timer would have
   * fired: the load re-arms the deadline, which has passed, so the handoff ends and control goes back.
   */
  private armWake(threadId: string, at: number): void {
    const timer = setTimeout(() => {
      this.wakes.delete(threadId);
      if (!this.dormant.has(threadId)) return;
      this.obtain(threadId).catch((err: unknown) => this.log.error({ err: (err as Error).message, thread: threadId }, 'could not wake a dormant thread at its handoff deadline'));
    }, Math.min(Math.max(0, at - this.now()), MAX_TIMER_MS));
    timer.unref();
    this.wakes.set(threadId, timer);
  }

  /**
   * The record a thread at rest would be loaded from, as JSON, or undefined when it is not at rest or not
   * all of it is committed: the stored record's content, with the node that wrote it (which answers
   * whether a redelivered message was answered, see `deliver`); and, in a handoff, when its deadline wakes it.
   */
  private dormantOf(live: LiveThread): { copy: DormantThread; wakeAt: number | undefined } | undefined {
    const still = live.actor.getSnapshot().status === 'active' && resting(live) && live.turns.size === 0 && live.waiters.length === 0;
    if (!still || live.changed || live.failed || live.outbox.length > 0 || live.revision === undefined) return undefined;
    const record = recordOf(live, { tenant: this.tenant, node: live.committedBy ?? this.opts.nodeId, now: this.now() });
    const wakeAt = handoffDeadlineOf(record);
    const events = packEvents(live.events);
    return { copy: { ...dormantJson(record, this.givens), revision: live.revision, lastActive: live.lastActive, ...(events ? { events } : {}) }, wakeAt };
  }
}
