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
