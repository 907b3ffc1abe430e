import { describe, expect, it } from 'vitest';
import { HISTORY_IDS_FROM, HistoryIds, historyHas } from '../src/actors/threads/history-ids.js';
import type { Message } from '../src/protocol/a2a.js';
import { userMessage } from '../src/sdk/client.js';

/** A small deterministic generator, so a failure can be run again. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('HistoryIds', () => {
  it('answers as a walk of the history does, over 5,000 random changes of a thread history', () => {
    const next = random(23);
    const ids = new HistoryIds();
    // Ids are drawn from a small pool, so some repeat (an agent may reuse one) and most questions hit.
    const pool = Array.from({ length: 120 }, (_, i) => `m-${i}`);
    const pick = () => pool[Math.floor(next() * pool.length)]!;
    let history: Message[] = [];
    const limit = 50;
    for (let step = 0; step < 5_000; step++) {
      const r = next();
      if (r < 0.6) history = [...history, userMessage('x', { messageId: pick() })].slice(-limit);
      else if (r < 0.7) history = [...history, userMessage('a', { messageId: pick() }), userMessage('b', { messageId: pick() })].slice(-limit);
      else if (r < 0.78 && history.length > 0) {
        // An element replaced: a new object in the same place.
        const at = Math.floor(next() * history.length);
        history = history.map((m, i) => (i === at ? userMessage('y', { messageId: pick() }) : m));
      } else if (r < 0.83) history = history.slice(Math.floor(next() * (history.length + 1)));
      else if (r < 0.86) history = history.map((m) => userMessage('copy', { messageId: m.messageId }));
      else if (r < 0.87) history = [];
      // Unchanged otherwise: the same array asked again.
      for (let q = 0; q < 4; q++) {
        const id = pick();
        expect(ids.has(history, id), `step ${step}: ${id}`).toBe(history.some((m) => m.messageId === id));
      }
    }
  });

  it('a live thread holds none while its history is short', () => {
    const live: { historyIds?: HistoryIds } = {};
    const short = Array.from({ length: HISTORY_IDS_FROM - 1 }, (_, i) => userMessage('x', { messageId: `s-${i}` }));
    expect(historyHas(live, short, 's-3')).toBe(true);
    expect(historyHas(live, short, 'nope')).toBe(false);
    expect(live.historyIds).toBeUndefined();
    const long = [...short, userMessage('x', { messageId: 'last' })];
    expect(historyHas(live, long, 'last')).toBe(true);
    expect(historyHas(live, long, 's-0')).toBe(true);
    expect(historyHas(live, long, 'nope')).toBe(false);
    expect(live.historyIds).toBeInstanceOf(HistoryIds);
  });
});
