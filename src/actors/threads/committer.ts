/**
 * Commits thread state to the store: compare-and-set on the revision this node last wrote, changes of
 * one step coalesced into one write, final answers published only after the write that includes them
 * (an outbox in the record covers a crash in between).
 *
 * What a failed write means decides what happens next:
 * - STORE_CONFLICT: someone else wrote the thread (another node took it over). The stored state wins:
 *   the live actor is dropped, never written over it; the next message reloads the stored state.
 * - TRANSPORT_ERROR (the store is unreachable, e.g. during a NATS restart): the write is retried with
 *   backoff and the actor stays live. Dropping it would make the reload publish the stored outbox again,
 *   i.e. answers the user already has.
 * - PAYLOAD_TOO_LARGE (the record does not fit in one store value): the oldest history is left out of
 *   the record (the Task keeps the latest messages) and the write is retried.
 * - anything else (a state that cannot be serialized): the actor is dropped and the user is told.
 *
 * After the outbox is published, the next write clears it ("these were published"), so a reload later
 * does not publish them again. It is scheduled at once: a node killed between the publish and that
 * write (a window of one KV write) is the only way an answer goes out twice, and then it carries the
 * same `troupe/inReplyTo`, so clients keep one.
 */
import type { Logger } from 'pino';
import { TroupeError } from '../../protocol/errors.js';
import type { TaskStatusUpdateEvent } from '../../protocol/a2a.js';
import type { ThreadStore } from '../../store/types.js';
import type { LiveThread } from './live.js';
import { recordOf } from './record.js';

export interface CommitterOptions {
  tenant: string;
  nodeId: string;
  store: ThreadStore;
  now: () => number;
  log: Logger;
  /** Publishes a committed final event to the thread's owner. */
  publish: (live: LiveThread, event: TaskStatusUpdateEvent) => void;
  /** The stored state won (or the state cannot be stored): drop the live actor. */
  drop: (live: LiveThread, error: TroupeError) => void;
  /** How long a write may keep failing on transport errors before the actor is dropped. Default 30 s. */
  retryForMs?: number;
  /** Delay before the write that clears a published outbox. Default 0: the next macrotask. */
  outboxClearMs?: number;
}

const MAX_TRIMS = 12;

export class Committer {
  private readonly retryForMs: number;
  private readonly outboxClearMs: number;
  private stopping = false;

  constructor(private readonly opts: CommitterOptions) {
    this.retryForMs = opts.retryForMs ?? 30_000;
    this.outboxClearMs = opts.outboxClearMs ?? 0;
  }

  /** No more retries: the host is stopping. */
  stop(): void {
    this.stopping = true;
  }

  schedule(live: LiveThread): void {
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
    // Nothing new, and no published outbox left in the stored record to clear: no write.
    if (!live.changed && live.outbox.length === 0 && live.written === 0 && live.revision !== undefined) return;
    const outbox: TaskStatusUpdateEvent[] = [];
    const started = this.opts.now();
    let trims = 0;
    for (let attempt = 0; ; attempt++) {
      outbox.push(...live.outbox.splice(0));
      live.changed = false;
      try {
        const record = recordOf(live, { tenant: this.opts.tenant, node: this.opts.nodeId, now: this.opts.now(), outbox });
        live.revision = live.revision === undefined ? await this.opts.store.create(record) : await this.opts.store.update(record, live.revision);
        live.written = outbox.length;
        for (const event of outbox) this.opts.publish(live, event);
        if (outbox.length > 0) this.clearOutboxSoon(live);
        return;
      } catch (err) {
        const error = TroupeError.from(err, 'TRANSPORT_ERROR');
        if (error.code === 'PAYLOAD_TOO_LARGE' && trims < MAX_TRIMS) {
          trims++;
          const history = live.actor.getSnapshot().context.history.length;
          live.historyTrimmed = Math.min(Math.max(1, history - 1), live.historyTrimmed + Math.max(1, Math.ceil((history - live.historyTrimmed) / 2)));
          this.opts.log.warn({ thread: live.threadId, left: history - live.historyTrimmed }, 'thread record too large for the store; leaving older history out of it');
          continue;
        }
        const transient = error.code === 'TRANSPORT_ERROR' && !this.stopping && this.opts.now() - started < this.retryForMs && !live.stopped;
        if (transient) {
          const delay = Math.min(2_000, 50 * 2 ** Math.min(attempt, 6));
          this.opts.log.warn({ thread: live.threadId, err: error.message, retryInMs: delay }, 'could not commit thread state; retrying');
          await new Promise((resolve) => setTimeout(resolve, delay));
          continue;
        }
        // Give back what was not published, so whoever reloads the thread sees it in the stored outbox.
        live.outbox.unshift(...outbox);
        live.failed = error;
        this.opts.log.error({ err: error.message, code: error.code, thread: live.threadId }, 'could not commit thread state; dropping the live actor');
        this.opts.drop(live, error);
        return;
      }
    }
  }

  private clearOutboxSoon(live: LiveThread): void {
    if (this.outboxClearMs <= 0) {
      this.schedule(live);
      return;
    }
    const timer = setTimeout(() => {
      if (live.written > 0 && !live.stopped && !live.failed) this.schedule(live);
    }, this.outboxClearMs);
    timer.unref();
  }
}
