/**
 * The sanitiser's detectors: hand-written scanners that find e-mail addresses, phone numbers, card and
 * IBAN numbers, API keys and tokens, private keys and `password: …` style secrets in a string.
 *
 * Why scanners and not regular expressions: V8's regex engine backtracks, and a global search retries a
 * pattern at every start position, so even a simple pattern like `[\w.+-]+@[\w-]+\.\w+` does O(n²) work on
 * a long word run (issue 7: 100 KB of text blocked a node for 141 s). Every detector here is one
 * left-to-right pass whose cursor never moves back; where it looks around a position (an e-mail's local
 * part before an `@`, a phone keyword before a number, an IBAN's fixed length after a country code) the
 * look is capped by a constant, and whatever a detector consumes it skips. So each pass is O(n), and the
 * number of passes is fixed. Every pass counts the characters it examines in `work.steps`, which is how
 * the tests prove linearity on adversarial 1 MB inputs without looking at a clock.
 *
 * The detectors live by kind: `credentials.ts`, `personal-data.ts`, `emails.ts`, `entropy.ts`, on the character classes
 * of `chars.ts`. Each detector returns its spans sorted by start; `sanitiser.ts` merges the lists of all detectors and
 * resolves overlaps by the priority order of DETECTORS.
 */
import type { Detector, DetectorId } from './detector-types.js';
import { detectApiKeys, detectBearerTokens, detectJwts, detectPrivateKeys, detectSecretValues } from './credentials.js';
import { detectCards, detectIbans, detectPhones } from './personal-data.js';
import { detectEmails } from './emails.js';
import { detectHighEntropy } from './entropy.js';

export { DETECTORS, type Detector, type DetectorId, type Span, type Work } from './detector-types.js';
export { isSecretName } from './credentials.js';
export { ibanChecksumValid, luhn } from './personal-data.js';
// ---- all detectors ----

export const DETECTOR_FUNCTIONS: Readonly<Record<DetectorId, Detector>> = {
  privateKey: detectPrivateKeys,
  jwt: detectJwts,
  apiKey: detectApiKeys,
  bearer: detectBearerTokens,
  secret: detectSecretValues,
  card: detectCards,
  iban: detectIbans,
  email: detectEmails,
  phone: detectPhones,
  highEntropy: detectHighEntropy,
};
