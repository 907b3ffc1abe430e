/**
 * Checkpoints of a thread (time travel): taken after the commit of each turn, read back as listings and
 * views, and forked into new threads.
 *
 * Which writes are checkpoints: a write of the thread at rest whose turns or state differ from the last
 * checkpoint's (live.ts `checkpointMark`, asked by `recordOf`). The mark — the checkpoint's number and what it was
 * taken of — is in the record itself, so the next node to write the thread numbers on from it. The
 * checkpoint is stored after its record's write went through (a turn is never slowed or failed by it; a
 * node that dies in between loses that checkpoint, not the turn), one at a time per thread, in order.
 *
 * A checkpoint copies the record without the catalog of agents (the node gives a thread its catalog when
 * it loads it) and without the outbox (its final events are the answer, which the history holds).
 */
import { createActor } from 'xstate';
import type { Logger } from 'pino';
import type { threadMachine, ThreadConfig } from '../../machines/thread.js';
import { TERMINAL_TASK_STATES, messageText, type Message } from '../../protocol/a2a.js';
import { ANSWER_EXCERPT_CHARS, type CheckpointSummary, type CheckpointTurn, type CheckpointView, type ForkReply } from '../../protocol/checkpoint.js';
import { TroupeError, type ErrorBody } from '../../protocol/errors.js';
import { META, type RouteStep } from '../../protocol/metadata.js';
import type { CheckpointStore, StoredCheckpoint } from '../../store/checkpoints.js';
import type { ThreadRecord, ThreadStore } from '../../store/types.js';
import { metrics } from '../../observability/metrics.js';
import type { LiveThread } from './live.js';
import { fullSnapshot, ownerOfRecord } from './record.js';

/** What a turn that just ended did, from its final status (status.ts keeps it on the live thread). */
export function turnOfFinal(message: Message | undefined, error: ErrorBody | undefined, startedAt: number | undefined, now: number): CheckpointTurn {
  const inReplyTo = message?.metadata?.[META.inReplyTo];
  const route = message?.metadata?.[META.route];
  return {
    ...(typeof inReplyTo === 'string' ? { messageId: inReplyTo } : {}),
    ...(message ? { answerId: message.messageId } : {}),
    hops: Array.isArray(route) ? (route as RouteStep[]) : [],
    ...(error ? { error } : {}),
    ...(startedAt !== undefined ? { startedAt } : {}),
    endedAt: now,
  };
}

export interface CheckpointerOptions {
  tenant: string;
  store: CheckpointStore;
  log: Logger;
  now: () => number;
}

export class Checkpointer {
  /** The checkpoint writes in flight, by thread: each thread's go one at a time. */
  private readonly writing = new Map<string, Promise<void>>();

  constructor(private readonly opts: CheckpointerOptions) {}

  get store(): CheckpointStore {
    return this.opts.store;
  }

  /** Whether commits are marked and checkpoints stored. */
  get on(): boolean {
    return this.opts.store.keep > 0;
  }

  /** After a write of `record` at `revision`: stores it as a checkpoint when it carries a new mark. */
  committed(live: LiveThread, record: ThreadRecord, revision: number): void {
    const mark = record.checkpoint;
    if (!this.on || !mark || mark.n === live.checkpoint?.n) return;
    live.checkpoint = mark;
    const turn = live.lastTurn ?? { hops: [], endedAt: this.opts.now() };
    live.lastTurn = undefined;
    const context = (record.snapshot as { context?: Record<string, unknown> }).context ?? {};
    const checkpoint: StoredCheckpoint = {
      version: 1,
      n: mark.n,
      tenant: this.opts.tenant,
      threadId: live.threadId,
      revision,
      turn: { ...turn, endedAt: Date.parse(record.updatedAt) || turn.endedAt },
      record: {
        ...record,
        snapshot: { ...(record.snapshot as object), context: { ...context, agents: {} } },
        outbox: undefined,
        taken: undefined,
      },
    };
    const before = this.writing.get(live.threadId) ?? Promise.resolve();
    const write = before
      .then(() => this.opts.store.append(checkpoint))
      .then(
        () => metrics.checkpoints.inc({ result: 'ok' }),
        (err: unknown) => {
          metrics.checkpoints.inc({ result: 'error' });
          this.opts.log.warn({ thread: live.threadId, checkpoint: mark.n, err: (err as Error).message }, 'could not store a checkpoint; the turn stands');
        },
      )
      .finally(() => {
        if (this.writing.get(live.threadId) === write) this.writing.delete(live.threadId);
      });
    this.writing.set(live.threadId, write);
  }

  /** Waits for the thread's checkpoint writes in flight (before erasing them). */
  async settled(threadId: string): Promise<void> {
    await this.writing.get(threadId);
  }

  /**
   * A thread's checkpoints, oldest first; with an `owner`, only that owner's thread (anyone else gets
   * THREAD_NOT_FOUND, as for a thread that does not exist). A thread that exists with none: [].
   */
  async list(threadId: string, opts: { owner?: string; threads: ThreadStore }): Promise<StoredCheckpoint[]> {
    const kept = await this.opts.store.list(this.opts.tenant, threadId);
    const latest = kept.at(-1);
    if (latest) {
      if (opts.owner !== undefined && ownerOfRecord(latest.record) !== opts.owner) throw notFound(this.opts.tenant, threadId);
      return kept;
    }
    const stored = await opts.threads.get(this.opts.tenant, threadId);
    if (!stored || (opts.owner !== undefined && ownerOfRecord(stored.record) !== opts.owner)) throw notFound(this.opts.tenant, threadId);
    return [];
  }

  async get(threadId: string, n: number, opts: { owner?: string; threads: ThreadStore }): Promise<StoredCheckpoint> {
    const kept = await this.list(threadId, opts);
    const found = kept.find((c) => c.n === n);
    if (!found) {
      const range = kept.length ? `it keeps ${kept[0]!.n}..${kept.at(-1)!.n}` : 'it has none';
      throw new TroupeError('CHECKPOINT_NOT_FOUND', `thread ${threadId} has no checkpoint ${n}: ${range}`);
    }
    return found;
  }
}

function notFound(tenant: string, threadId: string): TroupeError {
  return new TroupeError('THREAD_NOT_FOUND', `no thread ${threadId} in tenant ${tenant}`);
}

/** A checkpoint as `troupe history` lists it. */
export function summaryOf(c: StoredCheckpoint): CheckpointSummary {
  const task = c.record.task;
  const answer = c.turn.answerId ? task.history?.find((m) => m.messageId === c.turn.answerId) : undefined;
  const text = messageText(answer).replace(/\s+/g, ' ').trim();
  const turns = task.metadata?.[META.turns];
  return {
    n: c.n,
    at: c.record.updatedAt,
    turns: typeof turns === 'number' ? turns : 0,
    state: task.status.state,
    route: c.turn.hops.filter((h) => h.to !== 'user').map((h) => h.to),
    answer: text.length > ANSWER_EXCERPT_CHARS ? `${text.slice(0, ANSWER_EXCERPT_CHARS - 1)}…` : text,
    ...(c.turn.error ? { error: c.turn.error.code } : {}),
    messages: task.history?.length ?? 0,
    ...(c.turn.startedAt !== undefined ? { durationMs: Math.max(0, c.turn.endedAt - c.turn.startedAt) } : {}),
  };
}

/** A checkpoint whole: the thread's machine state, context and messages as they were. */
export function viewOf(c: StoredCheckpoint): CheckpointView {
  const snap = fullSnapshot(c.record) as { value?: unknown; context?: Record<string, unknown> };
  const { history: _h, agents: _a, ...context } = snap.context ?? {};
  const origin = c.record.task.metadata?.[META.forkedFrom] as CheckpointView['forkedFrom'] | undefined;
  return {
    n: c.n,
    threadId: c.threadId,
    at: c.record.updatedAt,
    revision: c.revision,
    state: c.record.task.status.state,
    value: snap.value,
    context,
    history: (c.record.task.history ?? []) as CheckpointView['history'],
    turn: c.turn,
    ...(origin ? { forkedFrom: origin } : {}),
  };
}

/**
 * The record of a thread forked from a checkpoint: the checkpoint's state under a new thread id and
 * context, its origin in the Task's metadata, nothing of the old thread's ingress bookkeeping. A
 * checkpoint where the task had ended forks into a new open thread that starts with its conversation
 * (an ended machine takes no more messages).
 */
export function forkRecord(
  c: StoredCheckpoint,
  opts: { threadId: string; now: number; node: string; machine: typeof threadMachine; config: ThreadConfig },
): { record: ThreadRecord; reply: ForkReply } {
  const { threadId } = opts;
  const at = new Date(opts.now).toISOString();
  const source = c.record;
  const forkedFrom = { threadId: c.threadId, checkpoint: c.n };
  const history = (source.task.history ?? []).map((m) => ({ ...m, taskId: threadId, contextId: threadId }));
  const ended = TERMINAL_TASK_STATES.includes(source.task.status.state) || (source.snapshot as { status?: string }).status === 'done';
  let snapshot: unknown;
  if (ended) {
    const actor = createActor(opts.machine, {
      input: { threadId, tenant: source.tenant, owner: ownerOfRecord(source), contextId: threadId, config: opts.config, agents: {}, now: opts.now, history },
    });
    actor.start();
    snapshot = actor.getPersistedSnapshot();
    actor.stop();
  } else {
    const snap = structuredClone(source.snapshot) as { context: Record<string, unknown> };
    snap.context = { ...snap.context, threadId, contextId: threadId, agents: {} };
    snapshot = snap;
  }
  const state = ended ? 'submitted' : source.task.status.state;
  // An ended task's error, handoff and route log stay with it; an open one's state goes on in the fork.
  const metadata = ended ? { [META.owner]: ownerOfRecord(source) } : { ...source.task.metadata };
  const record: ThreadRecord = {
    version: 1,
    tenant: source.tenant,
    threadId,
    task: {
      kind: 'task',
      id: threadId,
      contextId: threadId,
      status: { state, timestamp: at },
      history,
      ...(source.task.artifacts && !ended ? { artifacts: source.task.artifacts } : {}),
      metadata: { ...metadata, [META.forkedFrom]: forkedFrom },
    },
    snapshot,
    updatedAt: at,
    node: opts.node,
  };
  return { record, reply: { kind: 'fork', threadId, contextId: threadId, state, forkedFrom } };
}
