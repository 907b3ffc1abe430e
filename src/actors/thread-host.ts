/**
 * Holds thread actors (in a Map, not as children of one parent: XState copies the children map on
 * every spawn) and binds the pure thread machine to the mesh: agent calls go over the transport, status
 * events go out on the thread's `.out` subject, and every state change is committed to the store with
 * compare-and-set. Idle threads are passivated (snapshot committed, actor stopped) and rehydrated on
 * their next message.
 */
import { createActor, fromPromise, type Actor, type InspectionEvent } from 'xstate';
import type { Logger } from 'pino';
import { agentCallMachine, type AgentRequestInput } from '../machines/agent-call.js';
import { routerMachine, type PolicyInput } from '../machines/router.js';
import { orchestrationMachine, type CallAgentInput } from '../machines/orchestration.js';
import { DEFAULT_THREAD_CONFIG, threadMachine, taskStateOf, type ThreadConfig, type ThreadStatusEmitted } from '../machines/thread.js';
import type { RouterPolicy } from '../routing/scoring.js';
import {
  AgentReplySchema,
  HEADERS,
  TERMINAL_TASK_STATES,
  TroupeError,
  decode,
  encodeJson,
  supportsClientRouting,
  withRoutingRequest,
  type ActorInfo,
  type AgentReply,
  type Message,
  type RouterDecision,
  type Task,
  type TaskState,
  type TaskStatusUpdateEvent,
} from '../protocol/index.js';
import { MemoryThreadStore } from '../store/memory.js';
import type { ThreadRecord, ThreadStore } from '../store/types.js';
import { subjects } from '../transport/subjects.js';
import type { Transport } from '../transport/types.js';
import { redact } from '../observability/redact.js';
import { silentLogger } from '../observability/logger.js';
import type { Registry } from './registry.js';
import { META } from '../protocol/metadata.js';

type ThreadActor = Actor<typeof threadMachine>;

interface LiveThread {
  threadId: string;
  actor: ThreadActor;
  lastActive: number;
  events: Array<{ at: string; type: string; summary?: string }>;
  lastStatus?: ThreadStatusEmitted;
  /** Serialises commits of this thread. */
  commit: Promise<void>;
  dirty: boolean;
  /** The store revision of the last commit (the record's etag); undefined until first written. */
  revision?: number;
  /** Set when a commit failed; the actor is dropped and the next message reloads the stored state. */
  failed?: TroupeError;
  /** Passivated: nothing more is committed from this actor. */
  stopped?: boolean;
  /** The state changed since the last commit. */
  changed: boolean;
  /** Final status events waiting for the commit that includes them; published right after it. */
  outbox: TaskStatusUpdateEvent[];
  /** Events the last written record carries in its outbox (cleared by the next write). */
  written: number;
}

export interface ThreadHostOptions {
  transport: Transport;
  registry: Registry;
  tenant?: string;
  nodeId: string;
  store?: ThreadStore;
  config?: Partial<ThreadConfig>;
  policy?: RouterPolicy;
  logger?: Logger;
  /** Passivate threads idle this long (ms). 0 disables passivation. */
  idleMs?: number;
  /** Publish inspection events on `troupe.<tenant>.inspect.<actorId>`. */
  inspect?: boolean;
  now?: () => number;
}

const EVENT_LOG_LIMIT = 25;

export class ThreadHost {
  readonly tenant: string;
  readonly store: ThreadStore;
  private readonly threads = new Map<string, LiveThread>();
  private readonly loading = new Map<string, Promise<LiveThread>>();
  private readonly transport: Transport;
  private readonly registry: Registry;
  private readonly log: Logger;
  private readonly config: ThreadConfig;
  private readonly machine;
  private readonly idleMs: number;
  private readonly now: () => number;
  private passivator?: NodeJS.Timeout;
  private unsubscribeRegistry?: () => void;
  private passivatedCount = 0;

  constructor(private readonly opts: ThreadHostOptions) {
    this.tenant = opts.tenant ?? 'demo';
    this.transport = opts.transport;
    this.registry = opts.registry;
    this.store = opts.store ?? new MemoryThreadStore();
    this.log = (opts.logger ?? silentLogger()).child({ tenant: this.tenant, node: opts.nodeId });
    this.config = { ...DEFAULT_THREAD_CONFIG, ...opts.config, ...(opts.policy && opts.config?.usePolicy === undefined ? { usePolicy: true } : {}) };
    this.idleMs = opts.idleMs ?? 5 * 60_000;
    this.now = opts.now ?? Date.now;
    this.machine = threadMachine.provide({
      actors: {
        agentCall: agentCallMachine.provide({
          actors: { request: fromPromise<AgentReply, AgentRequestInput>(({ input }) => this.callAgent(input)) },
        }),
        router: routerMachine.provide({
          actors: { policy: fromPromise<RouterDecision, PolicyInput>(({ input }) => this.decide(input)) },
        }),
        orchestration: orchestrationMachine.provide({
          actors: {
            callAgent: fromPromise<Message, CallAgentInput>(async ({ input, self, signal }) => {
              // The orchestration keeps time from ticks; one right before settling makes execution_time_ms exact.
              // A stopped call (first_success lost, timed out) ticks nobody.
              const tick = () => {
                if (!signal.aborted) (self as unknown as { _parent?: { send(e: unknown): void } })._parent?.send({ type: 'troupe.orchestration.tick', now: this.now() });
              };
              try {
                const call = this.callAgent(
                  { agentId: input.agentId, message: input.message, sender: 'user', hop: 0, attempt: input.attempt - 1, timeoutMs: this.config.agentTimeoutMs },
                );
                // Stop waiting as soon as the orchestration stops this call; the late reply is dropped.
                const reply = await new Promise<AgentReply>((resolve, reject) => {
                  const onAbort = () => reject(new TroupeError('WORKFLOW_ERROR', `call to ${input.agentId} was cancelled`));
                  if (signal.aborted) return onAbort();
                  signal.addEventListener('abort', onAbort, { once: true });
                  call.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
                });
                tick();
                if (reply.kind === 'error') throw TroupeError.fromBody(reply.error);
                const message = reply.kind === 'task' ? reply.status.message : reply;
                if (!message) throw new TroupeError('AGENT_ERROR', `agent "${input.agentId}" returned a task without a message`);
                return { ...message, metadata: { ...message.metadata, [META.agent]: input.agentId } };
              } catch (err) {
                tick();
                throw err;
              }
            }),
          },
        }),
      },
    });
  }

  start(): this {
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
    if (this.idleMs > 0) {
      this.passivator = setInterval(() => void this.passivateIdle(), Math.min(this.idleMs, 30_000));
      this.passivator.unref();
    }
    return this;
  }

  async stop(): Promise<void> {
    if (this.passivator) clearInterval(this.passivator);
    this.unsubscribeRegistry?.();
    await Promise.all([...this.threads.values()].map((t) => this.passivate(t)));
  }

  /**
   * Accepts a user message into a thread: validates it, creates or rehydrates the thread, hands the
   * message to its actor and commits the state that includes it before acknowledging.
   */
  async deliver(threadId: string, message: Message): Promise<{ duplicate: boolean }> {
    if (message.role !== 'user') throw new TroupeError('INVALID_MESSAGE', `messages into a thread must have role "user", not "${message.role}"`);
    const live = await this.obtain(threadId, message.contextId);
    const snap = live.actor.getSnapshot();
    if (snap.status === 'done' || TERMINAL_TASK_STATES.includes(taskStateOf(snap.value))) {
      throw new TroupeError('THREAD_CLOSED', `thread ${threadId} is ${taskStateOf(snap.value)}; start a new thread`);
    }
    const ctx = snap.context;
    if (ctx.history.some((m) => m.messageId === message.messageId) || ctx.pending.some((m) => m.messageId === message.messageId)) {
      return { duplicate: true };
    }
    live.lastActive = this.now();
    live.actor.send({ type: 'troupe.agents', agents: this.registry.directory() });
    live.actor.send({ type: 'troupe.user.message', message, now: this.now() });
    await this.flushCommits(live);
    return { duplicate: false };
  }

  async cancel(threadId: string, reason?: string): Promise<TaskState> {
    const live = await this.obtain(threadId, undefined, false);
    const state = taskStateOf(live.actor.getSnapshot().value);
    if (TERMINAL_TASK_STATES.includes(state)) throw new TroupeError('THREAD_CLOSED', `thread ${threadId} is already ${state}`);
    live.actor.send({ type: 'troupe.cancel', ...(reason ? { reason } : {}), now: this.now() });
    await this.flushCommits(live);
    return taskStateOf(live.actor.getSnapshot().value);
  }

  /** Live and passivated counts, and one ActorInfo per live thread and its children. */
  list(): { actors: ActorInfo[]; passivated: number } {
    return { actors: [...this.threads.values()].flatMap((t) => this.actorsOf(t)), passivated: this.passivatedCount };
  }

  /** One live thread and its children as `ps` shows them. */
  private actorsOf(t: LiveThread): ActorInfo[] {
    const snap = t.actor.getSnapshot();
    const turn = snap.context.turn;
    const actors: ActorInfo[] = [
      {
        kind: 'thread',
        id: t.threadId,
        state: stateString(snap.value),
        node: this.opts.nodeId,
        threadId: t.threadId,
        hops: turn?.hops ?? 0,
        status: 'live',
        detail: { turns: snap.context.turns, history: snap.context.history.length, current: turn?.current },
      },
    ];
    for (const [childId, child] of Object.entries(snap.children)) {
      if (!child) continue;
      const childSnap = child.getSnapshot() as { value?: unknown; status?: string };
      actors.push({
        kind: childId === 'router' ? 'router' : childId === 'agentCall' ? 'agent-call' : (childId as ActorInfo['kind']),
        id: `${t.threadId}/${childId}`,
        state: stateString(childSnap.value ?? childSnap.status),
        node: this.opts.nodeId,
        threadId: t.threadId,
        parent: t.threadId,
        status: 'live',
        ...(childId === 'agentCall' && turn ? { detail: { agent: turn.current } } : {}),
      });
    }
    return actors;
  }

  /** State, context (redacted) and recent events of a live thread, or of a child `<threadId>/<childId>`. */
  inspect(actorId: string): { actor: ActorInfo; value: unknown; context: unknown; events: LiveThread['events'] } | undefined {
    const [threadId, childId] = actorId.split('/');
    const live = threadId ? this.threads.get(threadId) : undefined;
    if (!live) return undefined;
    const info = this.actorsOf(live).find((a) => a.id === actorId);
    if (!info) return undefined;
    const snap = live.actor.getSnapshot();
    if (childId) {
      const child = snap.children[childId as keyof typeof snap.children] as { getSnapshot(): { value?: unknown; context?: unknown } } | undefined;
      const childSnap = child?.getSnapshot();
      return { actor: info, value: childSnap?.value, context: redact(childSnap?.context), events: [] };
    }
    return { actor: info, value: snap.value, context: redact(snap.context), events: live.events };
  }

  liveCount(): number {
    return this.threads.size;
  }

  /**
   * After taking over threads (a partition of them), loads the ones that need an actor now: a turn in
   * progress (its agent call re-runs with the same idempotency key and finishes the turn) or an open
   * handoff (its deadline must keep running).
   */
  async resumeThreads(belongs: (threadId: string) => boolean): Promise<string[]> {
    const resumed: string[] = [];
    for await (const entry of this.store.list(this.tenant)) {
      if (!belongs(entry.threadId) || this.threads.has(entry.threadId)) continue;
      if (entry.state !== 'working' && entry.state !== 'input-required') continue;
      if (entry.state === 'input-required') {
        const stored = await this.store.get(this.tenant, entry.threadId).catch(() => undefined);
        if (!stored?.record.task.metadata?.[META.handoff]) continue;
      }
      try {
        await this.obtain(entry.threadId, undefined, false);
        resumed.push(entry.threadId);
      } catch (err) {
        this.log.error({ err: (err as Error).message, thread: entry.threadId }, 'could not resume a thread');
      }
    }
    if (resumed.length) this.log.info({ threads: resumed.length }, 'resumed threads after takeover');
    return resumed;
  }

  /** Commits and stops the live threads that another node now owns. */
  async releaseThreads(belongs: (threadId: string) => boolean): Promise<void> {
    await Promise.all([...this.threads.values()].filter((t) => belongs(t.threadId)).map((t) => this.passivate(t)));
  }

  /** Drops the live actor (if any) and reloads the thread from the store. */
  async rehydrate(threadId: string): Promise<TaskState> {
    const live = this.threads.get(threadId);
    if (live) await this.passivate(live);
    const loaded = await this.obtain(threadId, undefined, false);
    return taskStateOf(loaded.actor.getSnapshot().value);
  }

  /** Waits until the thread's latest state is committed; throws when the commit failed. */
  async flushCommits(live: LiveThread): Promise<void> {
    while (live.dirty) await live.commit;
    await live.commit;
    if (live.failed) throw live.failed;
  }

  private async obtain(threadId: string, contextId?: string, create = true): Promise<LiveThread> {
    const live = this.threads.get(threadId);
    if (live) return live;
    let pending = this.loading.get(threadId);
    if (!pending) {
      pending = this.load(threadId, contextId, create).finally(() => this.loading.delete(threadId));
      this.loading.set(threadId, pending);
    }
    return pending;
  }

  private async load(threadId: string, contextId: string | undefined, create: boolean): Promise<LiveThread> {
    const stored = await this.store.get(this.tenant, threadId);
    if (!stored && !create) throw new TroupeError('THREAD_NOT_FOUND', `no thread ${threadId} in tenant ${this.tenant}`);
    const live: LiveThread = {
      threadId,
      actor: undefined as unknown as ThreadActor,
      lastActive: this.now(),
      events: [],
      commit: Promise.resolve(),
      dirty: false,
      changed: false,
      outbox: [],
      written: stored?.record.outbox?.length ?? 0,
      ...(stored ? { revision: stored.revision } : {}),
    };
    const inspect = (ev: InspectionEvent) => this.onInspection(live, ev);
    live.actor = stored
      ? createActor(this.machine, { snapshot: fullSnapshot(stored.record) as never, id: threadId, inspect, input: undefined as never })
      : createActor(this.machine, {
          id: threadId,
          inspect,
          input: {
            threadId,
            tenant: this.tenant,
            ...(contextId ? { contextId } : {}),
            config: this.config,
            agents: this.registry.directory(),
            now: this.now(),
          },
        });
    live.actor.on('troupe.thread.status', (event) => this.publishStatus(live, event));
    let restoring = Boolean(stored);
    live.actor.subscribe({
      next: () => {
        // Re-arming timers on restore changes nothing worth a write.
        if (restoring) return;
        live.changed = true;
        this.scheduleCommit(live);
      },
      error: (err) => this.log.error({ err, thread: threadId }, 'thread actor failed'),
    });
    this.threads.set(threadId, live);
    if (stored) {
      this.passivatedCount = Math.max(0, this.passivatedCount - 1);
      this.log.info({ thread: threadId, state: taskStateOf((stored.record.snapshot as { value?: unknown })?.value) }, 'thread rehydrated');
    }
    live.actor.start();
    // Timers (agent-call timeouts, retry delays, handoff deadlines) are not in a snapshot: re-arm them.
    live.actor.send(stored ? { type: 'troupe.restored', now: this.now() } : { type: 'troupe.tick', now: this.now() });
    live.actor.send({ type: 'troupe.agents', agents: this.registry.directory() });
    restoring = false;
    // Answers committed by a node that died before publishing them go out now (at least once).
    for (const event of (stored?.record.outbox ?? []) as TaskStatusUpdateEvent[]) {
      this.transport.publish(subjects.threadOut(this.tenant, threadId), encodeJson(event));
    }
    return live;
  }

  private onInspection(live: LiveThread, ev: InspectionEvent): void {
    if (ev.type !== '@xstate.event') return;
    const type = ev.event.type;
    if (type === 'troupe.tick' || type === 'troupe.agents' || type.startsWith('xstate.init')) return;
    const isRoot = (ev.actorRef as { _parent?: unknown })._parent === undefined;
    const actorPath = isRoot ? live.threadId : `${live.threadId}/${(ev.actorRef as { id?: string }).id ?? 'child'}`;
    live.events.push({ at: new Date(this.now()).toISOString(), type, summary: isRoot ? undefined : actorPath });
    if (live.events.length > EVENT_LOG_LIMIT) live.events.shift();
    if (this.opts.inspect) {
      const snapshot = ev.actorRef.getSnapshot() as { value?: unknown };
      const actorToken = actorPath.replace(/[^A-Za-z0-9_-]/g, '_');
      this.transport.publish(
        subjects.inspect(this.tenant, actorToken),
        encodeJson({ actorId: actorPath, event: type, state: snapshot.value, at: new Date(this.now()).toISOString() }),
      );
    }
  }

  private publishStatus(live: LiveThread, event: ThreadStatusEmitted): void {
    live.lastStatus = event;
    const ctx = live.actor.getSnapshot().context;
    const update: TaskStatusUpdateEvent = {
      kind: 'status-update',
      taskId: live.threadId,
      contextId: ctx.contextId,
      status: { state: event.state, ...(event.message ? { message: event.message } : {}), timestamp: new Date(this.now()).toISOString() },
      final: event.final,
      ...(event.route || event.error ? { metadata: { ...(event.route ? { [META.route]: event.route } : {}), ...(event.error ? { [META.error]: event.error } : {}) } } : {}),
    };
    if (event.route) this.log.info({ thread: live.threadId, from: event.route.from, to: event.route.to, hop: event.route.hop, reason: event.route.reason }, 'routed');
    if (event.error) this.log.warn({ thread: live.threadId, code: event.error.code }, event.error.message);
    if (!event.final) {
      this.transport.publish(subjects.threadOut(this.tenant, live.threadId), encodeJson(update));
      return;
    }
    // A final answer goes out after the state that includes it is committed: whoever reads the store
    // on receiving it sees that state, and a crash in between is covered by the record's outbox.
    live.outbox.push(update);
    live.changed = true;
    this.scheduleCommit(live);
  }

  /**
   * Commits the thread's latest snapshot with compare-and-set on the revision it last wrote; concurrent
   * changes coalesce into the next write. A conflict means someone else wrote the thread (another node
   * took it over): the stored state wins — this actor is dropped, never written over it.
   */
  private scheduleCommit(live: LiveThread): void {
    if (live.dirty || live.failed || live.stopped) return;
    live.dirty = true;
    // One macrotask of slack lets the changes of one step (a reply, its routing, the answer) share a write.
    live.commit = live.commit.then(() => new Promise<void>((resolve) => setImmediate(resolve))).then(async () => {
      live.dirty = false;
      if (live.failed) return;
      // Nothing new, and no outbox left in the stored record to clear: no write.
      if (!live.changed && live.outbox.length === 0 && live.written === 0 && live.revision !== undefined) return;
      const outbox = live.outbox.splice(0);
      live.changed = false;
      try {
        const record = this.recordOf(live, outbox);
        live.revision = live.revision === undefined ? await this.store.create(record) : await this.store.update(record, live.revision);
        live.written = outbox.length;
        for (const event of outbox) this.transport.publish(subjects.threadOut(this.tenant, live.threadId), encodeJson(event));
      } catch (err) {
        const error = TroupeError.from(err, 'STORE_CONFLICT');
        live.failed = error;
        this.log.error({ err: error.message, code: error.code, thread: live.threadId }, 'could not commit thread state; dropping the live actor');
        live.actor.stop();
        if (this.threads.get(live.threadId) === live) this.threads.delete(live.threadId);
      }
    });
  }

  private recordOf(live: LiveThread, outbox: TaskStatusUpdateEvent[]): ThreadRecord {
    const snap = live.actor.getSnapshot();
    const ctx = snap.context;
    const state = taskStateOf(snap.value);
    const statusMessage = live.lastStatus?.final ? live.lastStatus.message : undefined;
    const task: Task = {
      kind: 'task',
      id: live.threadId,
      contextId: ctx.contextId,
      status: { state, ...(statusMessage ? { message: statusMessage } : {}), timestamp: new Date(this.now()).toISOString() },
      history: ctx.history,
      artifacts: [],
      metadata: {
        [META.routes]: ctx.routeLog,
        ...(ctx.lastError ? { [META.error]: ctx.lastError } : {}),
        ...(ctx.handoff ? { [META.handoff]: { targetAgentId: ctx.handoff.request.targetAgentId, sourceAgentId: ctx.handoff.request.sourceAgentId, phase: ctx.handoff.phase } } : {}),
        [META.turns]: ctx.turns,
      },
    };
    return {
      version: 1,
      tenant: this.tenant,
      threadId: live.threadId,
      task,
      snapshot: slimSnapshot(live.actor.getPersistedSnapshot()),
      updatedAt: new Date(this.now()).toISOString(),
      owner: this.opts.nodeId,
      ...(outbox.length ? { outbox } : {}),
    };
  }

  private async passivateIdle(): Promise<void> {
    const cutoff = this.now() - this.idleMs;
    for (const live of [...this.threads.values()]) {
      const snap = live.actor.getSnapshot();
      // An open handoff keeps its actor live so its deadline fires on time.
      if (live.lastActive <= cutoff && taskStateOf(snap.value) !== 'working' && !snap.context.handoff) await this.passivate(live);
    }
  }

  /** Commits the state, stops the actor and frees its memory. */
  /** Passivates one live thread by id; false when it is not live here. */
  async passivateThread(threadId: string): Promise<boolean> {
    const live = this.threads.get(threadId);
    if (!live) return false;
    await this.passivate(live);
    return true;
  }

  private async passivate(live: LiveThread): Promise<void> {
    this.scheduleCommit(live);
    await this.flushCommits(live).catch(() => undefined);
    live.stopped = true;
    live.actor.stop();
    if (this.threads.get(live.threadId) === live) {
      this.threads.delete(live.threadId);
      this.passivatedCount++;
    }
  }

  private async callAgent(input: AgentRequestInput): Promise<AgentReply> {
    const threadId = input.message.taskId ?? '';
    const card = this.registry.card(input.agentId);
    const message =
      card && supportsClientRouting(card)
        ? withRoutingRequest(input.message, { agentCards: this.registry.peersOf(input.agentId), sender: input.sender })
        : input.message;
    const headers = {
      [HEADERS.threadId]: threadId,
      [HEADERS.tenant]: this.tenant,
      [HEADERS.hop]: String(input.hop),
      [HEADERS.sender]: input.sender,
      [HEADERS.msgId]: input.message.messageId,
      [HEADERS.taskId]: threadId,
      [HEADERS.contextId]: input.message.contextId ?? threadId,
      [HEADERS.streamTo]: subjects.threadOut(this.tenant, threadId),
    };
    this.log.debug({ thread: threadId, agent: input.agentId, attempt: input.attempt, messageId: input.message.messageId }, 'calling agent');
    let res;
    try {
      res = await this.transport.request(subjects.agentInbox(this.tenant, input.agentId), encodeJson(message), {
        timeoutMs: input.timeoutMs,
        headers,
      });
    } catch (err) {
      this.log.warn({ thread: threadId, agent: input.agentId, attempt: input.attempt, err: (err as Error).message }, 'agent call failed');
      throw err;
    }
    // The thread's clock moves with its events; a reply is one, so route steps get their real time.
    this.threads.get(threadId)?.actor.send({ type: 'troupe.tick', now: this.now() });
    try {
      return decode(AgentReplySchema, res.data, `reply from agent "${input.agentId}"`);
    } catch (err) {
      const error = TroupeError.from(err, 'AGENT_ERROR');
      return { kind: 'error', error: { code: 'AGENT_ERROR', message: `agent "${input.agentId}" sent an invalid reply: ${error.message}` } };
    }
  }

  private async decide(input: PolicyInput): Promise<RouterDecision> {
    if (!this.opts.policy) throw new TroupeError('ROUTER_FAILURE', 'no router policy configured');
    const agents = this.registry.agents().filter((a) => input.agentIds.includes(a.id));
    return this.opts.policy.decide({ message: input.message, agents });
  }
}

/**
 * The record keeps the thread's history and route log once, in the Task; the snapshot's copies are
 * left out on write and put back on read (they are the largest part of a record).
 */
function slimSnapshot(snapshot: unknown): unknown {
  const snap = snapshot as { context?: Record<string, unknown> };
  if (!snap?.context) return snapshot;
  const { history: _h, routeLog: _r, ...context } = snap.context;
  return { ...snap, context: { ...context, [SLIM]: true } };
}

function fullSnapshot(record: ThreadRecord): unknown {
  const snap = record.snapshot as { context?: Record<string, unknown> };
  if (!snap?.context?.[SLIM]) return record.snapshot;
  const { [SLIM]: _s, ...context } = snap.context;
  const routes = record.task.metadata?.[META.routes];
  return { ...snap, context: { ...context, history: record.task.history ?? [], routeLog: Array.isArray(routes) ? routes : [] } };
}

const SLIM = 'troupe/slim';

function stateString(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object') {
    return Object.entries(value)
      .map(([k, v]) => `${k}.${stateString(v)}`)
      .join(',');
  }
  return String(value);
}
