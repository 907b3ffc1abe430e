/** The recent-events log as a dormant thread keeps it: packed into one string and read back as it was. */
import { describe, expect, it } from 'vitest';
import { packEvents, unpackEvents } from '../src/actors/threads/event-log.js';
import type { RecentEventEntry } from '../src/actors/threads/live.js';

describe('the packed recent-events log', () => {
  it('reads back the entries it packed, in order, with their times, types and children', () => {
    const t0 = Date.parse('2026-11-28T07:00:00.000Z');
    const entries: RecentEventEntry[] = [
      { at: t0, type: 'troupe.user.message', child: undefined },
      { at: t0 + 3, type: 'xstate.promise.resolve', child: 'request' },
      { at: t0 + 3, type: 'xstate.done.actor.request', child: 'agentCall' },
      // A clock that went back is kept as it was.
      { at: t0 - 10, type: 'xstate.done.actor.agentCall', child: undefined },
      // Separators and other characters in a name.
      { at: t0 + 86_400_000, type: 'odd;type:with~chars é', child: 'a:b;c' },
    ];
    const packed = packEvents(entries)!;
    expect(typeof packed).toBe('string');
    expect(unpackEvents(packed)).toEqual(entries);
    expect(packEvents([])).toBeUndefined();
    expect(unpackEvents(undefined)).toEqual([]);
  });

  it('is a few characters an entry, and still exact once the table of names is full', () => {
    const t0 = 1_795_849_031_460;
    const turn = (i: number): RecentEventEntry[] => [
      { at: t0 + i * 40, type: 'troupe.user.message', child: undefined },
      { at: t0 + i * 40 + 7, type: 'xstate.promise.resolve', child: 'request' },
      { at: t0 + i * 40 + 7, type: 'xstate.done.actor.request', child: 'agentCall' },
      { at: t0 + i * 40 + 8, type: 'xstate.done.actor.agentCall', child: undefined },
    ];
    const log = Array.from({ length: 6 }, (_, i) => turn(i))
      .flat()
      .slice(-25);
    expect(packEvents(log)!.length).toBeLessThan(10 * log.length);
    // More distinct names than the table keeps: the later ones are written out, and read back the same.
    const many = Array.from({ length: 5_000 }, (_, i): RecentEventEntry => ({
      at: t0 + i,
      type: `custom.event.${i}`,
      child: i % 2 ? `child-${i}` : undefined,
    }));
    expect(unpackEvents(packEvents(many))).toEqual(many);
  });
});
