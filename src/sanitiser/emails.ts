/**
 * The e-mail address detector (personal data, with the card, IBAN and phone detectors of `personal-data.ts`).
 */
import type { Detector, Span, Work } from './detector-types.js';
import { AT, COLON, DOT, MINUS, PLUS, SLASH, isAlnum, isAlpha, isSpace, isWord } from './chars.js';

// ---- e-mail ----

const isLocalChar = (c: number) => isAlnum(c) || c === DOT || c === 95 || c === 37 || c === PLUS || c === MINUS || c === 39;
const isDomainChar = (c: number) => isAlnum(c) || c === DOT || c === MINUS;

/**
 * From each `@`, at most 64 local-part characters back and 253 domain characters forward; the domain
 * needs a dot and an alphabetic top-level label of two or more letters (so `react@18.2.0` stays).
 */
export const detectEmails: Detector = (text, work) => {
  const spans: Span[] = [];
  let from = 0;
  let lastEnd = 0;
  while (from < text.length) {
    const at = text.indexOf('@', from);
    work.steps += (at < 0 ? text.length : at) - from + 1;
    if (at < 0) break;
    from = at + 1;
    let start = at;
    while (start > lastEnd && at - start < 65 && isLocalChar(text.charCodeAt(start - 1))) {
      start--;
      work.steps++;
    }
    if (at - start > 64) continue;
    while (start < at && text.charCodeAt(start) === DOT) start++;
    if (start === at || inUrlUserinfo(text, start, work)) continue;
    let end = at + 1;
    while (end < text.length && end - at <= 254 && isDomainChar(text.charCodeAt(end))) {
      end++;
      work.steps++;
    }
    if (end - at > 254) continue;
    while (end > at + 1 && (text.charCodeAt(end - 1) === DOT || text.charCodeAt(end - 1) === MINUS)) end--;
    work.steps += end - at;
    end = domainEnd(text, at + 1, end);
    if (end < 0) continue;
    // `git@github.com:org/repo.git` and `user@host:/path` are remote paths (scp syntax), not addresses.
    if (text.charCodeAt(end) === COLON && (isWord(text.charCodeAt(end + 1)) || text.charCodeAt(end + 1) === SLASH)) continue;
    spans.push({ start, end, detector: 'email' });
    lastEnd = end;
    from = end;
  }
  return spans;
};

/** File extensions that follow an `@` in names like `icon@2x.png` and are no top-level domains. */
const FILE_EXTENSIONS = new Set([
  'png',
  'jpg',
  'jpeg',
  'gif',
  'svg',
  'webp',
  'ico',
  'bmp',
  'pdf',
  'doc',
  'docx',
  'xls',
  'xlsx',
  'csv',
  'json',
  'yaml',
  'yml',
  'css',
  'scss',
  'js',
  'mjs',
  'cjs',
  'ts',
  'tsx',
  'jsx',
  'txt',
  'log',
  'lock',
  'html',
  'xml',
  'tgz',
]);

/** `https://user:password@host`: the local part follows `:` inside an authority that starts with `//` (within 256 characters). */
function inUrlUserinfo(text: string, start: number, work: Work): boolean {
  if (text.charCodeAt(start - 1) !== COLON) return false;
  let i = start - 2;
  while (i >= 0 && start - i <= 256) {
    const c = text.charCodeAt(i);
    if (c === SLASH) {
      work.steps += start - i;
      return text.charCodeAt(i - 1) === SLASH;
    }
    if (isSpace(c) || c === AT) break;
    i--;
  }
  work.steps += start - i;
  return false;
}

/**
 * Where a valid domain in [start, end) ends: labels of 1-63 characters not starting with `-`, at least
 * two, the last of 2-63 letters. A file extension is no top-level domain: `ada@example.com.pdf` ends
 * before `.pdf`, `icon@2x.png` has no domain. -1 when there is none.
 */
function domainEnd(text: string, start: number, end: number): number {
  let labels = 0;
  let labelStart = start;
  let previousDot = -1;
  let tldAlpha = true;
  for (let i = start; i <= end; i++) {
    const c = i < end ? text.charCodeAt(i) : DOT;
    if (c !== DOT) {
      tldAlpha &&= isAlpha(c);
      continue;
    }
    const length = i - labelStart;
    if (length === 0 || length > 63 || text.charCodeAt(labelStart) === MINUS) return -1;
    labels++;
    if (i === end) {
      if (labels < 2 || length < 2 || !tldAlpha) return -1;
      if (length <= 5 && FILE_EXTENSIONS.has(text.slice(labelStart, end).toLowerCase())) return labels > 2 ? domainEnd(text, start, previousDot) : -1;
      return end;
    }
    previousDot = i;
    labelStart = i + 1;
    tldAlpha = true;
  }
  return -1;
}
