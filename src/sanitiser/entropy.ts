/** The long high-entropy strings detector: random-looking tokens no other detector names. */
import type { Detector, Span } from './detector-types.js';
import { MINUS, SLASH, forEachRun, isBase64Char, isDigit, isHex, isLower, isUpper } from './chars.js';

// ---- long high-entropy strings ----

const entropyCounts = new Int32Array(128);

/**
 * A base64-alphabet run of 32-512 characters that mixes upper case, lower case and digits, is not all
 * hex (hashes and commit ids are not secrets), and whose Shannon entropy is near that of random text.
 * Only where that is safe: hex secrets and shorter tokens are left to the named detectors.
 */
export const detectHighEntropy: Detector = (text, work) => {
  const spans: Span[] = [];
  forEachRun(text, work, isBase64Char, (start, end) => {
    let s = start;
    let e = end;
    // Slashes and dashes at the edges belong to paths and flags, not to the secret.
    while (s < e && (text.charCodeAt(s) === SLASH || text.charCodeAt(s) === MINUS)) s++;
    while (e > s && text.charCodeAt(e - 1) === SLASH) e--;
    const length = e - s;
    if (length < 32 || length > 512) return;
    // Publishable keys are public by design (Stripe's pk_…).
    if (text.startsWith('pk_live_', s) || text.startsWith('pk_test_', s)) return;
    let upper = false,
      lower = false,
      digit = false,
      allHex = true;
    const touched: number[] = [];
    for (let i = s; i < e; i++) {
      work.steps++;
      const c = text.charCodeAt(i);
      upper ||= isUpper(c);
      lower ||= isLower(c);
      digit ||= isDigit(c);
      allHex &&= isHex(c);
      if (entropyCounts[c] === 0) touched.push(c);
      entropyCounts[c]!++;
    }
    let entropy = 0;
    for (const c of touched) {
      const p = entropyCounts[c]! / length;
      entropy -= p * Math.log2(p);
      entropyCounts[c] = 0;
    }
    const threshold = Math.min(4.5, Math.log2(length) - 0.7);
    if (upper && lower && digit && !allHex && entropy >= threshold) spans.push({ start: s, end: e, detector: 'highEntropy' });
  });
  return spans;
};
