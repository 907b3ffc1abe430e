/**
 * Masks secrets and personal data in diagnostics (inspect, thread records shown to operators): the
 * context sanitiser with the diagnostics policy — every detector on, everything shown as `[redacted]`,
 * no allow rules. Linear in the size of the value (no pattern backtracks over long word runs), and capped
 * in depth, node count and characters: past a cap a value shows as `[omitted]`.
 */
import { DIAGNOSTICS_POLICY, sanitise } from '../sanitiser/sanitiser.js';

/** A copy with secret-looking keys and values (keys, tokens, cards, IBANs, e-mails, phones) masked, for diagnostics. */
export function redact(value: unknown): unknown {
  return sanitise(value, { policy: DIAGNOSTICS_POLICY }).value;
}

/**
 * `redact`, keeping the exact string `id` wherever the value had it: a thread's own id (its task's `id`,
 * its messages' `taskId`) is what the operator asked for by, not a secret, though it looks like a token
 * to the detectors.
 */
export function redactKeeping(value: unknown, id: string): unknown {
  return restore(value, redact(value), id, 0);
}

function restore(original: unknown, redacted: unknown, id: string, depth: number): unknown {
  if (original === id) return id;
  if (depth > 64 || typeof original !== 'object' || original === null || typeof redacted !== 'object' || redacted === null) return redacted;
  if (Array.isArray(original) !== Array.isArray(redacted)) return redacted;
  if (Array.isArray(original)) return (redacted as unknown[]).map((r, i) => restore(original[i], r, id, depth + 1));
  const out: Record<string, unknown> = { ...(redacted as Record<string, unknown>) };
  for (const key of Object.keys(out)) if (Object.hasOwn(original, key)) out[key] = restore((original as Record<string, unknown>)[key], out[key], id, depth + 1);
  return out;
}
