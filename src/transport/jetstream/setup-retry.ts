/**
 * Setting up streams and buckets while a cluster recovers.
 *
 * Right after a nats-server restarts, or while a cluster elects a JetStream meta leader or a stream
 * leader, JetStream API requests time out or come back "temporarily unavailable" for a few seconds.
 * A node that starts in that window (a restart after a crash, a rolling deploy) waits and asks again,
 * rather than exiting with a bare "timeout". Anything else (a permission error, a stream with the wrong
 * configuration, JetStream not enabled) fails at once: waiting would not change it.
 */
import { errors } from '@nats-io/nats-core';
import { JetStreamApiError, JetStreamError } from '@nats-io/jetstream';
import type { Logger } from 'pino';
import { TroupeError } from '../../protocol/errors.js';

/** How long a node keeps asking before it gives up on a setup step. */
export const DEFAULT_SETUP_DEADLINE_MS = 60_000;

/** JetStream's "system temporarily unavailable" (no meta leader yet) and "cluster not available". */
const UNAVAILABLE_CODES = new Set([10008, 10009]);

/** True for a failure that a recovering cluster produces and that may pass by itself. */
export function isTransientJetStreamError(err: unknown): boolean {
  if (err instanceof errors.TimeoutError || err instanceof errors.NoRespondersError) return true;
  if (err instanceof errors.RequestError) return err.cause instanceof errors.TimeoutError || err.isNoResponders();
  if (err instanceof JetStreamApiError) return UNAVAILABLE_CODES.has(err.code) || err.status === 503;
  // The JetStream client reports a 503 reply (no responders, a leader election) as a JetStreamError too.
  if (err instanceof JetStreamError) return (err as { code?: unknown }).code === 503 || /\b503\b|no responders|unavailable/i.test(err.message);
  if (err instanceof TroupeError && err.cause !== undefined) return isTransientJetStreamError(err.cause);
  return false;
}

export interface SetupRetryOptions {
  /** Give up after this long (ms); default 60 s. */
  deadlineMs?: number;
  log?: Pick<Logger, 'warn'>;
  /** The clock and the pause between attempts, for tests. */
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
}

/**
 * Runs `step` (an idempotent setup request) until it succeeds, fails for a reason that will not pass,
 * or the deadline comes; pauses 250 ms, doubling to 2 s, between attempts. The last error, wrapped,
 * says what was being set up and what to check.
 */
export async function retrySetup<T>(what: string, step: () => Promise<T>, opts: SetupRetryOptions = {}): Promise<T> {
  const deadlineMs = opts.deadlineMs ?? DEFAULT_SETUP_DEADLINE_MS;
  const now = opts.now ?? Date.now;
  const sleep = opts.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const started = now();
  let pause = 250;
  for (let attempt = 1; ; attempt++) {
    try {
      return await step();
    } catch (err) {
      if (!isTransientJetStreamError(err)) throw err;
      const waited = now() - started;
      if (waited + pause > deadlineMs) {
        const e = new TroupeError(
          'TRANSPORT_ERROR',
          `JetStream did not answer while ${what} (${attempt} attempts over ${Math.round(waited / 1000)} s; last: ${(err as Error).message}): ` +
            'check that every nats-server runs with JetStream enabled and that most servers of the cluster are up and routed to each other',
          { attempts: attempt },
        );
        e.cause = err;
        throw e;
      }
      opts.log?.warn({ attempt, waitedMs: waited, err: (err as Error).message }, `JetStream did not answer while ${what}; asking again (a cluster electing a leader takes a few seconds)`);
      await sleep(pause);
      pause = Math.min(pause * 2, 2_000);
    }
  }
}
