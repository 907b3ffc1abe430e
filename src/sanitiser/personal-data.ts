/**
 * Personal-data detectors: payment card numbers (Luhn), IBANs (mod 97) and phone numbers (e-mail addresses:
 * `emails.ts`).
 */
import type { Detector, Span, Work } from './detector-types.js';
import {
  CLOSE_PAREN,
  COLON,
  COMMA,
  DOT,
  MINUS,
  OPEN_PAREN,
  PLUS,
  SLASH,
  SPACE,
  forEachRun,
  isAlnum,
  isAlpha,
  isDigit,
  isGroupSpace,
  isUpper,
  isWord,
} from './chars.js';

// ---- payment card numbers ----

/** Luhn's checksum over the digits, incrementally: `doubledFromLeftEven` is right when the count is even. */
interface LuhnSums {
  doubleEven: number;
  doubleOdd: number;
  count: number;
}
function luhnAdd(sums: LuhnSums, digit: number): void {
  const doubled = digit * 2 > 9 ? digit * 2 - 9 : digit * 2;
  if (sums.count % 2 === 0) {
    sums.doubleEven += doubled;
    sums.doubleOdd += digit;
  } else {
    sums.doubleEven += digit;
    sums.doubleOdd += doubled;
  }
  sums.count++;
}
function luhnValid(sums: LuhnSums): boolean {
  // From the right, every second digit is doubled: with an even count those are the even positions from the left.
  return (sums.count % 2 === 0 ? sums.doubleEven : sums.doubleOdd) % 10 === 0;
}

/** Luhn check of a digit string (exported for the corpus and tests). */
export function luhn(digits: string): boolean {
  const sums: LuhnSums = { doubleEven: 0, doubleOdd: 0, count: 0 };
  for (const d of digits) luhnAdd(sums, d.charCodeAt(0) - 48);
  return sums.count > 0 && luhnValid(sums);
}

/**
 * The digit groups of one number-like sequence, in parallel arrays (no object per group, and reused
 * across sequences): where each group starts and ends, whether it was in parentheses, and the separator
 * after it — a character code, PAREN_ONLY for `)` directly followed by the next group, END after the last.
 */
class DigitGroups {
  start = new Int32Array(64);
  end = new Int32Array(64);
  sep = new Int32Array(64);
  paren = new Uint8Array(64);
  count = 0;

  reset(): void {
    this.count = 0;
  }

  push(start: number, end: number, sep: number, paren = false): void {
    if (this.count === this.start.length) this.grow();
    const k = this.count++;
    this.start[k] = start;
    this.end[k] = end;
    this.sep[k] = sep;
    this.paren[k] = paren ? 1 : 0;
  }

  length(k: number): number {
    return this.end[k]! - this.start[k]!;
  }

  /** This one if it is still small, else a new one: a long number grows the arrays, and a kept one should not stay large. */
  static reusable(groups: DigitGroups): DigitGroups {
    return groups.start.length > REUSED_GROUPS ? new DigitGroups() : groups;
  }

  private grow(): void {
    const size = this.start.length * 2;
    const grown = <T extends Int32Array | Uint8Array>(a: T, b: T): T => {
      b.set(a);
      return b;
    };
    this.start = grown(this.start, new Int32Array(size));
    this.end = grown(this.end, new Int32Array(size));
    this.sep = grown(this.sep, new Int32Array(size));
    this.paren = grown(this.paren, new Uint8Array(size));
  }
}
const END = -1;
const PAREN_ONLY = 0;
/**
 * The detectors run synchronously and never re-enter, so each keeps one DigitGroups (reset per sequence)
 * instead of four typed arrays per string with a digit — most strings with one are ids, scanned in every
 * message. One that grew past this many groups is replaced at its next use.
 */
const REUSED_GROUPS = 1024;
let cardGroups = new DigitGroups();
let phoneGroups = new DigitGroups();

/** The character before a number glues it to a word (`ID4111…`, `ID-4111…`) or a decimal (`3.4111…`). */
function gluedBefore(text: string, i: number): boolean {
  const prev = text.charCodeAt(i - 1);
  if (isWord(prev)) return true;
  return (prev === DOT || prev === MINUS || prev === SLASH || prev === COMMA || prev === PLUS) && isAlnum(text.charCodeAt(i - 2));
}
/** The character after a number glues it to a word or continues it (`…1111x`, `…11.5`, `…11-ab`, `10:30`, `12/05`). */
function gluedAfter(text: string, end: number): boolean {
  const next = text.charCodeAt(end);
  if (isWord(next)) return true;
  const after = text.charCodeAt(end + 1);
  return ((next === DOT || next === COMMA || next === COLON || next === SLASH) && isDigit(after)) || (next === MINUS && isAlnum(after));
}

/**
 * Digit groups separated by one space or dash (`4111 1111 1111 1111`, `3782-822463-10005`, or one run),
 * 13-19 digits, first digit 2-6 (the issuer ranges of Visa, Mastercard, Amex, Discover, JCB, Diners,
 * UnionPay, Maestro), Luhn-valid. Groups before the last have 4-6 digits, and all separators match.
 * A window is tried at each group of a longer sequence, so a card followed by its expiry still counts.
 */
export const detectCards: Detector = (text, work) => {
  const spans: Span[] = [];
  const groups = (cardGroups = DigitGroups.reusable(cardGroups));
  const n = text.length;
  let i = 0;
  while (i < n) {
    work.steps++;
    const c = text.charCodeAt(i);
    if (!isDigit(c)) {
      i = isWord(c) ? skipWord(text, i, work) : i + 1;
      continue;
    }
    if (gluedBefore(text, i)) {
      i = skipWord(text, i, work);
      continue;
    }
    groups.reset();
    let j = i;
    for (;;) {
      const start = j;
      while (j < n && isDigit(text.charCodeAt(j))) j++;
      work.steps += j - start + 1;
      const sepCode = text.charCodeAt(j);
      const sep = (isGroupSpace(sepCode) || sepCode === MINUS) && isDigit(text.charCodeAt(j + 1)) ? (sepCode === MINUS ? MINUS : SPACE) : END;
      groups.push(start, j, sep);
      if (sep === END) break;
      j++;
    }
    // A card number may be followed by its expiry (`…1111/12/26`); other glue as for any number.
    const lastGlued = text.charCodeAt(j) !== SLASH && gluedAfter(text, j);
    let k = 0;
    while (k < groups.count) {
      const best = bestCardWindow(text, groups, k, lastGlued, work);
      if (best === undefined) {
        k++;
        continue;
      }
      spans.push({ start: groups.start[k]!, end: groups.end[best]!, detector: 'card' });
      k = best + 1;
    }
    i = lastGlued ? skipWord(text, j, work) : j;
  }
  return spans;
};

function skipWord(text: string, i: number, work: Work): number {
  const start = i;
  while (i < text.length && isWord(text.charCodeAt(i))) i++;
  work.steps += i - start;
  return i;
}

/** The end group of the best card window starting at group k: a standard layout first, then the longest. */
function bestCardWindow(text: string, groups: DigitGroups, k: number, lastGlued: boolean, work: Work): number | undefined {
  const first = text.charCodeAt(groups.start[k]!);
  if (first < 50 || first > 54) return undefined; // issuer digit 2-6
  const sums: LuhnSums = { doubleEven: 0, doubleOdd: 0, count: 0 };
  let best: number | undefined;
  let bestScore = -1;
  for (let j = k; j < groups.count && j < k + 5; j++) {
    const length = groups.length(j);
    if (j > k && groups.sep[j - 1] !== groups.sep[k]) break;
    for (let d = groups.start[j]!; d < groups.end[j]! && sums.count <= 19; d++) luhnAdd(sums, text.charCodeAt(d) - 48);
    work.steps += Math.min(length, 20);
    if (sums.count > 19) break;
    const isLast = j === groups.count - 1;
    if (sums.count >= 13 && !(isLast && lastGlued) && luhnValid(sums) && issuerAllowsLength(text, groups.start[k]!, sums.count)) {
      const score = (standardCardLayout(groups, k, j) ? 100 : 0) + sums.count;
      if (score > bestScore) {
        best = j;
        bestScore = score;
      }
    }
    // Groups before the last have 4-6 digits.
    if (length < 4 || length > 6) break;
  }
  return best;
}

/**
 * Whether a card of this issuer (its first digits) comes with this many digits: Visa 13/16/19, Mastercard
 * 16, Amex 15, JCB and Discover and UnionPay 16-19, Diners 14-19, Maestro 13-19. A 15-digit number
 * starting with 4 is an IMEI (also Luhn-checked), not a card. The first group has 4+ digits.
 */
function issuerAllowsLength(text: string, at: number, length: number): boolean {
  const two = (text.charCodeAt(at) - 48) * 10 + (text.charCodeAt(at + 1) - 48);
  const four = two * 100 + (text.charCodeAt(at + 2) - 48) * 10 + (text.charCodeAt(at + 3) - 48);
  if (two >= 40 && two <= 49) return length === 13 || length === 16 || length === 19;
  if (two >= 51 && two <= 55) return length === 16;
  if (two >= 22 && two <= 27) return four >= 2221 && four <= 2720 && length === 16;
  if (two === 34 || two === 37) return length === 15;
  if (two === 35) return four >= 3528 && four <= 3589 && length >= 16;
  if (two === 30 || two === 36 || two === 38 || two === 39) return length >= 14;
  if (two === 50 || (two >= 56 && two <= 69)) return true; // Maestro, Discover, UnionPay, RuPay: 13-19
  return false;
}

/** 4-4-4-4(-1..3), 4-4-4-1..3, Amex 4-6-5, Diners 4-6-4, or one run. */
function standardCardLayout(groups: DigitGroups, k: number, j: number): boolean {
  const count = j - k + 1;
  if (count === 1) return true;
  if (count === 3 && groups.length(k) === 4 && groups.length(k + 1) === 6) return groups.length(j) === 5 || groups.length(j) === 4;
  if (count < 4) return false;
  for (let g = k; g < j; g++) if (groups.length(g) !== 4) return false;
  return groups.length(j) <= 4;
}

// ---- IBAN ----

/** IBAN length per country (SWIFT IBAN registry). */
const IBAN_LENGTHS = new Map<string, number>(
  Object.entries({
    AD: 24,
    AE: 23,
    AL: 28,
    AT: 20,
    AZ: 28,
    BA: 20,
    BE: 16,
    BG: 22,
    BH: 22,
    BI: 27,
    BR: 29,
    BY: 28,
    CH: 21,
    CR: 22,
    CY: 28,
    CZ: 24,
    DE: 22,
    DJ: 27,
    DK: 18,
    DO: 28,
    EE: 20,
    EG: 29,
    ES: 24,
    FI: 18,
    FK: 18,
    FO: 18,
    FR: 27,
    GB: 22,
    GE: 22,
    GI: 23,
    GL: 18,
    GR: 27,
    GT: 28,
    HR: 21,
    HU: 28,
    IE: 22,
    IL: 23,
    IQ: 23,
    IS: 26,
    IT: 27,
    JO: 30,
    KW: 30,
    KZ: 20,
    LB: 28,
    LC: 32,
    LI: 21,
    LT: 20,
    LU: 20,
    LV: 21,
    LY: 25,
    MC: 27,
    MD: 24,
    ME: 22,
    MK: 19,
    MN: 20,
    MR: 27,
    MT: 31,
    MU: 30,
    NI: 28,
    NL: 18,
    NO: 15,
    OM: 23,
    PK: 24,
    PL: 28,
    PS: 29,
    PT: 25,
    QA: 29,
    RO: 24,
    RS: 22,
    RU: 33,
    SA: 24,
    SC: 31,
    SD: 18,
    SE: 24,
    SI: 19,
    SK: 24,
    SM: 27,
    SO: 23,
    ST: 25,
    SV: 28,
    TL: 23,
    TN: 24,
    TR: 26,
    UA: 29,
    VA: 22,
    VG: 24,
    XK: 20,
    YE: 30,
  }),
);

/** ISO 13616 check: move the first four characters to the end, letters to 10-35, the number mod 97 is 1. */
export function ibanChecksumValid(iban: string): boolean {
  const rearranged = iban.slice(4) + iban.slice(0, 4);
  let remainder = 0;
  for (let i = 0; i < rearranged.length; i++) {
    const c = rearranged.charCodeAt(i);
    if (isDigit(c)) remainder = (remainder * 10 + (c - 48)) % 97;
    else if (isUpper(c)) remainder = (remainder * 100 + (c - 55)) % 97;
    else return false;
  }
  return remainder === 1;
}

/**
 * A country code, two check digits and the country's exact length of letters and digits, grouped by
 * single spaces or not at all, passing the mod-97 check.
 */
export const detectIbans: Detector = (text, work) => {
  const spans: Span[] = [];
  const n = text.length;
  let i = 0;
  while (i < n) {
    work.steps++;
    const c = text.charCodeAt(i);
    if (!isWord(c)) {
      i++;
      continue;
    }
    const wordStart = i;
    const candidate =
      !isWord(text.charCodeAt(i - 1)) && isAlpha(c) && isAlpha(text.charCodeAt(i + 1)) && isDigit(text.charCodeAt(i + 2)) && isDigit(text.charCodeAt(i + 3));
    const length = candidate ? IBAN_LENGTHS.get(text.slice(i, i + 2).toUpperCase()) : undefined;
    if (length !== undefined) {
      let compact = '';
      let j = i;
      while (compact.length < length && j < n) {
        work.steps++;
        const ch = text.charCodeAt(j);
        if (isAlnum(ch)) {
          compact += text[j]!;
          j++;
        } else if (ch === SPACE && isAlnum(text.charCodeAt(j + 1)) && j > i) {
          j++;
        } else break;
      }
      if (compact.length === length && !isAlnum(text.charCodeAt(j)) && ibanChecksumValid(compact.toUpperCase())) {
        work.steps += length;
        spans.push({ start: i, end: j, detector: 'iban' });
        i = j;
        continue;
      }
    }
    i = skipWord(text, wordStart, work);
  }
  return spans;
};

// ---- phone numbers ----

/** Words (or word starts: phones, telephone, calling) after which any 7-15 digit number is a phone number. */
const PHONE_KEYWORDS = ['phone', 'tel', 'mobile', 'cell', 'call', 'fax', 'whatsapp', 'sms', 'ring', 'mob', 'handy'];
const KEYWORD_LOOKBACK = 32;

/**
 * Digit groups with the separators phone numbers use (space, `-`, `.`, parentheses, a leading `+`).
 * A number is a phone number when it is international (`+` and 8-15 digits), North American
 * (`(555) 123-4567`, `555-123-4567`, `1 555 123 4567`), national with a trunk 0 (`020 7946 0958`,
 * `06 12 34 56 78`: 10-11 digits, uniform separators), or any 7-15 digit number that follows a word like
 * "phone", "call" or "mobile" within 32 characters. Windows start at the sequence start or after a
 * space, so `2024-01-15 555-123-4567` still yields the phone number and not the date.
 */
export const detectPhones: Detector = (text, work) => {
  const spans: Span[] = [];
  const keywords = new PhoneKeywords(text, work);
  const groups = (phoneGroups = DigitGroups.reusable(phoneGroups));
  const n = text.length;
  let i = 0;
  while (i < n) {
    work.steps++;
    const c = text.charCodeAt(i);
    const starts = isDigit(c) || ((c === PLUS || c === OPEN_PAREN) && isDigit(text.charCodeAt(i + 1)));
    if (!starts) {
      i = isWord(c) ? skipWord(text, i, work) : i + 1;
      continue;
    }
    if (isDigit(c) ? gluedBefore(text, i) : isWord(text.charCodeAt(i - 1)) || isDigit(text.charCodeAt(i - 1))) {
      i = skipWord(text, i + (isDigit(c) ? 0 : 1), work);
      continue;
    }
    const plus = c === PLUS;
    groups.reset();
    let j = plus ? i + 1 : i;
    for (;;) {
      const paren = text.charCodeAt(j) === OPEN_PAREN;
      if (paren) j++;
      const start = j;
      while (j < n && isDigit(text.charCodeAt(j))) j++;
      const end = j;
      work.steps += end - start + 1;
      if (paren) {
        if (text.charCodeAt(j) !== CLOSE_PAREN) {
          // `(555 …` without its `)`: the number ends here.
          groups.push(start, end, END);
          break;
        }
        j++;
      }
      // The separator: a space, dash or dot; after `)` a space, a dash or nothing.
      const s = text.charCodeAt(j);
      const sep = isGroupSpace(s) ? SPACE : s === MINUS || (s === DOT && !paren) ? s : paren ? PAREN_ONLY : END;
      const next = sep === END || sep === PAREN_ONLY ? j : j + 1;
      const more = isDigit(text.charCodeAt(next)) || (text.charCodeAt(next) === OPEN_PAREN && isDigit(text.charCodeAt(next + 1)));
      if (sep !== END && more) {
        groups.push(start, end, sep, paren);
        j = next;
        continue;
      }
      // A trailing separator is not part of the number.
      groups.push(start, end, END, paren);
      break;
    }
    const lastEnd = groups.end[groups.count - 1]! + (groups.paren[groups.count - 1] ? 1 : 0);
    const lastGlued = gluedAfter(text, lastEnd);
    let k = 0;
    while (k < groups.count) {
      const windowStart = k === 0 ? i : groups.start[k]! - (groups.paren[k] ? 1 : 0);
      const best = bestPhoneWindow(text, groups, k, k === 0 && plus, lastGlued, keywords.before(windowStart), work);
      if (best !== undefined) spans.push({ start: windowStart, end: groups.end[best]! + (groups.paren[best] ? 1 : 0), detector: 'phone' });
      // The next window starts after a space.
      k = best === undefined ? k + 1 : best + 1;
      while (k < groups.count && groups.sep[k - 1] !== SPACE) k++;
    }
    i = lastGlued ? skipWord(text, lastEnd, work) : Math.max(lastEnd, i + 1);
  }
  return spans;
};

/** The last group of the longest phone window starting at group k, or undefined. Windows end at a space or the end. */
function bestPhoneWindow(text: string, groups: DigitGroups, k: number, plus: boolean, lastGlued: boolean, keyword: boolean, work: Work): number | undefined {
  let digits = 0;
  let best: number | undefined;
  // Past four groups only an international number, a whole national one or one after a keyword fits.
  const last = Math.min(groups.count - 1, plus || keyword || k === 0 ? k + 6 : k + 3);
  for (let j = k; j <= last; j++) {
    digits += groups.length(j);
    work.steps += j - k + 1;
    if (digits > 17) break;
    if (j === groups.count - 1 ? lastGlued : groups.sep[j] !== SPACE) continue;
    // A national number is a whole sequence: inside a longer one (`DE89 3704 0044 0532 0130 01`) its shape is chance.
    const whole = k === 0 && j === groups.count - 1;
    const ok = plus
      ? digits >= 8 && digits <= 15 && text.charCodeAt(groups.start[k]!) !== 48
      : (digits <= 15 && northAmerican(text, groups, k, j)) ||
        (whole && (nationalTrunk(text, groups, k, j, digits) || internationalZeroZero(text, groups, k, j, digits))) ||
        (keyword && digits >= 7 && digits <= 15 && simpleLayout(groups, k, j));
    if (ok) best = j;
  }
  return best;
}

/** (555) 123-4567, 555-123-4567, 555.123.4567, 555 123 4567, with an optional leading 1. */
function northAmerican(text: string, groups: DigitGroups, k: number, j: number): boolean {
  if (j - k === 3 && groups.length(k) === 1 && text.charCodeAt(groups.start[k]!) === 49) k++;
  if (j - k !== 2 || groups.length(k) !== 3 || groups.length(k + 1) !== 3 || groups.length(j) !== 4) return false;
  if (text.charCodeAt(groups.start[k]!) < 50) return false; // area codes start with 2-9
  if (groups.paren[k]) return !groups.paren[k + 1] && !groups.paren[j];
  return !groups.paren[k + 1] && !groups.paren[j] && groups.sep[k] === groups.sep[k + 1];
}

/** A national number with a trunk 0: 10-11 digits in 2+ groups of 2+ digits, all separated alike by spaces or dashes. */
function nationalTrunk(text: string, groups: DigitGroups, k: number, j: number, digits: number): boolean {
  if (j === k || digits < 10 || digits > 11) return false;
  if (text.charCodeAt(groups.start[k]!) !== 48 || text.charCodeAt(groups.start[k]! + 1) === 48) return false;
  const sepOf = (g: number) => (groups.paren[g] && groups.sep[g] === PAREN_ONLY ? SPACE : groups.sep[g]);
  const first = sepOf(k);
  if (first !== SPACE && first !== MINUS) return false;
  for (let g = k; g <= j; g++) {
    if (groups.length(g) < 2 || (g > k && groups.paren[g])) return false;
    if (g < j && sepOf(g) !== first) return false;
  }
  return true;
}

/** `0033 6 12 34 56 78`: the international prefix 00 instead of `+`, then 8-15 digits in 2+ groups. */
function internationalZeroZero(text: string, groups: DigitGroups, k: number, j: number, digits: number): boolean {
  const at = groups.start[k]!;
  if (j === k || groups.length(k) < 3 || text.charCodeAt(at) !== 48 || text.charCodeAt(at + 1) !== 48 || text.charCodeAt(at + 2) === 48) return false;
  if (digits - 2 < 8 || digits - 2 > 15) return false;
  for (let g = k; g < j; g++) if (groups.sep[g] !== SPACE && groups.sep[g] !== MINUS) return false;
  return true;
}

/** One run, or groups joined by spaces or dashes, and not a date (4-2-2, 2-2-4). */
function simpleLayout(groups: DigitGroups, k: number, j: number): boolean {
  if (j === k) return !groups.paren[k];
  for (let g = k; g < j; g++) if (groups.sep[g] !== SPACE && groups.sep[g] !== MINUS) return false;
  if (j - k === 2) {
    const [a, b, c] = [groups.length(k), groups.length(k + 1), groups.length(j)];
    if ((a === 4 && b === 2 && c === 2) || (a === 2 && b === 2 && c === 4)) return false;
  }
  return true;
}

/**
 * Where phone keywords end in the text, found once by a linear pass over its words and then read with a
 * cursor that only moves forward (window starts only grow), so each lookup is O(1) amortised.
 */
class PhoneKeywords {
  private ends?: number[];
  private cursor = 0;
  constructor(
    private readonly text: string,
    private readonly work: Work,
  ) {}

  /**
   * A keyword ends within 32 characters before `start`, with no digit in between (a number in between
   * is the one the keyword was about: `Tel. +43 1 234 5678, Rechnung 2024-0815`).
   */
  before(start: number): boolean {
    this.ends ??= this.find();
    if (this.ends.length === 0) return false;
    while (this.cursor < this.ends.length && this.ends[this.cursor]! <= start) this.cursor++;
    const last = this.ends[this.cursor - 1];
    if (last === undefined || start - last > KEYWORD_LOOKBACK) return false;
    this.work.steps += start - last;
    for (let i = last; i < start; i++) if (isDigit(this.text.charCodeAt(i))) return false;
    return true;
  }

  private find(): number[] {
    const ends: number[] = [];
    forEachRun(this.text, this.work, isAlpha, (start, end) => {
      if (end - start > 16) return;
      const word = this.text.slice(start, end).toLowerCase();
      if (PHONE_KEYWORDS.some((k) => word.startsWith(k))) ends.push(end);
    });
    return ends;
  }
}
