/**
 * Commits thread state to the store: compare-and-set on the revision this node last wrote, changes of
 * one step coalesced into one write, final answers handed on (published, or to the delivery that waits
 * for them) only after the write that includes them.
 * The host asks for a write when the thread comes to rest (a turn ended: one write per turn) and when a
 * final answer is waiting; a turn in progress is not written — its input is still unacknowledged in the
 * inbound stream, so a crash mid-turn replays it on the next owner instead of resuming a half-turn.
 *
 * What a failed write means decides what happens next:
 * - STORE_CONFLICT: someone else wrote the thread (another node took it over). The stored state wins:
 *   the live actor is dropped, never written over it; the next message reloads the stored state. Unless
 *   the stored record is a write of this one that timed out (the server took it, its answer came too
 *   late): then the next write goes on its revision (`landed`).
 * - TRANSPORT_ERROR (the store is unreachable, e.g. during a NATS restart): the write is retried with
 *   backoff and the actor stays live (dropping it would lose the turn's answer).
 * - PAYLOAD_TOO_LARGE (the record does not fit in one store value): the oldest history is left out of
 *   the record (the Task keeps the latest messages) and the write is retried.
 * - anything else (a state that cannot be serialized): the actor is dropped and the user is told.
 */
import type { Logger } from 'pino';
import { TroupeError } from '../../protocol/errors.js';
import type { TaskStatusUpdateEvent } from '../../protocol/a2a.js';
import type { ThreadRecord, ThreadStore } from '../../store/types.js';
import type { LiveThread } from './live.js';
import { recordOf } from './record.js';
import { metrics } from '../../observability/metrics.js';

export interface CommitterOptions {
  tenant: string;
  nodeId: string;
  store: ThreadStore;
  now: () => number;
  log: Logger;
  /** The stored state won (or the state cannot be stored): drop the live actor. */
  drop: (live: LiveThread, error: TroupeError) => void;
  /** How long a write may keep failing on transport errors before the actor is dropped. Default 30 s. */
  retryForMs?: number;
  /**
   * Whether the thread's state is worth a write now (at rest, or with an answer waiting); a write
   * scheduled mid-turn is skipped and the change stays pending. Forced writes (passivation) ignore it.
   */
  shouldWrite: (live: LiveThread) => boolean;
  /**
   * After every successful write, with the final events it included (the host publishes or hands them on);
   * `wrote` is false when there was nothing new to write (the store still holds another write); else
   * `written` is the record written and its revision.
   */
  committed: (live: LiveThread, finals: TaskStatusUpdateEvent[], wrote: boolean, written?: { record: ThreadRecord; revision: number }) => void;
  /** Mark the writes that are checkpoints (time travel: `recordOf`). */
  checkpoints?: boolean;
}

const MAX_TRIMS = 12;

export class Committer {
  private readonly retryForMs: number;
  private stopping = false;

  constructor(private readonly opts: CommitterOptions) {
    this.retryForMs = opts.retryForMs ?? 30_000;
  }

  /** No more retries: the host is stopping. */
  stop(): void {
    this.stopping = true;
  }

  schedule(live: LiveThread, opts: { force?: boolean } = {}): void {
    if (opts.force) live.forceWrite = true;
    if (live.dirty || live.failed || live.stopped) return;
    live.dirty = true;
    // One macrotask of slack lets the changes of one step (a reply, its routing, the answer) share a write.
    live.commit = live.commit.then(() => new Promise<void>((resolve) => setImmediate(resolve))).then(() => this.write(live));
  }

  /** Waits until the thread's latest state is committed; throws when the actor was dropped. */
  async flush(live: LiveThread): Promise<void> {
    while (live.dirty) await live.commit;
    await live.commit;
    if (live.failed) throw live.failed;
  }

  private async write(live: LiveThread): Promise<void> {
    live.dirty = false;
    if (live.failed) return;
    // Mid-turn by now (a new thread that just got its first message): the write waits for the rest.
    if (!live.forceWrite && live.outbox.length === 0 && !this.opts.shouldWrite(live)) return;
    live.forceWrite = false;
    // Nothing new: no write.
    if (!live.changed && live.outbox.length === 0 && live.revision !== undefined) {
      this.opts.committed(live, [], false);
      return;
    }
    const outbox: TaskStatusUpdateEvent[] = [];
    // Visible while the write is in flight: a delivery of one of their messages arriving meanwhile waits for them.
    live.committing = outbox;
    try {
      await this.attempt(live, outbox);
    } finally {
      live.committing = undefined;
    }
  }

  /**
   * After a conflict that follows a write which timed out: the revision of the stored record when it is
   * that write (this node's, with that write's `updatedAt`, newer than the revision this node knew), so
   * the next write goes on it. A write that failed on the wire may still have been taken by the server; it
   * is this node's own, not another node's, and the live actor stays.
   */
  private async landed(live: LiveThread, unanswered: readonly string[]): Promise<number | undefined> {
    const stored = await this.opts.store.get(this.opts.tenant, live.threadId).catch(() => undefined);
    if (!stored || stored.record.node !== this.opts.nodeId || !unanswered.includes(stored.record.updatedAt)) return undefined;
    return live.revision === undefined || stored.revision > live.revision ? stored.revision : undefined;
  }

  private async attempt(live: LiveThread, outbox: TaskStatusUpdateEvent[]): Promise<void> {
    const started = this.opts.now();
    let trims = 0;
    /** The `updatedAt` of each write that failed on a transport error here: the server may have taken it. */
    let unanswered: string[] | undefined;
    for (let attempt = 0; ; attempt++) {
      outbox.push(...live.outbox.splice(0));
      live.changed = false;
      let record: ReturnType<typeof recordOf> | undefined;
      try {
        record = recordOf(live, { tenant: this.opts.tenant, node: this.opts.nodeId, now: this.opts.now(), checkpoints: this.opts.checkpoints === true });
        live.revision = live.revision === undefined ? await this.opts.store.create(record) : await this.opts.store.update(record, live.revision);
        metrics.kvWrites.inc({ result: 'ok' });
        this.opts.committed(live, outbox, true, { record, revision: live.revision });
        return;
      } catch (err) {
        const error = TroupeError.from(err, 'TRANSPORT_ERROR');
        if (error.code === 'STORE_CONFLICT' && unanswered) {
          const landed = await this.landed(live, unanswered);
          if (landed !== undefined) {
            this.opts.log.warn({ thread: live.threadId, revision: landed }, 'a write of this thread that timed out had landed; writing on its revision');
            live.revision = landed;
            continue;
          }
        }
        metrics.kvWrites.inc({ result: error.code === 'STORE_CONFLICT' ? 'conflict' : 'error' });
        if (error.code === 'STORE_CONFLICT') metrics.kvConflicts.inc();
        if (error.code === 'PAYLOAD_TOO_LARGE' && trims < MAX_TRIMS) {
          trims++;
          const history = live.actor.getSnapshot().context.history.length;
          live.historyTrimmed = Math.min(Math.max(1, history - 1), live.historyTrimmed + Math.max(1, Math.ceil((history - live.historyTrimmed) / 2)));
          this.opts.log.warn(
            { thread: live.threadId, left: history - live.historyTrimmed },
            'thread record too large for the store; leaving older history out of it',
          );
          continue;
        }
        const transient = error.code === 'TRANSPORT_ERROR' && !this.stopping && this.opts.now() - started < this.retryForMs && !live.stopped;
        if (transient) {
          if (record) (unanswered ??= []).push(record.updatedAt);
          const delay = Math.min(2_000, 50 * 2 ** Math.min(attempt, 6));
          this.opts.log.warn({ thread: live.threadId, err: error.message, retryInMs: delay }, 'could not commit thread state; retrying');
          await new Promise((resolve) => setTimeout(resolve, delay));
          continue;
        }
        live.outbox.unshift(...outbox);
        live.failed = error;
        this.opts.log.error({ err: error.message, code: error.code, thread: live.threadId }, 'could not commit thread state; dropping the live actor');
        this.opts.drop(live, error);
        return;
      }
    }
  }
}
