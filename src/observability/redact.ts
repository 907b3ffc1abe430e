/**
 * Masks secrets and personal data in diagnostics (inspect, thread records shown to operators): the
 * context sanitiser with the diagnostics policy — every detector on, everything shown as `[redacted]`,
 * no allow rules. Linear in the size of the value (the old pattern was quadratic on long word runs,
 * issue 7), and capped in depth, node count and characters: past a cap a value shows as `[omitted]`.
 */
import { DIAGNOSTICS_POLICY, sanitise } from '../sanitiser/sanitiser.js';

/** A copy with secret-looking keys and values (keys, tokens, cards, IBANs, e-mails, phones) masked, for diagnostics. */
export function redact(value: unknown): unknown {
  return sanitise(value, { policy: DIAGNOSTICS_POLICY }).value;
}
