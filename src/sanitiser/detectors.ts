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
 * Each detector returns its spans sorted by start; `sanitiser.ts` merges the lists of all detectors and
 * resolves overlaps by the priority order of DETECTORS.
 */

/** Detector ids, highest priority first (the winner when spans of two detectors overlap). */
export const DETECTORS = ['privateKey', 'jwt', 'apiKey', 'bearer', 'secret', 'card', 'iban', 'email', 'phone', 'highEntropy'] as const;
export type DetectorId = (typeof DETECTORS)[number];

export interface Span {
  start: number;
  end: number;
  detector: DetectorId;
}

/** Work done by the scanners: one step per character examined (a machine-independent cost). */
export interface Work {
  steps: number;
}

export interface DetectorOptions {
  /** Extra key names (lowercase words) that mark a secret, besides password, token, api key, … */
  secretWords: ReadonlySet<string>;
}

export type Detector = (text: string, work: Work, options: DetectorOptions) => Span[];

// ---- character classes (on UTF-16 code units; NaN from charCodeAt past the end is in no class) ----

const isDigit = (c: number) => c >= 48 && c <= 57;
const isUpper = (c: number) => c >= 65 && c <= 90;
const isLower = (c: number) => c >= 97 && c <= 122;
const isAlpha = (c: number) => isUpper(c) || isLower(c);
const isAlnum = (c: number) => isDigit(c) || isAlpha(c);
/** Letters, digits and `_`: what glues characters into one word. Non-ASCII counts as a separator, so `卡号4111…` still splits. */
const isWord = (c: number) => isAlnum(c) || c === 95;
/** Key and token bodies: letters, digits, `_` and `-`. */
const isTokenChar = (c: number) => isWord(c) || c === 45;
/** The base64 / base64url alphabet with padding. */
const isBase64Char = (c: number) => isTokenChar(c) || c === 43 || c === 47 || c === 61;
/** RFC 6750 b64token: what may follow `Bearer `. */
const isBearerChar = (c: number) => isBase64Char(c) || c === 46 || c === 126;
const isHex = (c: number) => isDigit(c) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);
const isHorizontalSpace = (c: number) => c === 32 || c === 9;
function isSpace(c: number): boolean {
  return (
    c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff
  );
}

/** Spaces that copy-paste from web forms puts between digit groups: no-break, figure, thin, narrow no-break. */
const isGroupSpace = (c: number) => c === 32 || c === 0xa0 || c === 0x2007 || c === 0x2009 || c === 0x202f;
const PLUS = 43, MINUS = 45, DOT = 46, SLASH = 47, COLON = 58, EQUALS = 61, AT = 64, SPACE = 32;
const OPEN_PAREN = 40, CLOSE_PAREN = 41, COMMA = 44, GREATER = 62;

/**
 * Visits each maximal run of `inClass` characters. `visit` may return an index past the run's end to
 * skip text it consumed (a JWT's later segments, a secret's value); the cursor never moves back.
 */
function forEachRun(text: string, work: Work, inClass: (c: number) => boolean, visit: (start: number, end: number) => number | void): void {
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

function startsWithAt(text: string, prefix: string, at: number, work: Work): boolean {
  work.steps += prefix.length;
  return text.startsWith(prefix, at);
}

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
    let digit = false, upper = false, lower = false, punctuation = false;
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
  'password', 'passwd', 'pwd', 'pass', 'passphrase', 'secret', 'secrets', 'token', 'credential', 'credentials',
  'authorization', 'cookie', 'apikey', 'privatekey', 'accesstoken', 'refreshtoken', 'authtoken', 'secretkey',
  // Some other languages' words for password (ASCII spellings).
  'passwort', 'kennwort', 'wachtwoord', 'passord', 'senha', 'salasana', 'jelszo', 'heslo', 'sifre', 'parola', 'contrasena',
]);
/** Two last words that name a secret: `api key`, `private_key`, `AWS_SECRET_ACCESS_KEY`, … */
const SECRET_LAST_PAIRS = new Set(['api key', 'private key', 'access key', 'secret key', 'signing key', 'encryption key', 'master key', 'session key', 'client secret']);
/** Words that make a name secret wherever they stand (`SECRET_KEY_BASE`, `password_hash`)… */
const SECRET_ANYWHERE = new Set(['password', 'passwd', 'passphrase', 'secret', 'credential', 'credentials']);
/** …unless the name then describes the secret rather than holding it (`secretName`, `passwordPolicy`). */
const DESCRIPTIVE_LAST_WORDS = new Set([
  'name', 'names', 'id', 'ids', 'type', 'types', 'count', 'length', 'len', 'policy', 'hint', 'label', 'field', 'fields', 'url', 'uri',
  'path', 'file', 'ref', 'version', 'expiry', 'expires', 'expiration', 'at', 'created', 'updated', 'rotation', 'manager', 'store',
  'provider', 'arn', 'required', 'min', 'max', 'strength', 'reset', 'changed', 'set', 'enabled', 'ttl', 'age', 'prompt', 'rules',
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
    if (isUpper(c) && current && ((isLower(prev) || isDigit(prev)) || (isUpper(prev) && isLower(next)))) {
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
  'a', 'an', 'the', 'must', 'should', 'will', 'can', 'is', 'are', 'be', 'at', 'not', 'no', 'only', 'any', 'see', 'use', 'enter',
  'your', 'my', 'our', 'their', 'this', 'that', 'it', 'has', 'have', 'was', 'were', 'of', 'in', 'on', 'for', 'to', 'and', 'or', 'if',
  'what', 'which', 'how', 'when', 'where', 'please', 'minimum', 'maximum', 'min', 'max', 'same', 'too', 'very', 'never', 'always',
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
  let upper = false, lower = false;
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
      if (c === 92) j += 2; // backslash escape
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
    AD: 24, AE: 23, AL: 28, AT: 20, AZ: 28, BA: 20, BE: 16, BG: 22, BH: 22, BI: 27, BR: 29, BY: 28, CH: 21, CR: 22, CY: 28,
    CZ: 24, DE: 22, DJ: 27, DK: 18, DO: 28, EE: 20, EG: 29, ES: 24, FI: 18, FK: 18, FO: 18, FR: 27, GB: 22, GE: 22, GI: 23,
    GL: 18, GR: 27, GT: 28, HR: 21, HU: 28, IE: 22, IL: 23, IQ: 23, IS: 26, IT: 27, JO: 30, KW: 30, KZ: 20, LB: 28, LC: 32,
    LI: 21, LT: 20, LU: 20, LV: 21, LY: 25, MC: 27, MD: 24, ME: 22, MK: 19, MN: 20, MR: 27, MT: 31, MU: 30, NI: 28, NL: 18,
    NO: 15, OM: 23, PK: 24, PL: 28, PS: 29, PT: 25, QA: 29, RO: 24, RS: 22, RU: 33, SA: 24, SC: 31, SD: 18, SE: 24, SI: 19,
    SK: 24, SM: 27, SO: 23, ST: 25, SV: 28, TL: 23, TN: 24, TR: 26, UA: 29, VA: 22, VG: 24, XK: 20, YE: 30,
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
  'png', 'jpg', 'jpeg', 'gif', 'svg', 'webp', 'ico', 'bmp', 'pdf', 'doc', 'docx', 'xls', 'xlsx', 'csv', 'json', 'yaml', 'yml', 'css',
  'scss', 'js', 'mjs', 'cjs', 'ts', 'tsx', 'jsx', 'txt', 'log', 'lock', 'html', 'xml', 'tgz',
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
function bestPhoneWindow(
  text: string,
  groups: DigitGroups,
  k: number,
  plus: boolean,
  lastGlued: boolean,
  keyword: boolean,
  work: Work,
): number | undefined {
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
    let upper = false, lower = false, digit = false, allHex = true;
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

/** Merges two lists of spans, each sorted by start, into one sorted list (linear). */
export function mergeSorted(a: Span[], b: Span[]): Span[] {
  if (a.length === 0) return b;
  if (b.length === 0) return a;
  const out: Span[] = [];
  let i = 0, j = 0;
  while (i < a.length || j < b.length) {
    if (j >= b.length || (i < a.length && a[i]!.start <= b[j]!.start)) out.push(a[i++]!);
    else out.push(b[j++]!);
  }
  return out;
}
