/**
 * Credential detectors: API keys with a known prefix and webhook URLs, JSON Web Tokens, Bearer and Basic
 * credentials, PEM private keys, and secrets named as such (`password: …`, JSON keys, URL passwords).
 */
import { mergeSorted, type Detector, type Span, type Work } from './detector-types.js';
import {
  AT,
  CLOSE_PAREN,
  COLON,
  COMMA,
  DOT,
  EQUALS,
  GREATER,
  OPEN_PAREN,
  SLASH,
  SPACE,
  forEachRun,
  isAlnum,
  isAlpha,
  isBearerChar,
  isDigit,
  isHorizontalSpace,
  isLower,
  isSpace,
  isTokenChar,
  isUpper,
  startsWithAt,
} from './chars.js';

// ---- API keys with a known prefix ----

interface KeyFormat {
  prefix: string;
  /** Length of the body after the prefix. */
  min: number;
  max: number;
  /** The body must be upper-case letters and digits (AWS). */
  upperDigits?: boolean;
}

/** Vendor formats, from their documentation. Longer prefixes first where one extends another (`sk-ant-` before `sk-`). */
const KEY_FORMATS: readonly KeyFormat[] = [
  { prefix: 'sk-ant-', min: 32, max: 256 }, // Anthropic: sk-ant-api03-…, sk-ant-admin01-…
  { prefix: 'sk-', min: 16, max: 256 }, // OpenAI: sk-…, sk-proj-…, sk-svcacct-…, sk-admin-…
  { prefix: 'sk_live_', min: 16, max: 256 }, // Stripe secret and restricted keys, webhook secrets
  { prefix: 'sk_test_', min: 16, max: 256 },
  { prefix: 'rk_live_', min: 16, max: 256 },
  { prefix: 'rk_test_', min: 16, max: 256 },
  { prefix: 'whsec_', min: 24, max: 256 },
  { prefix: 'AKIA', min: 16, max: 16, upperDigits: true }, // AWS access key ids (long-term, temporary)
  { prefix: 'ASIA', min: 16, max: 16, upperDigits: true },
  { prefix: 'github_pat_', min: 40, max: 255 }, // GitHub fine-grained tokens
  { prefix: 'ghp_', min: 30, max: 255 }, // GitHub classic, OAuth, user-to-server, server-to-server, refresh
  { prefix: 'gho_', min: 30, max: 255 },
  { prefix: 'ghu_', min: 30, max: 255 },
  { prefix: 'ghs_', min: 30, max: 255 },
  { prefix: 'ghr_', min: 30, max: 255 },
  { prefix: 'xoxb-', min: 10, max: 255 }, // Slack bot, user, app, refresh, config tokens
  { prefix: 'xoxp-', min: 10, max: 255 },
  { prefix: 'xoxa-', min: 10, max: 255 },
  { prefix: 'xoxr-', min: 10, max: 255 },
  { prefix: 'xoxs-', min: 10, max: 255 },
  { prefix: 'xoxe-', min: 10, max: 255 },
  { prefix: 'xapp-', min: 10, max: 255 },
  { prefix: 'AIza', min: 35, max: 35 }, // Google API keys
  { prefix: 'glpat-', min: 20, max: 255 }, // GitLab personal access tokens
  { prefix: 'npm_', min: 36, max: 36 }, // npm access tokens
  { prefix: 'hf_', min: 30, max: 64 }, // Hugging Face
];

/** The formats by the first character of their prefix, so a run is compared only with formats it could match. */
const KEY_FORMATS_BY_FIRST = new Map<number, KeyFormat[]>();
for (const format of KEY_FORMATS) {
  const first = format.prefix.charCodeAt(0);
  KEY_FORMATS_BY_FIRST.set(first, [...(KEY_FORMATS_BY_FIRST.get(first) ?? []), format]);
}

const MIN_KEY_LENGTH = Math.min(...KEY_FORMATS.map((f) => f.prefix.length + f.min));

/**
 * A run of key characters that starts with a vendor prefix and has a body of the vendor's length (the
 * body must hold a digit or an upper-case letter: random keys always do, words like `sk-learn-…` do not);
 * a SendGrid key; a Slack or Discord webhook URL's secret path.
 */
export const detectApiKeys: Detector = (text, work) => {
  const spans: Span[] = [];
  forEachRun(text, work, isTokenChar, (start, end) => {
    if (end - start === 2) return sendGridKeyAt(text, start, end, spans, work);
    if (end - start < MIN_KEY_LENGTH) return;
    for (const format of KEY_FORMATS_BY_FIRST.get(text.charCodeAt(start)) ?? []) {
      if (!startsWithAt(text, format.prefix, start, work)) continue;
      const bodyLength = end - start - format.prefix.length;
      if (bodyLength < format.min || bodyLength > format.max) return;
      let digitOrUpper = false;
      for (let i = start + format.prefix.length; i < end; i++) {
        work.steps++;
        const c = text.charCodeAt(i);
        if (format.upperDigits && !isUpper(c) && !isDigit(c)) return;
        if (isDigit(c) || isUpper(c)) digitOrUpper = true;
      }
      if (digitOrUpper) spans.push({ start, end, detector: 'apiKey' });
      return;
    }
  });
  return mergeSorted(spans, detectWebhookUrls(text, work));
};

/** SendGrid: `SG.` then 22 and 43 base64url characters, dot-separated. Returns the cursor past it. */
function sendGridKeyAt(text: string, start: number, end: number, spans: Span[], work: Work): number | void {
  if (text.charCodeAt(start) !== 83 || text.charCodeAt(start + 1) !== 71 || text.charCodeAt(end) !== DOT) return;
  let i = end + 1;
  while (i < text.length && i - end <= 23 && isTokenChar(text.charCodeAt(i))) i++;
  if (i - end - 1 !== 22 || text.charCodeAt(i) !== DOT) return;
  const second = i + 1;
  i = second;
  while (i < text.length && i - second <= 43 && isTokenChar(text.charCodeAt(i))) i++;
  work.steps += i - end;
  if (i - second !== 43) return;
  spans.push({ start, end: i, detector: 'apiKey' });
  return i;
}

/** Webhook URLs whose path is the credential (anyone holding it can post): Slack, Discord. */
const WEBHOOK_PREFIXES = ['hooks.slack.com/services/', 'hooks.slack.com/workflows/', 'discord.com/api/webhooks/', 'discordapp.com/api/webhooks/'];
const isWebhookPathChar = (c: number) => isTokenChar(c) || c === SLASH;

function detectWebhookUrls(text: string, work: Work): Span[] {
  let spans: Span[] = [];
  for (const prefix of WEBHOOK_PREFIXES) {
    const found: Span[] = [];
    let from = 0;
    while (from < text.length) {
      const at = text.indexOf(prefix, from);
      work.steps += (at < 0 ? text.length : at) - from + 1;
      if (at < 0) break;
      const start = at + prefix.length;
      let i = start;
      while (i < text.length && isWebhookPathChar(text.charCodeAt(i))) i++;
      work.steps += i - start;
      if (i - start >= 20) found.push({ start, end: i, detector: 'apiKey' });
      from = i > at ? i : at + 1;
    }
    spans = mergeSorted(spans, found);
  }
  return spans;
}

// ---- JSON Web Tokens ----

/** `eyJ<header>.eyJ<payload>.<signature>`: base64url of two JSON objects and a signature (empty for alg none). */
export const detectJwts: Detector = (text, work) => {
  const spans: Span[] = [];
  const runEnd = (from: number) => {
    let i = from;
    while (i < text.length && isTokenChar(text.charCodeAt(i))) {
      i++;
      work.steps++;
    }
    return i;
  };
  forEachRun(text, work, isTokenChar, (start, end) => {
    if (end - start < 10 || !startsWithAt(text, 'eyJ', start, work) || text.charCodeAt(end) !== DOT) return;
    const payloadEnd = runEnd(end + 1);
    if (payloadEnd - (end + 1) < 10 || !startsWithAt(text, 'eyJ', end + 1, work) || text.charCodeAt(payloadEnd) !== DOT) return payloadEnd;
    const signatureEnd = runEnd(payloadEnd + 1);
    spans.push({ start, end: signatureEnd, detector: 'jwt' });
    return signatureEnd;
  });
  return spans;
};

// ---- Bearer and Basic credentials ----

/**
 * The credential after `Bearer ` or `Basic `. A bearer token must look random (a digit, mixed case or
 * punctuation), so "the bearer of bad news" stays; a Basic credential must decode to `user:password`.
 */
export const detectBearerTokens: Detector = (text, work) => {
  const spans: Span[] = [];
  forEachRun(text, work, isAlpha, (start, end) => {
    const word = end - start === 6 || end - start === 5 ? text.slice(start, end).toLowerCase() : '';
    if (word !== 'bearer' && word !== 'basic') return;
    let i = end;
    while (i < end + 3 && isHorizontalSpace(text.charCodeAt(i))) i++;
    if (i === end) return;
    const tokenStart = i;
    let digit = false,
      upper = false,
      lower = false,
      punctuation = false;
    while (i < text.length && isBearerChar(text.charCodeAt(i))) {
      const c = text.charCodeAt(i);
      digit ||= isDigit(c);
      upper ||= isUpper(c);
      lower ||= isLower(c);
      punctuation ||= !isAlnum(c);
      i++;
      work.steps++;
    }
    let tokenEnd = i;
    // A sentence's full stop or comma is not part of the token.
    while (tokenEnd > tokenStart && (text.charCodeAt(tokenEnd - 1) === DOT || text.charCodeAt(tokenEnd - 1) === COMMA)) tokenEnd--;
    if (tokenEnd - tokenStart < 8) return i;
    const credential = text.slice(tokenStart, tokenEnd);
    const looksLikeCredential =
      word === 'bearer' ? digit || (upper && lower) || punctuation : Buffer.from(credential, 'base64').toString('latin1').includes(':');
    work.steps += credential.length;
    if (looksLikeCredential) spans.push({ start: tokenStart, end: tokenEnd, detector: 'bearer' });
    return i;
  });
  return spans;
};

// ---- PEM private keys ----

/** A `-----BEGIN … PRIVATE KEY-----` block up to its END line (or to the end of the text, if cut off). */
export const detectPrivateKeys: Detector = (text, work) => {
  const spans: Span[] = [];
  const BEGIN = '-----BEGIN ';
  let from = 0;
  while (from < text.length) {
    const begin = text.indexOf(BEGIN, from);
    work.steps += (begin < 0 ? text.length : begin) - from + 1;
    if (begin < 0) break;
    // The label: capitals and spaces, at most 48 of them, then five dashes.
    let i = begin + BEGIN.length;
    while (i < begin + BEGIN.length + 48 && (isUpper(text.charCodeAt(i)) || text.charCodeAt(i) === SPACE)) i++;
    work.steps += i - begin;
    const label = text.slice(begin + BEGIN.length, i);
    if (!label.includes('PRIVATE KEY') || !text.startsWith('-----', i)) {
      from = i;
      continue;
    }
    const endLine = text.indexOf('-----END ', i);
    work.steps += (endLine < 0 ? text.length : endLine) - i + 1;
    let end = text.length;
    if (endLine >= 0) {
      const close = text.indexOf('-----', endLine + 9);
      end = close >= 0 && close - endLine < 64 ? close + 5 : endLine + 9;
      work.steps += end - endLine;
    }
    spans.push({ start: begin, end, detector: 'privateKey' });
    from = end;
  }
  return spans;
};

// ---- secret names: keys of JSON objects and `name: value` pairs in free text ----

/** Last words that name a secret: `password`, `accessToken`, `client_secret`, `Authorization`, … */
const SECRET_LAST_WORDS = new Set([
  'password',
  'passwd',
  'pwd',
  'pass',
  'passphrase',
  'secret',
  'secrets',
  'token',
  'credential',
  'credentials',
  'authorization',
  'cookie',
  'apikey',
  'privatekey',
  'accesstoken',
  'refreshtoken',
  'authtoken',
  'secretkey',
  // Some other languages' words for password (ASCII spellings).
  'passwort',
  'kennwort',
  'wachtwoord',
  'passord',
  'senha',
  'salasana',
  'jelszo',
  'heslo',
  'sifre',
  'parola',
  'contrasena',
]);
/** Two last words that name a secret: `api key`, `private_key`, `AWS_SECRET_ACCESS_KEY`, … */
const SECRET_LAST_PAIRS = new Set([
  'api key',
  'private key',
  'access key',
  'secret key',
  'signing key',
  'encryption key',
  'master key',
  'session key',
  'client secret',
]);
/** Words that make a name secret wherever they stand (`SECRET_KEY_BASE`, `password_hash`)… */
const SECRET_ANYWHERE = new Set(['password', 'passwd', 'passphrase', 'secret', 'credential', 'credentials']);
/** …unless the name then describes the secret rather than holding it (`secretName`, `passwordPolicy`). */
const DESCRIPTIVE_LAST_WORDS = new Set([
  'name',
  'names',
  'id',
  'ids',
  'type',
  'types',
  'count',
  'length',
  'len',
  'policy',
  'hint',
  'label',
  'field',
  'fields',
  'url',
  'uri',
  'path',
  'file',
  'ref',
  'version',
  'expiry',
  'expires',
  'expiration',
  'at',
  'created',
  'updated',
  'rotation',
  'manager',
  'store',
  'provider',
  'arn',
  'required',
  'min',
  'max',
  'strength',
  'reset',
  'changed',
  'set',
  'enabled',
  'ttl',
  'age',
  'prompt',
  'rules',
]);
const MAX_NAME_LENGTH = 64;

/**
 * Splits an identifier into lower-case words: `apiKey`, `API_KEY`, `x-api-key`, `APIKey` and `api key`
 * all give [api, key]. Linear in the name's length.
 */
function nameWords(name: string): string[] {
  const words: string[] = [];
  let current = '';
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (!isAlnum(c)) {
      if (current) words.push(current);
      current = '';
      continue;
    }
    const prev = name.charCodeAt(i - 1);
    const next = name.charCodeAt(i + 1);
    // A capital starts a word after a lower-case letter or digit (apiKey), or before one when it ends an acronym (APIKey).
    if (isUpper(c) && current && (isLower(prev) || isDigit(prev) || (isUpper(prev) && isLower(next)))) {
      words.push(current);
      current = '';
    }
    current += String.fromCharCode(isUpper(c) ? c + 32 : c);
  }
  if (current) words.push(current);
  return words;
}

/** Whether a key or field name says its value is a secret. Names longer than 64 characters never do. */
export function isSecretName(name: string, extraWords: ReadonlySet<string> = EMPTY_SET): boolean {
  if (name.length === 0 || name.length > MAX_NAME_LENGTH) return false;
  const words = nameWords(name);
  const last = words[words.length - 1];
  if (last === undefined) return false;
  if (SECRET_LAST_WORDS.has(last) || extraWords.has(last)) return true;
  if (words.length === 1) return last === 'auth';
  if (SECRET_LAST_PAIRS.has(`${words[words.length - 2]} ${last}`)) return true;
  return !DESCRIPTIVE_LAST_WORDS.has(last) && words.some((w) => SECRET_ANYWHERE.has(w));
}
const EMPTY_SET: ReadonlySet<string> = new Set();

/** Values after a secret name that are not secrets: placeholders and references. */
const NOT_SECRET_VALUES = new Set(['null', 'none', 'nil', 'undefined', 'true', 'false', 'required', 'optional', 'n/a', 'redacted', 'hidden', 'empty', 'unset']);
/**
 * English function words: a value that is one of these and is followed by more words is prose
 * (`Password: must be at least 12 characters`, `Token: a unit of text`), not a secret.
 */
const PROSE_WORDS = new Set([
  'a',
  'an',
  'the',
  'must',
  'should',
  'will',
  'can',
  'is',
  'are',
  'be',
  'at',
  'not',
  'no',
  'only',
  'any',
  'see',
  'use',
  'enter',
  'your',
  'my',
  'our',
  'their',
  'this',
  'that',
  'it',
  'has',
  'have',
  'was',
  'were',
  'of',
  'in',
  'on',
  'for',
  'to',
  'and',
  'or',
  'if',
  'what',
  'which',
  'how',
  'when',
  'where',
  'please',
  'minimum',
  'maximum',
  'min',
  'max',
  'same',
  'too',
  'very',
  'never',
  'always',
]);
/** Words that may stand between a secret's name and its colon: `password is now: …`, `password was: …`. */
const FILLER_WORDS = new Set(['is', 'was', 'now', 'are', 'here', 'below', 'again', 'then', 'still', 'will', 'be', 'new']);
const AUTH_SCHEMES = new Set(['bearer', 'basic', 'token', 'digest', 'negotiate', 'apikey']);
const VALUE_STOP = new Set([34, 39, 96, 60, 62]); // " ' ` < >
const AMPERSAND = 38;

/** `&` ends a value when a query parameter follows (`&user=`): at most 64 name characters, then `=`. */
function parameterFollows(text: string, amp: number, work: Work): boolean {
  let i = amp + 1;
  while (i < text.length && i - amp <= 64 && isTokenChar(text.charCodeAt(i))) i++;
  work.steps += i - amp;
  return i > amp + 1 && text.charCodeAt(i) === EQUALS;
}
/** Sentence punctuation after a value; `!`, `?` and `:` stay (passwords end with them more often than sentences do). */
const TRAILING_PUNCTUATION = new Set([DOT, COMMA, 59, CLOSE_PAREN, 93, 125]); // . , ; ) ] }

/** The character at `at` closes a bracket opened inside the value (`[secret]`, `f(x)`): it belongs to the value. */
function closesBracket(text: string, start: number, at: number, work: Work): boolean {
  const close = text.charCodeAt(at);
  const open = close === 93 ? 91 : close === CLOSE_PAREN ? OPEN_PAREN : close === 125 ? 123 : -1;
  if (open < 0) return false;
  work.steps += at - start;
  for (let i = start; i < at; i++) if (text.charCodeAt(i) === open) return true;
  return false;
}

/** The value at `start` is a prose word followed by another word. */
function isProse(text: string, start: number, end: number): boolean {
  if (end - start > 8 || !isSpace(text.charCodeAt(end)) || !isAlpha(text.charCodeAt(end + 1))) return false;
  return PROSE_WORDS.has(text.slice(start, end).toLowerCase());
}

function isPlaceholder(value: string): boolean {
  if (value.length <= 12 && NOT_SECRET_VALUES.has(value.toLowerCase())) return true;
  if (value.startsWith('${') || (value.startsWith('[') && value.endsWith(']') && value.length <= 32)) return true;
  for (let i = 0; i < value.length; i++) if (value[i] !== '*' && value[i] !== '•') return false;
  return true;
}

/**
 * `password: hunter2`, `secret=…`, `"api_key": "…"`, `Authorization: Bearer …`, `DB_PASSWORD=…` and the
 * password in `scheme://user:password@host`. The value is masked; the name stays, so a reader knows
 * what was there.
 */
export const detectSecretValues: Detector = (text, work, options) => {
  const pairs: Span[] = [];
  forEachRun(text, work, isTokenChar, (start, end) => {
    if (end - start > MAX_NAME_LENGTH) return;
    // The separator first (cheap, and most words have none), then the name.
    const separator = separatorAfter(text, end, work);
    if (!separator) return;
    let i = separator.at;
    const name = text.slice(start, end);
    work.steps += name.length;
    if (!isSecretName(name, options.secretWords)) return;
    if (!separator.soft) {
      i++;
      if (text.charCodeAt(i) === EQUALS || text.charCodeAt(i) === GREATER) i++; // := => ==
      for (let s = 0; s < 4 && isHorizontalSpace(text.charCodeAt(i)); s++) i++;
    }
    const value = secretValueAt(text, i, isSecretAuthorizationName(name), work);
    if (!value) return i;
    // Without a colon (`password is …`), only a value that looks like a password: `…is sunflower77`, not `…is incorrect`.
    const prose = isProse(text, value.start, value.end) || (separator.soft && !looksLikePassword(text, value.start, value.end));
    if (!prose && !isPlaceholder(text.slice(value.start, value.end))) pairs.push({ start: value.start, end: value.end, detector: 'secret' });
    return prose ? value.start : value.next;
  });
  return mergeSorted(pairs, detectUrlPasswords(text, work));
};

/**
 * Where the `:` or `=` after a name is: after an optional closing quote and up to 4 spaces, or after up
 * to three filler words (`password is now: …`). Without a colon, `is`/`was` themselves separate softly
 * (`the wifi password is sunflower77`): `at` is then the value's start. Looks at most ~60 characters.
 */
function separatorAfter(text: string, end: number, work: Work): { at: number; soft: boolean } | undefined {
  let i = end;
  const q = text.charCodeAt(i);
  if (q === 34 || q === 39) i++; // the closing quote of a quoted name: "password": …
  for (let s = 0; s < 4 && isHorizontalSpace(text.charCodeAt(i)); s++) i++;
  let c = text.charCodeAt(i);
  let lastFiller = '';
  for (let words = 0; words < 3 && i > end && isAlpha(c); words++) {
    let j = i;
    while (j < text.length && j - i < 7 && isAlpha(text.charCodeAt(j))) j++;
    work.steps += j - i;
    const word = text.slice(i, j).toLowerCase();
    if (isAlpha(text.charCodeAt(j)) || !FILLER_WORDS.has(word)) break;
    lastFiller = word;
    i = j;
    for (let s = 0; s < 4 && isHorizontalSpace(text.charCodeAt(i)); s++) i++;
    c = text.charCodeAt(i);
  }
  work.steps += i - end + 1;
  if (c === COLON || c === EQUALS) return { at: i, soft: false };
  if ((lastFiller === 'is' || lastFiller === 'was' || lastFiller === 'now') && i > end && !isSpace(c) && !Number.isNaN(c)) return { at: i, soft: true };
  return undefined;
}

/** 6+ characters with a digit, a symbol, or both cases: what a password looks like and an adjective does not. */
function looksLikePassword(text: string, start: number, end: number): boolean {
  if (end - start < 6) return false;
  let upper = false,
    lower = false;
  for (let i = start; i < end; i++) {
    const c = text.charCodeAt(i);
    if (isDigit(c) || !isAlnum(c)) return true;
    upper ||= isUpper(c);
    lower ||= isLower(c);
  }
  return upper && lower;
}

function isSecretAuthorizationName(name: string): boolean {
  const words = nameWords(name);
  const last = words[words.length - 1];
  return last === 'authorization' || last === 'auth';
}

/** The value starting at `i`: quoted (up to its closing quote, on one line) or a run up to a space. */
function secretValueAt(text: string, i: number, authorization: boolean, work: Work): { start: number; end: number; next: number } | undefined {
  const quote = text.charCodeAt(i);
  if (quote === 34 || quote === 39 || quote === 96) {
    let j = i + 1;
    while (j < text.length && j - i <= 1024) {
      const c = text.charCodeAt(j);
      work.steps++;
      if (c === 92)
        j += 2; // backslash escape
      else if (c === quote || c === 10 || c === 13) break;
      else j++;
    }
    if (text.charCodeAt(j) === quote) return j > i + 1 ? { start: i + 1, end: j, next: j + 1 } : undefined;
    i++; // unterminated: take it as an unquoted value after the quote
  }
  let j = i;
  while (j < text.length) {
    const c = text.charCodeAt(j);
    if (isSpace(c) || VALUE_STOP.has(c) || (c === AMPERSAND && parameterFollows(text, j, work))) break;
    j++;
    work.steps++;
  }
  const next = j;
  // `Authorization: Bearer abc…`: the credential is the scheme and the word after it.
  if (authorization && AUTH_SCHEMES.has(text.slice(i, j).toLowerCase()) && text.charCodeAt(j) === SPACE) {
    j++;
    while (j < text.length && !isSpace(text.charCodeAt(j)) && !VALUE_STOP.has(text.charCodeAt(j))) {
      j++;
      work.steps++;
    }
  }
  let end = j;
  while (end > i && TRAILING_PUNCTUATION.has(text.charCodeAt(end - 1)) && !closesBracket(text, i, end - 1, work)) {
    end--;
    work.steps++;
  }
  return end > i ? { start: i, end, next: Math.max(next, j) } : undefined;
}

/** The password of `scheme://user:password@host`. */
function detectUrlPasswords(text: string, work: Work): Span[] {
  const spans: Span[] = [];
  let from = 0;
  while (from < text.length) {
    const at = text.indexOf('://', from);
    work.steps += (at < 0 ? text.length : at) - from + 1;
    if (at < 0) break;
    let i = at + 3;
    let colon = -1;
    // userinfo: up to 256 characters without a space, `/`, `?`, `#` or `@`, then `@`.
    while (i < text.length && i - at <= 256) {
      const c = text.charCodeAt(i);
      if (isSpace(c) || c === SLASH || c === 63 || c === 35 || c === AT) break;
      if (c === COLON && colon < 0) colon = i;
      i++;
    }
    work.steps += i - at;
    if (text.charCodeAt(i) === AT && colon >= 0 && i > colon + 1) spans.push({ start: colon + 1, end: i, detector: 'secret' });
    from = i > at + 3 ? i : at + 3;
  }
  return spans;
}
