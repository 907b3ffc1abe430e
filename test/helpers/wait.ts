/** Small waiting and byte helpers shared by the suites. Waits poll briefly and always have a deadline. */
import type { InboundMessage } from '../../src/transport/types.js';

const enc = new TextEncoder();
const dec = new TextDecoder();

export const bytes = (s: string): Uint8Array => enc.encode(s);
export const text = (m: InboundMessage): string => dec.decode(m.data);
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Resolves with the ms it waited once `cond()` holds; throws naming `what` after `timeoutMs`. */
export async function waitFor(cond: () => boolean, what: string, timeoutMs = 5_000): Promise<number> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(5);
  }
  return Date.now() - start;
}

/** Polls `get` until it returns something other than undefined or false; throws naming `what` after `timeoutMs`. */
export async function waitUntil<T>(
  get: () => Promise<T | undefined | false> | T | undefined | false,
  what: string,
  timeoutMs = 10_000,
  intervalMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await get();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}

/**
 * Like waitUntil, for work that drains at whatever pace the machine allows: it gives up only when `progress()`
 * (a counter of what got done) has not moved for `stallMs`, so a busy machine is slow, never a failure, and
 * a stuck one fails within stallMs of getting stuck.
 */
export async function waitWhileProgressing<T>(
  get: () => Promise<T | undefined | false> | T | undefined | false,
  progress: () => number,
  what: string,
  stallMs = 60_000,
  intervalMs = 100,
): Promise<T> {
  let last = progress();
  let movedAt = Date.now();
  for (;;) {
    const value = await get();
    if (value !== undefined && value !== false) return value;
    const now = progress();
    if (now !== last) {
      last = now;
      movedAt = Date.now();
    } else if (Date.now() - movedAt > stallMs) {
      throw new Error(`no progress for ${stallMs} ms waiting for ${what} (progress counter at ${now})`);
    }
    await sleep(intervalMs);
  }
}
