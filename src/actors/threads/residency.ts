/**
 * Which threads live in this process, and in what form: a live actor (in a Map, not as children of one
 * parent: XState copies the children map on every spawn), a dormant record kept as JSON, or nothing (in
 * the store only). Loads a thread on its first message (created, woken, or rehydrated from the store),
 * drops an actor whose state could not be kept, passivates idle threads, wakes a dormant thread at its
 * deadline (a handoff's, a tool approval's), and takes threads on and off this node when partitions move. Also what
 * `troupe ps` and `troupe inspect` read of them (views.ts makes the views).
 *
 * After `dormantMs` at rest a thread's actor is stopped and its committed record kept in memory as JSON
 * (woken without a store read), after `idleMs` that goes too (rehydrated from the store). A thread in a
 * handoff, or waiting for a tool approval, is never passivated: dormant, it is woken at the deadline.
 */
import { createActor, type AnyActorRef, type InspectionEvent } from 'xstate';
import type { Logger } from 'pino';
import { taskStateOf, type threadMachine, type ThreadConfig, type ThreadStatusEmitted } from '../../machines/thread.js';
import type { Message, TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent } from '../../protocol/a2a.js';
import type { ActorInfo } from '../../protocol/ctl.js';
import { TroupeError } from '../../protocol/errors.js';
import { isValidId } from '../../protocol/ids.js';
import { META } from '../../protocol/metadata.js';
import type { InspectionPublisher } from '../../inspection/inspection.js';
import type { ThreadStore } from '../../store/types.js';
import { subjects } from '../../transport/subjects.js';
import type { Registry } from '../registry.js';
import type { Committer } from './committer.js';
import { packEvents, unpackEvents } from './event-log.js';
import { TAKEN_KEPT, atRest, hasDeadline, resting, type DormantThread, type LiveThread, type RecentEvent, type ThreadActor } from './live.js';
import { dormantJson, fromDormant, fullSnapshot, ownerOfRecord, recordOf, wakeAtOf, wakeFromDormant, type NodeGivens } from './record.js';
import { endTurn } from './turns.js';
import { actorsOf, inspectDormant, inspectThread } from './views.js';

const EVENT_LOG_LIMIT = 25;
/** The longest a Node timer waits; a later deadline wakes the thread early and it goes dormant again. */
const MAX_TIMER_MS = 2 ** 31 - 1;
/**
 * A thread at rest this long gives back the JSON of its history and route log kept for its next write
 * (`LiveThread.encoded`): a thread that talks without pause writes its record without encoding them again,
 * one that waits for a person holds only its objects (at the history limit the JSON is about 15 KB).
 */
const KEEP_ENCODED_MS = 10_000;

export interface ResidencyOptions {
  tenant: string;
  nodeId: string;
  store: ThreadStore;
  registry: Registry;
  log: Logger;
  now: () => number;
  config: ThreadConfig;
  /** What this node gives back to a dormant thread it wakes (record.ts, `wakeFromDormant`). */
  givens: NodeGivens;
  /** See `ThreadHostOptions.idleMs`, `ThreadHostOptions.dormantMs`. */
  idleMs: number;
  dormantMs: number;
  /** The thread machine with this host's actors provided. */
  machine: typeof threadMachine;
  inspection: InspectionPublisher;
  committer: Committer;
  /** The live threads (the host's map: it reads them too). */
  threads: Map<string, LiveThread>;
  /** A status the thread machine emitted (status.ts). */
  publishStatus: (live: LiveThread, event: ThreadStatusEmitted) => void;
  publishToOwner: (live: LiveThread, event: TaskStatusUpdateEvent | TaskArtifactUpdateEvent) => void;
}

/** What a thread is created from when a message starts it: its owner and context, and the task it continues. */
export interface ThreadCreation {
  owner: string;
  contextId?: string | undefined;
  /** An ended task of the same owner and context whose conversation the new thread starts with. */
  continues?: string;
}

export class Residency {
  private readonly tenant: string;
  private readonly threads: Map<string, LiveThread>;
  /** Threads whose actors were stopped at rest, as their committed records (`dormantMs`). */
  private readonly dormant = new Map<string, DormantThread>();
  /** The timers that wake dormant threads at a deadline of theirs: a handoff's, an approval's (see `hasDeadline`). */
  private readonly wakes = new Map<string, NodeJS.Timeout>();
  private readonly loading = new Map<string, Promise<LiveThread>>();
  /** Threads being erased (`erase`): a message for one waits until it is gone, then starts a new thread. */
  private readonly erasing = new Map<string, Promise<void>>();
  private readonly store: ThreadStore;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly idleMs: number;
  private readonly dormantMs: number;
  private readonly committer: Committer;
  private passivator?: NodeJS.Timeout;
  private passivatedTotal = 0;

  constructor(private readonly opts: ResidencyOptions) {
    this.tenant = opts.tenant;
    this.threads = opts.threads;
    this.store = opts.store;
    this.log = opts.log;
    this.now = opts.now;
    this.idleMs = opts.idleMs;
    this.dormantMs = opts.dormantMs;
    this.committer = opts.committer;
  }

  /** Starts the housekeeping of idle threads. */
  start(): void {
    this.passivator = setInterval(
      () => void this.housekeeping().catch((err: unknown) => this.log.error({ err }, 'housekeeping of idle threads failed')),
      Math.min(...[this.idleMs, this.dormantMs].filter((ms) => ms > 0), KEEP_ENCODED_MS),
    );
    this.passivator.unref();
  }

  stopHousekeeping(): void {
    if (this.passivator) clearInterval(this.passivator);
  }

  /** Passivates every live thread and forgets the dormant ones (the host is stopping). */
  async unloadAll(): Promise<void> {
    await Promise.all([...this.threads.values()].map((t) => this.passivate(t)));
    for (const threadId of [...this.dormant.keys()]) this.forgetDormant(threadId);
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
    return kept ? inspectDormant(actorId, fromDormant(kept, this.opts.givens), this.opts.nodeId, unpackEvents(kept.events)) : undefined;
  }

  /** Threads this host passivated (and has not rehydrated since), dormant ones included. */
  passivatedCount(): number {
    return this.passivatedTotal;
  }

  /** Passivated threads whose records this host keeps in memory (`dormantMs`). */
  dormantCount(): number {
    return this.dormant.size;
  }

  /**
   * After taking over threads (a partition of them), loads the ones that need an actor now: a turn in
   * progress (its agent call re-runs with the same idempotency key and finishes the turn), an open
   * handoff or a tool approval waited on (their deadlines must keep running). `over()` ends the pass early (the node stops, or no longer
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
        const meta = stored?.record.task.metadata;
        if (!meta?.[META.handoff] && !meta?.[META.awaitingApproval]) continue;
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
        throw new TroupeError(
          'THREAD_BUSY',
          `thread ${threadId} is in the middle of a turn: cancel it (troupe send --cancel --thread ${threadId}) or delete it once it is answered`,
        );
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

  // ---- loading and owning --------------------------------------------------------------------------

  notFound(threadId: string): TroupeError {
    return new TroupeError('THREAD_NOT_FOUND', `no thread ${threadId} in tenant ${this.tenant}`);
  }

  /** "Not yours" looks exactly like "does not exist". */
  checkOwner(actual: string, claimed: string, threadId: string): void {
    if (actual !== claimed) throw this.notFound(threadId);
  }

  async obtain(threadId: string, opts: { create?: ThreadCreation } = {}): Promise<LiveThread> {
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
    return (prior.record.task.history ?? []).slice(-this.opts.config.historyLimit);
  }

  private async load(threadId: string, create: ThreadCreation | undefined): Promise<LiveThread> {
    const kept = this.forgetDormant(threadId);
    const woken = kept ? { ...wakeFromDormant(kept, this.opts.givens), revision: kept.revision } : undefined;
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
      ...(stored?.record.checkpoint ? { checkpoint: stored.record.checkpoint } : {}),
      ...forkedFromOf(stored?.record),
    };
    const publish = this.opts.inspection.observe({ subject: subjects.inspectThread(this.tenant, threadId), rootId: threadId, threadId });
    const inspect = (ev: InspectionEvent) => {
      try {
        publish(ev);
        this.onInspection(live, ev);
      } catch (err) {
        this.log.error({ err, thread: threadId }, 'inspection hook failed');
      }
    };
    live.actor = stored
      ? createActor(this.opts.machine, { snapshot: fullSnapshot(stored.record) as never, id: threadId, inspect, input: undefined as never })
      : createActor(this.opts.machine, {
          id: threadId,
          inspect,
          input: {
            threadId,
            tenant: this.tenant,
            owner: create!.owner,
            ...(create?.contextId ? { contextId: create.contextId } : {}),
            config: this.opts.config,
            agents: this.opts.registry.directory(),
            now: this.now(),
            ...(history?.length ? { history } : {}),
          },
        });
    live.actor.on('troupe.thread.status', (event) => {
      try {
        this.opts.publishStatus(live, event);
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
    live.actor.send({ type: 'troupe.agents', agents: this.opts.registry.directory() });
    restoring = false;
    return live;
  }

  /** Drops a live actor whose state could not be kept; the user hears why unless the stored state simply won. */
  drop(live: LiveThread, error: TroupeError): void {
    live.failed ??= error;
    live.stopped = true;
    for (const w of live.waiters.splice(0)) w.reject(error);
    try {
      live.actor.stop();
    } catch {
      // already stopped
    }
    if (this.threads.get(live.threadId) === live) this.threads.delete(live.threadId);
    for (const id of [...live.turns.keys()]) endTurn(live, this.now, id, 'error', error);
    if (error.code === 'STORE_CONFLICT') return;
    const ctx = live.actor.getSnapshot().context;
    const inReplyTo = ctx.turn?.userMessageId;
    this.opts.publishToOwner(live, {
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

  private onInspection(live: LiveThread, ev: InspectionEvent): void {
    if (ev.type !== '@xstate.event' || !live.actor) return;
    const type = ev.event.type;
    if (type === 'troupe.tick' || type === 'troupe.agents' || type.startsWith('xstate.init')) return;
    live.events.push({ at: this.now(), type, child: ev.actorRef === live.actor ? undefined : (ev.actorRef as AnyActorRef).id });
    if (live.events.length > EVENT_LOG_LIMIT) live.events.shift();
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
    // Not a thread with a deadline (a handoff's, an approval's): it waits here for it.
    if (this.idleMs > 0)
      for (const [threadId, kept] of this.dormant) if (kept.lastActive <= now - this.idleMs && !this.wakes.has(threadId)) this.dormant.delete(threadId);
    if (this.idleMs > 0 || this.dormantMs > 0) await this.passivateIdle(now);
  }

  private async passivateIdle(now: number): Promise<void> {
    for (const live of [...this.threads.values()]) {
      if (!resting(live)) continue;
      if (this.idleMs > 0 && live.lastActive <= now - this.idleMs && !hasDeadline(live)) await this.passivate(live);
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
    return !this.opts.inspection.switch.isOn(live.threadId);
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
      for (const id of [...live.turns.keys()]) endTurn(live, this.now, id, 'moved');
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
   * Wakes a dormant thread at its deadline, as its live actor's timer would have fired: the load re-arms
   * the deadline, which has passed, so the handoff ends and control goes back, or the waiting approval is
   * refused.
   */
  private armWake(threadId: string, at: number): void {
    const timer = setTimeout(
      () => {
        this.wakes.delete(threadId);
        if (!this.dormant.has(threadId)) return;
        this.obtain(threadId).catch((err: unknown) =>
          this.log.error({ err: (err as Error).message, thread: threadId }, 'could not wake a dormant thread at its deadline'),
        );
      },
      Math.min(Math.max(0, at - this.now()), MAX_TIMER_MS),
    );
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
    const wakeAt = wakeAtOf(record);
    const events = packEvents(live.events);
    return { copy: { ...dormantJson(record, this.opts.givens), revision: live.revision, lastActive: live.lastActive, ...(events ? { events } : {}) }, wakeAt };
  }
}

/** The origin a forked thread's record names (`troupe/forkedFrom`), for the live thread to keep writing it. */
function forkedFromOf(record: { task: { metadata?: Record<string, unknown> | undefined } } | undefined): Pick<LiveThread, 'forkedFrom'> {
  const origin = record?.task.metadata?.[META.forkedFrom] as { threadId?: unknown; checkpoint?: unknown } | undefined;
  return typeof origin?.threadId === 'string' && typeof origin.checkpoint === 'number'
    ? { forkedFrom: { threadId: origin.threadId, checkpoint: origin.checkpoint } }
    : {};
}
