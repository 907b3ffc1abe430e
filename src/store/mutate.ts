/** Read-modify-write of one thread record with optimistic concurrency. */
import { TroupeError, isTroupeError } from '../protocol/index.js';
import type { StoredThread, ThreadRecord, ThreadStore } from './types.js';

export interface MutateOptions {
  /** Reads and writes before giving up with STORE_CONFLICT. Default 20. */
  maxAttempts?: number;
}

const DEFAULT_MAX_ATTEMPTS = 20;

/**
 * Reads the record, applies `fn`, and writes the result with compare-and-set (create when there was no
 * record). When another writer got in between, it reloads and applies `fn` again to the fresh record:
 * it never overwrites a write it has not seen. So `fn` must be a pure function of its argument, as it
 * may run several times. It receives a private copy it may change and return.
 *
 * A corrupt record is not retried or overwritten: its STORE_CORRUPT goes to the caller.
 */
export async function mutate(
  store: ThreadStore,
  tenant: string,
  threadId: string,
  fn: (current: ThreadRecord | undefined) => ThreadRecord,
  opts: MutateOptions = {},
): Promise<StoredThread> {
  const maxAttempts = opts.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  if (!Number.isSafeInteger(maxAttempts) || maxAttempts < 1) throw new RangeError(`maxAttempts must be >= 1, got ${maxAttempts}`);
  for (let attempt = 1; ; attempt++) {
    const current = await store.get(tenant, threadId);
    const next = fn(current?.record);
    if (next.tenant !== tenant || next.threadId !== threadId) {
      // Writing it would be a blind write to another key, outside the CAS this function promises.
      throw new TroupeError('INVALID_MESSAGE', `mutate of "${tenant}.${threadId}" returned the record of "${next.tenant}.${next.threadId}"`);
    }
    try {
      const revision = current ? await store.update(next, current.revision) : await store.create(next);
      return { record: next, revision };
    } catch (err) {
      if (!isTroupeError(err) || err.code !== 'STORE_CONFLICT') throw err;
      if (attempt >= maxAttempts) {
        throw new TroupeError('STORE_CONFLICT', `thread record "${tenant}.${threadId}" kept changing; gave up after ${attempt} attempts`, {
          key: `${tenant}.${threadId}`,
          attempts: attempt,
        });
      }
      // Jittered backoff so contenders that collided do not collide again in lockstep.
      await sleep(Math.random() * Math.min(100, 2 ** attempt));
    }
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
