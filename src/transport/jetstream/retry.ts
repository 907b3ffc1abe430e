/**
 * JetStream calls tried again while a cluster recovers.
 *
 * Right after a nats-server restarts, or while a cluster elects a JetStream meta leader or a stream
 * leader, JetStream API requests time out or come back "temporarily unavailable" for a few seconds.
 * Setting up streams and buckets (a node starting after a crash, a rolling deploy), making a partition's
 * consumer and listing a partition's threads after a takeover wait and ask again rather than fail.
 * Anything else (a permission error, a stream with the wrong configuration, JetStream not enabled) fails
 * at once: waiting would not change it.
 */
import type { Logger } from 'pino';
import { JetStreamApiError } from '@nats-io/jetstream';
import { TroupeError } from '../../protocol/errors.js';

/** How long a node keeps asking before it gives up on a setup step. */
const DEFAULT_SETUP_DEADLINE_MS = 60_000;

/**
 * Placing a replicated stream failed for want of servers: a cluster that has just started, before its meta
 * layer knows every peer (nats-server 2.10 answers "no suitable peers for placement", code 10005), or with
 * servers down ("insufficient resources", 10023). Both pass as servers join.
 */
function isPlacementError(err: unknown): boolean {
  return err instanceof JetStreamApiError && (err.code === 10005 || err.code === 10023 || /no suitable peers|insufficient resources/i.test(err.message));
}

/**
 * "stream not found" from a step that makes its stream when missing (a bucket's create-or-bind): a cluster
 * recovering its quorum answers it for a stream that exists or was just made (a node started while two
 * servers of three are coming back gets it), so such a step asks again.
 */
export function isStreamNotFound(err: unknown): boolean {
  return (err instanceof JetStreamApiError && err.code === 10059) || (err instanceof Error && /stream not found/i.test(err.message));
}

/**
 * What a create-or-bind step (it makes its stream or bucket when missing) asks again: the transient failures,
 * and "stream not found", which from such a step is the cluster recovering.
 */
export function isCreateOrBindTransient(err: unknown): boolean {
  return isTransientJetStreamError(err) || isStreamNotFound(err);
}

/** A JetStream call that failed because the cluster is electing or unreachable for now, not because it was refused. */
export function isTransientJetStreamError(err: unknown): boolean {
  if (err instanceof JetStreamApiError) return err.status === 503 || /temporarily unavailable/i.test(err.message) || isPlacementError(err);
  const text = err instanceof Error ? `${err.name} ${err.message}` : String(err);
  return /timeout|timed out|no responders|temporarily unavailable|disconnect|reconnect/i.test(text);
}

export interface TransientRetryOptions {
  /** Give up after this many attempts. */
  attempts?: number;
  /** Give up once the next pause would end more than this many ms after the first attempt. */
  deadlineMs?: number;
  /** Asked before each further attempt: false gives up (the caller no longer needs the result). */
  keepTrying?: () => boolean;
  /** Told of each failed attempt that will be tried again. */
  onRetry?: (attempt: number, err: unknown, waitedMs: number) => void;
  /** Which failures are worth another attempt; default `isTransientJetStreamError`. */
  transient?: (err: unknown) => boolean;
}

/**
 * Runs `step` (idempotent) until it succeeds, fails for a reason that will not pass, or a limit comes;
 * pauses 250 ms, doubling to 2 s, between attempts. Throws the last error.
 */
export async function retryTransient<T>(step: () => Promise<T>, opts: TransientRetryOptions): Promise<T> {
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    try {
      return await step();
    } catch (err) {
      const waited = Date.now() - started;
      const pause = Math.min(2_000, 250 * 2 ** (attempt - 1));
      const giveUp =
        !(opts.transient ?? isTransientJetStreamError)(err) ||
        (opts.attempts !== undefined && attempt >= opts.attempts) ||
        (opts.deadlineMs !== undefined && waited + pause > opts.deadlineMs) ||
        (opts.keepTrying !== undefined && !opts.keepTrying());
      if (giveUp) throw err;
      opts.onRetry?.(attempt, err, waited);
      await new Promise((r) => setTimeout(r, pause));
    }
  }
}

/**
 * A setup step (creating or opening a stream or bucket), tried again for up to `deadlineMs` (default
 * 60 s) while JetStream does not answer, each retry logged as a warning. Past the deadline the error says
 * what was being set up and what to check.
 */
export async function retrySetup<T>(
  what: string,
  step: () => Promise<T>,
  opts: { deadlineMs?: number | undefined; log?: Pick<Logger, 'warn'> | undefined; transient?: (err: unknown) => boolean },
): Promise<T> {
  const transient = opts.transient ?? isTransientJetStreamError;
  let attempts = 1;
  const started = Date.now();
  try {
    return await retryTransient(step, {
      deadlineMs: opts.deadlineMs ?? DEFAULT_SETUP_DEADLINE_MS,
      transient,
      onRetry: (attempt, err, waitedMs) => {
        attempts = attempt + 1;
        opts.log?.warn(
          { attempt, waitedMs, err: (err as Error).message },
          `JetStream did not answer while ${what}; asking again (a cluster electing a leader takes a few seconds)`,
        );
      },
    });
  } catch (err) {
    if (!transient(err)) throw err;
    throw new TroupeError(
      'TRANSPORT_ERROR',
      `JetStream did not answer while ${what} (${attempts} attempts over ${Math.round((Date.now() - started) / 1000)} s; last: ${(err as Error).message}): ` +
        'check that every nats-server runs with JetStream enabled and that most servers of the cluster are up and routed to each other' +
        (isPlacementError(err) ? ' (a stream or bucket of N replicas needs N JetStream servers that know each other)' : ''),
      { attempts },
      { cause: err },
    );
  }
}
