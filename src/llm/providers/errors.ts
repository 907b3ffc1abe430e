/**
 * Turns what an SDK throws into a ModelCallError: retryable for 408, 409, 429, 5xx, timeouts, lost
 * connections and streams that break off — unless text already reached the user, since a retry would repeat it. Known secrets are
 * cut out of the message (some servers echo part of a rejected key).
 */
import OpenAI from 'openai';
import { ModelCallError } from '../../model/types.js';

const RETRYABLE_STATUS = new Set([408, 409, 429]);

function retryAfterMs(headers: unknown): number | undefined {
  const get = (name: string): string | null | undefined =>
    headers && typeof (headers as { get?: unknown }).get === 'function' ? (headers as Headers).get(name) : undefined;
  const ms = Number(get('retry-after-ms'));
  if (Number.isFinite(ms) && ms >= 0 && get('retry-after-ms') !== null && get('retry-after-ms') !== undefined) return ms;
  const raw = get('retry-after');
  if (raw === null || raw === undefined) return undefined;
  const seconds = Number(raw);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(raw);
  return Number.isFinite(date) ? Math.max(0, date - Date.now()) : undefined;
}

/** Replaces every occurrence of each secret (at least 4 characters long) in `text`. */
function scrub(text: string, secrets: readonly (string | undefined)[]): string {
  let out = text;
  for (const secret of secrets) if (secret && secret.length >= 4) out = out.split(secret).join('[redacted]');
  return out;
}

/** `abortError`: the class the provider's SDK throws when the caller aborts (OpenAI's is known here). */
export function toModelCallError(
  err: unknown,
  where: string,
  secrets: readonly (string | undefined)[],
  streamed: boolean,
  abortError: abstract new (...args: never[]) => Error = OpenAI.APIUserAbortError,
): ModelCallError {
  if (err instanceof ModelCallError) return err;
  const e = err as { name?: string; status?: unknown; headers?: unknown; message?: string };
  const message = scrub(`${where}: ${e?.message ?? String(err)}`, secrets);
  const status = typeof e?.status === 'number' ? e.status : undefined;
  const aborted = err instanceof OpenAI.APIUserAbortError || err instanceof abortError || e?.name === 'AbortError';
  // Without an HTTP status it is the connection: refused, timed out (APIConnectionError in both SDKs), or a
  // stream that broke off ("terminated"). Worth another try, unless the caller aborted.
  const retryableKind = !aborted && (status === undefined || RETRYABLE_STATUS.has(status) || status >= 500);
  const after = status !== undefined ? retryAfterMs(e.headers) : undefined;
  const note = streamed && retryableKind ? ' (after part of the answer was streamed: not retried)' : '';
  return new ModelCallError(`${message}${note}`, retryableKind && !streamed, status, after, { cause: err });
}
