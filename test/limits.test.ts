/** The nesting check every decoded payload goes through (protocol/limits.ts). */
import { describe, expect, it } from 'vitest';
import { LIMITS, checkDepth, exceedsDepth } from '../src/protocol/limits.js';
import { TroupeError } from '../src/protocol/errors.js';

/** A value with `levels` containers, one inside the other (the innermost holds a string). */
const nested = (levels: number, open: (inner: unknown) => unknown): unknown => {
  let v: unknown = 'leaf';
  for (let i = 0; i < levels; i++) v = open(v);
  return v;
};

describe('exceedsDepth', () => {
  it.each([
    ['arrays', 1, (inner: unknown) => [inner]],
    ['objects', 1, (inner: unknown) => ({ a: inner })],
    ['objects holding arrays', 2, (inner: unknown) => ({ a: [1, inner] })],
  ])('allows %s up to the limit and refuses one level more', (_what, levelsEach, open) => {
    expect(exceedsDepth(nested(4, open), 4 * levelsEach)).toBe(false);
    expect(exceedsDepth(nested(4, open), 4 * levelsEach - 1)).toBe(true);
  });

  it('counts levels the same way at the default limit', () => {
    expect(exceedsDepth(nested(LIMITS.depth, (v) => [v]))).toBe(false);
    expect(exceedsDepth(nested(LIMITS.depth + 1, (v) => [v]))).toBe(true);
  });

  it('finds the deep branch beside shallow ones, in arrays and objects', () => {
    const deep = nested(5, (v) => ({ x: v }));
    expect(exceedsDepth({ a: 1, b: [2, 3], c: { d: deep } }, 5)).toBe(true);
    expect(exceedsDepth([1, 'two', null, [deep]], 5)).toBe(true);
    expect(exceedsDepth({ a: 1, b: [2, 3], c: { d: 'e' } }, 5)).toBe(false);
  });

  it('reads own keys only, and scalars are never deep', () => {
    const proto = { inherited: nested(10, (v) => [v]) };
    expect(exceedsDepth(Object.create(proto), 2)).toBe(false);
    for (const scalar of [null, undefined, 0, 'text', true]) expect(exceedsDepth(scalar, 0)).toBe(false);
    expect(exceedsDepth({}, 0)).toBe(true);
  });

  it('answers a value nested 200,000 deep without overflowing the stack', () => {
    expect(exceedsDepth(nested(200_000, (v) => [v]))).toBe(true);
    expect(exceedsDepth(JSON.parse('['.repeat(200_000) + ']'.repeat(200_000)))).toBe(true);
  });

  it('walks 100,000 shallow values and says no', () => {
    expect(exceedsDepth({ items: Array.from({ length: 100_000 }, (_, i) => ({ i, tags: ['a', 'b'] })) })).toBe(false);
  });

  it('checkDepth throws INVALID_MESSAGE naming the value and the limit', () => {
    expect(() =>
      checkDepth(
        nested(4, (v) => [v]),
        'the metadata',
        3,
      ),
    ).toThrow(TroupeError);
    expect(() =>
      checkDepth(
        nested(4, (v) => [v]),
        'the metadata',
        3,
      ),
    ).toThrow('the metadata nests deeper than 3 levels');
    expect(() =>
      checkDepth(
        nested(3, (v) => [v]),
        'the metadata',
        3,
      ),
    ).not.toThrow();
  });
});
