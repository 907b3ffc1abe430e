/**
 * Whether a thread's history holds a message, asked of every message delivered to it (a second copy of
 * one the thread has is not a new turn). Walking the history each time reads every message object of it:
 * on a busy node these are cold, spread over the old generation, and at the history limit (50 messages)
 * the walk cost about 16 µs of a durable turn's ~900 µs of CPU (bench/PROFILE.md). A long
 * history's ids are kept instead, and followed as the history changes: the thread's machine makes a new
 * array around the same message objects (new ones at the end, the oldest dropped at the limit), so
 * following it reads only the messages that came or went.
 */
import type { Message } from '../../protocol/a2a.js';
import { overlapOf } from '../../store/codec.js';

/** Below this many messages the history is walked (a live thread holds no index: its memory counts). */
export const HISTORY_IDS_FROM = 16;

export class HistoryIds {
  #of: readonly Message[] = [];
  /** How many messages of `#of` have each id (an agent may reuse one; a message of the thread's own never does). */
  readonly #count = new Map<string, number>();

  /** Whether `history` holds a message with this id. */
  has(history: readonly Message[], messageId: string): boolean {
    this.follow(history);
    return this.#count.has(messageId);
  }

  /**
   * Takes `history` as the thread's history now. The host calls it after each commit too, so that the
   * array kept is the thread's own: an older one would keep alive the messages pruned since, and the
   * bytes of its JSON (codec.ts `preEncoded`, by array), about 19 KiB a thread at the history limit.
   */
  follow(history: readonly Message[]): void {
    if (history === this.#of) return;
    const old = this.#of;
    const { from, same } = overlapOf(old, history);
    if (same === 0) {
      this.#count.clear();
    } else {
      for (let i = 0; i < from; i++) this.#drop(old[i]!.messageId);
      for (let i = from + same; i < old.length; i++) this.#drop(old[i]!.messageId);
    }
    for (let i = same; i < history.length; i++) this.#count.set(history[i]!.messageId, (this.#count.get(history[i]!.messageId) ?? 0) + 1);
    this.#of = history;
  }

  #drop(messageId: string): void {
    const n = this.#count.get(messageId) ?? 0;
    if (n > 1) this.#count.set(messageId, n - 1);
    else this.#count.delete(messageId);
  }
}

/**
 * Whether a live thread's history holds a message: a walk of a short history, the thread's `HistoryIds`
 * (made when first needed) for a long one.
 */
export function historyHas(live: { historyIds?: HistoryIds }, history: readonly Message[], messageId: string): boolean {
  if (history.length < HISTORY_IDS_FROM) return history.some((m) => m.messageId === messageId);
  return (live.historyIds ??= new HistoryIds()).has(history, messageId);
}
