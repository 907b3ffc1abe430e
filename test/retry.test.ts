/**
 * retryTransient: the one backoff every JetStream retry here uses. What it tries again, and when it stops.
 */
import { describe, expect, it } from 'vitest';
import { retryTransient } from '../src/transport/jetstream/retry.js';

/** A step that fails with `errors` in turn, then returns 'done'; counts its attempts. */
function failing(...errors: Error[]) {
  let attempts = 0;
  return {
    get attempts() {
      return attempts;
    },
    step: async () => {
      const err = errors[attempts++];
      if (err) throw err;
      return 'done';
    },
  };
}

describe('retryTransient', () => {
  it('tries a timeout again, and gives up at once on what waiting will not change', async () => {
    const s = failing(new Error('TimeoutError: timeout'));
    await expect(retryTransient(s.step, {})).resolves.toBe('done');
    expect(s.attempts).toBe(2);
    const refused = failing(new Error('jetstream is not enabled'));
    await expect(retryTransient(refused.step, {})).rejects.toThrow('jetstream is not enabled');
    expect(refused.attempts).toBe(1);
  });

  it('with `transient`, the caller says what is worth another attempt', async () => {
    // A node that holds leases in JetStream knows it is enabled: "not enabled" means "not answering yet".
    const s = failing(new Error('jetstream is not enabled'), new Error('jetstream is not enabled'));
    const retried: number[] = [];
    await expect(retryTransient(s.step, { transient: () => true, onRetry: (attempt) => retried.push(attempt) })).resolves.toBe('done');
    expect(retried).toEqual([1, 2]);
    const never = failing(new Error('TimeoutError: timeout'));
    await expect(retryTransient(never.step, { transient: () => false })).rejects.toThrow('timeout');
    expect(never.attempts).toBe(1);
  });

  it('stops when the caller no longer needs the result, or after its attempts', async () => {
    const s = failing(new Error('timeout'), new Error('timeout'), new Error('timeout'));
    let wanted = true;
    await expect(retryTransient(s.step, { keepTrying: () => wanted, onRetry: () => (wanted = false) })).rejects.toThrow('timeout');
    expect(s.attempts).toBe(2);
    const capped = failing(new Error('timeout'), new Error('timeout'), new Error('timeout'));
    await expect(retryTransient(capped.step, { attempts: 2 })).rejects.toThrow('timeout');
    expect(capped.attempts).toBe(2);
  });
});
