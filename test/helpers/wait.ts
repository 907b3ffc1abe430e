/** Small waiting and byte helpers shared by the suites. Waits poll briefly and always have a deadline. */
import type { InboundMessage } from '../../src/transport/types.js';

const enc = new TextEncoder();
const dec = new TextDecoder();

export const bytes = (s: string): Uint8Array => enc.encode(s);
export const text = (m: InboundMessage): string => dec.decode(m.data);
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Resolves once `cond()` holds; throws naming `what` after `timeoutMs`. */
export async function waitFor(cond: () => boolean, what: string, timeoutMs = 3_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}
