/** Masks secrets in diagnostics (inspect, thread records shown to operators). */
const SECRET_KEY = /(pass(word)?|secret|token|api[-_]?key|authorization|credential)/i;
const SECRET_VALUE = /\b(sk-[A-Za-z0-9]{10,}|[0-9]{13,19})\b|[\w.+-]+@[\w-]+\.[\w.-]+/g;

/** A copy with secret-looking keys and values (keys, card numbers, emails) masked, for diagnostics. */
export function redact(value: unknown): unknown {
  if (typeof value === 'string') return value.replace(SECRET_VALUE, '[redacted]');
  if (Array.isArray(value)) return value.map(redact);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, SECRET_KEY.test(k) ? '[redacted]' : redact(v)]));
  }
  return value;
}
