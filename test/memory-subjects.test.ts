/**
 * The memory transport's subject rules, as nats-server's: what may be published to, and which
 * subscriptions a subject reaches. `subjectMatches` walks a subject in place; here it is held against
 * the token-by-token rule on random subjects and patterns.
 */
import { describe, expect, it } from 'vitest';
import { MemoryBus, MemoryTransport, subjectMatches } from '../src/transport/memory.js';

/** The rule, on split tokens: `*` is one token, `>` one or more at the end. */
function reference(pattern: readonly string[], subject: readonly string[]): boolean {
  for (let i = 0; i < pattern.length; i++) {
    if (pattern[i] === '>') return subject.length > i;
    if (i >= subject.length) return false;
    if (pattern[i] !== '*' && pattern[i] !== subject[i]) return false;
  }
  return pattern.length === subject.length;
}

/** A small deterministic generator (so a failure names its seed). */
function rng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('memory transport subjects', () => {
  it('matches a subject as the token-by-token rule does, for 20,000 random subjects and patterns', () => {
    const next = rng(25);
    const words = ['a', 'b', 'ab', 'troupe', 'demo', 'in', 'x1'];
    const pick = <T>(xs: readonly T[]) => xs[Math.floor(next() * xs.length)]!;
    for (let i = 0; i < 20_000; i++) {
      const subject = Array.from({ length: 1 + Math.floor(next() * 5) }, () => pick(words));
      const pattern = Array.from({ length: 1 + Math.floor(next() * 5) }, () => (next() < 0.25 ? '*' : pick(words)));
      if (next() < 0.3) pattern[pattern.length - 1] = '>';
      expect(subjectMatches(pattern, subject.join('.')), `${pattern.join('.')} ~ ${subject.join('.')}`).toBe(reference(pattern, subject));
    }
  });

  it('refuses to publish to a wildcard, an empty token or whitespace, and says which', () => {
    const t = new MemoryTransport({ bus: new MemoryBus() });
    const data = new Uint8Array();
    for (const subject of ['a.*', '>', 'a.>.b', '*.b']) expect(() => t.publish(subject, data), subject).toThrow(/cannot publish to a wildcard/);
    for (const subject of ['', '.a', 'a.', 'a..b', 'a b', 'a.\tb'])
      expect(() => t.publish(subject, data), JSON.stringify(subject)).toThrow(/empty token or whitespace/);
    // A wildcard character inside a token is an ordinary character, as on a NATS server.
    expect(() => t.publish('a.b*.c>', data)).not.toThrow();
  });

  it('delivers once to each plain subscriber and to one member of each queue group, and counts them', async () => {
    const bus = new MemoryBus();
    const t = new MemoryTransport({ bus });
    const got: string[] = [];
    t.subscribe('troupe.demo.in.*.*', () => void got.push('wild'));
    t.subscribe('troupe.demo.>', () => void got.push('tail'));
    t.subscribe('troupe.demo.in.u.t1', () => void got.push('exact'));
    t.subscribe('troupe.demo.in.*.*', () => void got.push('q1'), { queue: 'q' });
    t.subscribe('troupe.demo.in.u.t1', () => void got.push('q2'), { queue: 'q' });
    t.subscribe('troupe.demo.in.*', () => void got.push('never'));
    t.subscribe('troupe.demo.in.u.t1.more', () => void got.push('never'));
    const receivers = bus.publish({ subject: 'troupe.demo.in.u.t1', data: new Uint8Array(), headers: {} });
    expect(receivers).toBe(4);
    await new Promise((r) => setImmediate(r));
    expect(got.filter((g) => !g.startsWith('q')).sort()).toEqual(['exact', 'tail', 'wild']);
    expect(got.filter((g) => g.startsWith('q'))).toHaveLength(1);
    await t.close();
  });
});
