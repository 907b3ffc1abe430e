/** A thread actor held by a ThreadHost, with the bookkeeping of its commits. */
import type { Actor } from 'xstate';
import { taskStateOf, type threadMachine, type ThreadStatusEmitted } from '../../machines/thread.js';
import type { TroupeError } from '../../protocol/errors.js';
import type { Artifact, Message, TaskState, TaskStatusUpdateEvent } from '../../protocol/a2a.js';
import type { Span } from '../../observability/tracing.js';
import type { ArrayJson } from '../../store/codec.js';
import type { HistoryIds } from './history-ids.js';
import type { CheckpointTurn } from '../../protocol/checkpoint.js';

/** A turn in progress as metrics and traces see it: when it (and its current step) started, its spans. */
export interface TurnWatch {
  startedAt: number;
  /** Start of the current step: the turn start, then each forward to another agent. */
  stepAt: number;
  /** With tracing on: the turn's span and its hop spans by hop number. */
  span?: Span;
  hops?: Map<number, Span>;
}

export type ThreadActor = Actor<typeof threadMachine>;

export interface RecentEvent {
  at: string;
  type: string;
  summary?: string;
}

/**
 * One entry of a thread's recent-events log as kept: every live thread holds up to 25, so the time is a
 * number and a child is its id; the `RecentEvent` view is made when someone asks (`troupe inspect`).
 */
export interface RecentEventEntry {
  at: number;
  type: string;
  /** The child actor's id, for an event a child took. */
  child: string | undefined;
}

/**
 * A thread at rest whose actor was stopped (`ThreadHost`, `dormantMs`): its committed record as JSON (a
 * string: one byte a character for the Latin-1 most records are, no buffer objects around it) and the
 * revision it was written at, read back into an actor on its next message.
 */
export interface DormantThread {
  json: string;
  revision: number;
  /** When the thread last did something (its `idleMs` counts from here). */
  lastActive: number;
  /**
   * A long history's messages and the route log as JSON, kept apart from `json`, with where each element
   * ends in their UTF-8 bytes (record.ts `dormantJson`): the woken thread's first write encodes only what is
   * new in them.
   */
  arrays?: { history: string; historyEnds: string; routes: string; routesEnds: string };
  /** Its recent-events log, packed (event-log.ts `packEvents`); absent when empty. */
  events?: string;
}

export interface LiveThread {
  threadId: string;
  actor: ThreadActor;
  lastActive: number;
  /** The last events, for `troupe inspect` (bounded). */
  events: RecentEventEntry[];
  lastStatus?: ThreadStatusEmitted;
  /**
   * When the task's status last changed (the timestamp of its last status event, or of the first read
   * that saw a new state): every read of an unchanged task reports the same `status.timestamp`.
   */
  statusAt?: { state: TaskState; at: string };
  /** Serialises commits of this thread. */
  commit: Promise<void>;
  /** A commit is scheduled and has not started yet. */
  dirty: boolean;
  /** The store revision of the last commit (the record's etag); undefined until first written. */
  revision?: number;
  /** Set when a commit lost a compare-and-set: the stored state wins, this actor is dropped. */
  failed?: TroupeError;
  /** Passivated or dropped: nothing more is committed from this actor. */
  stopped?: boolean;
  /** Set while it is being passivated (its last commit, then the stop): whoever needs the thread waits and loads it again. */
  passivating?: Promise<void>;
  /** The state changed since the last commit. */
  changed: boolean;
  /** The next write happens whatever the state (passivation, stop). */
  forceWrite?: boolean;
  /** Final status events waiting for the commit that includes them; published right after it. */
  outbox: TaskStatusUpdateEvent[];
  /** The final events of the write in flight (taken from the outbox), until it settles. */
  committing?: TaskStatusUpdateEvent[];
  /**
   * The stream copies of the last messages the thread took (durable ingress; the newest last, bounded;
   * kept in the record for the next owner): when, and under which Nats-Msg-Id, each was stored. A second
   * copy under the same id within the stream's duplicate window is the broker's duplicate detection
   * missing it (see `deliver`).
   */
  taken?: Array<{ messageId: string; seq: number; at: number; id: string }>;
  /** Messages whose delivery waits for their turn to be answered and committed (durable ingress). */
  waiters: Array<{ messageId: string; events: TaskStatusUpdateEvent[]; resolve: (events: TaskStatusUpdateEvent[]) => void; reject: (err: Error) => void }>;

  /**
   * The JSON of the history and route log the last record held, so that the next write encodes only
   * what is new in them (made at the first write).
   */
  encoded?: { history: ArrayJson; routes: ArrayJson };
  /** The ids of a long history's messages (history-ids.ts), made when first asked. */
  historyIds?: HistoryIds;
  /** History entries left out of the record because it would not fit in one store value. */
  historyTrimmed: number;
  /**
   * What agents streamed, accumulated by artifact id (chunks with `append` extend their artifact), kept
   * with the Task and committed with the turn's next write. Bounded: see `appendArtifact`.
   */
  artifacts: Artifact[];
  /**
   * Turns accepted and not answered yet, by user messageId, oldest first: turns run one at a time in
   * that order, so the first is the one running.
   */
  turns: Map<string, TurnWatch>;
  /** The node that wrote the stored state this actor holds (this node, once it committed). */
  committedBy?: string;
  /** Inbound stream sequence of the last message accepted (durable ingress): anything at or below is a redelivery. */
  inboundSeq?: number;
  /** The thread's latest checkpoint: its number and what it was taken of (checkpoints.ts `checkpointMark`). */
  checkpoint?: { n: number; key: string };
  /** The thread and checkpoint a forked thread came from (kept in its Task's metadata). */
  forkedFrom?: { threadId: string; checkpoint: number };
  /** What the last turn did, from its final status, for the checkpoint its commit takes. */
  lastTurn?: CheckpointTurn;
}

/** Stream copies remembered per thread (`LiveThread.taken`, kept in its record). */
export const TAKEN_KEPT = 8;

/** The message is the thread's current turn or waits in its queue. */
export function inTurnOf(ctx: { turn?: { userMessageId: string } | undefined; pending: readonly Message[] }, messageId: string): boolean {
  return ctx.turn?.userMessageId === messageId || ctx.pending.some((m) => m.messageId === messageId);
}

/** A thread in the middle of a turn (its task state `working`). */
export function isWorking(value: unknown): boolean {
  return taskStateOf(value) === 'working';
}

/** No turn in progress: the thread waits for the user (or has ended). */
export function resting(live: LiveThread): boolean {
  return !isWorking(live.actor.getSnapshot().value);
}

/**
 * A handoff is open, or an agent waits for a tool approval: the thread acts at a deadline of its own, so
 * it is never passivated either (`wakeAtOf` its record says when a dormant one is woken).
 */
export function hasDeadline(live: LiveThread): boolean {
  const context = live.actor.getSnapshot().context;
  return context.handoff !== undefined || context.approval !== undefined;
}

/** Between turns (waiting for the user) or ended: a state worth a write. Not `submitted`: no turn yet. */
export function atRest(snapshot: { status: string; value: unknown }): boolean {
  if (snapshot.status !== 'active') return true;
  const state = taskStateOf(snapshot.value);
  return state !== 'working' && state !== 'submitted';
}

/**
 * The checkpoint mark a write of the thread carries (time travel, checkpoints.ts): a new checkpoint's when
 * the thread is at rest and its turns, state or history differ from the last checkpoint's, else the last one's.
 */
export function checkpointMark(
  live: LiveThread,
  snapshot: { status: string; value: unknown; context: { turns: number; history: unknown[] } },
): LiveThread['checkpoint'] {
  if (!atRest(snapshot)) return live.checkpoint;
  const key = `${snapshot.context.turns}:${taskStateOf(snapshot.value)}:${snapshot.context.history.length}`;
  if (live.checkpoint?.key === key) return live.checkpoint;
  return { n: (live.checkpoint?.n ?? 0) + 1, key };
}
