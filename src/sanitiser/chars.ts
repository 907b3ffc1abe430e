/**
 * Character classes on UTF-16 code units (NaN from charCodeAt past the end is in no class), the code units
 * the detectors look for, and the two scanning helpers they share. Every character examined counts a step.
 */
import type { Work } from './detector-types.js';

export const isDigit = (c: number) => c >= 48 && c <= 57;
export const isUpper = (c: number) => c >= 65 && c <= 90;
export const isLower = (c: number) => c >= 97 && c <= 122;
export const isAlpha = (c: number) => isUpper(c) || isLower(c);
export const isAlnum = (c: number) => isDigit(c) || isAlpha(c);
/** Letters, digits and `_`: what glues characters into one word. Non-ASCII counts as a separator, so `卡号4111…` still splits. */
export const isWord = (c: number) => isAlnum(c) || c === 95;
/** Key and token bodies: letters, digits, `_` and `-`. */
export const isTokenChar = (c: number) => isWord(c) || c === 45;
/** The base64 / base64url alphabet with padding. */
export const isBase64Char = (c: number) => isTokenChar(c) || c === 43 || c === 47 || c === 61;
/** RFC 6750 b64token: what may follow `Bearer `. */
export const isBearerChar = (c: number) => isBase64Char(c) || c === 46 || c === 126;
export const isHex = (c: number) => isDigit(c) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);
export const isHorizontalSpace = (c: number) => c === 32 || c === 9;
export function isSpace(c: number): boolean {
  return (
    c === 32 ||
    (c >= 9 && c <= 13) ||
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000 ||
    c === 0xfeff
  );
}

/** Spaces that copy-paste from web forms puts between digit groups: no-break, figure, thin, narrow no-break. */
export const isGroupSpace = (c: number) => c === 32 || c === 0xa0 || c === 0x2007 || c === 0x2009 || c === 0x202f;
export const PLUS = 43,
  MINUS = 45,
  DOT = 46,
  SLASH = 47,
  COLON = 58,
  EQUALS = 61,
  AT = 64,
  SPACE = 32;
export const OPEN_PAREN = 40,
  CLOSE_PAREN = 41,
  COMMA = 44,
  GREATER = 62;

/**
 * Visits each maximal run of `inClass` characters. `visit` may return an index past the run's end to
 * skip text it consumed (a JWT's later segments, a secret's value); the cursor never moves back.
 */
export function forEachRun(text: string, work: Work, inClass: (c: number) => boolean, visit: (start: number, end: number) => number | void): void {
  const n = text.length;
  let i = 0;
  let steps = 0;
  while (i < n) {
    steps++;
    if (!inClass(text.charCodeAt(i))) {
      i++;
      continue;
    }
    const start = i;
    while (i < n && inClass(text.charCodeAt(i))) i++;
    steps += i - start;
    const next = visit(start, i);
    if (typeof next === 'number' && next > i) i = next;
  }
  work.steps += steps;
}

export function startsWithAt(text: string, prefix: string, at: number, work: Work): boolean {
  work.steps += prefix.length;
  return text.startsWith(prefix, at);
}
