/**
 * The scoring policy's text processing (scoring.ts): stop words, a light English stemmer, the tokenizer
 * (words, particles, joined forms, entities) and the bigrams of a token sequence. Pure.
 */

/**
 * Function words and generic request verbs: they say nothing about which agent should answer.
 * Domain words are left to the IDF weighting, which discounts whatever the whole team shares.
 */
const STOP_WORDS = new Set(
  `a about above after again against all am an and any are as at be because been before being below between
  both but by can cannot could did do does doing done down during each few for from further had has have having
  he her here hers herself him himself his how i if in into is it its itself just me more most my myself no nor
  not now of on once only or other ought our ours ourselves out over own same she should so some such than that
  the their theirs them themselves then there these they this those through to too under until up very was we
  were what when where which while who whom why will with would you your yours yourself yourselves
  also am anyone anything anyway around actually already always another else etc even ever every everything
  get gets getting got gotten give gives go goes going gone hi hey hello ok okay please pls thanks thank thx
  really still sure something someone somebody somewhere thing things way want wants wanted need needs needed
  like would could might must shall may let lets make makes made know knows tell told say said see help helps
  able much many lot lots one ones yes yeah hmm well kind sort maybe instead via per us im ive id youre dont
  doesnt didnt cant couldnt wont wouldnt isnt arent wasnt werent hasnt havent hadnt shouldnt`.split(/\s+/),
);

const VOWELS = new Set(['a', 'e', 'i', 'o', 'u']);

/**
 * A light, deterministic English stemmer: plural, -ing, -ed, -ly, -ment, -ation, a trailing -e or -y, and
 * doubled final consonants. It only has to map a word and its variants to the same key, not to a real word:
 * booking/booked/books -> book, cancellation/cancelled -> cancel, recipes/recipe -> recip, sunny -> sun.
 */
export function stem(word: string): string {
  let w = word.toLowerCase();
  if (w.length <= 3 || !/^[a-z]+$/.test(w)) return w;
  // Plurals and third person.
  if (w.endsWith('ies') && w.length > 4) w = `${w.slice(0, -3)}y`;
  else if (w.endsWith('sses')) w = w.slice(0, -2);
  else if (w.endsWith('es') && /(?:s|x|z|ch|sh)es$/.test(w)) w = w.slice(0, -2);
  else if (w.endsWith('s') && !/(?:ss|us|is)$/.test(w)) w = w.slice(0, -1);
  // Past tense and gerund.
  if (w.endsWith('ied') && w.length > 4) w = `${w.slice(0, -3)}y`;
  else if (w.endsWith('ed') && w.length - 2 >= 3) w = w.slice(0, -2);
  else if (w.endsWith('ing') && w.length - 3 >= 3) w = w.slice(0, -3);
  // A few derivations that carry the same intent.
  if (w.endsWith('ment') && w.length - 4 >= 3) w = w.slice(0, -4);
  else if (w.endsWith('ation') && w.length - 5 >= 3) w = w.slice(0, -5);
  else if (w.endsWith('ly') && w.length - 2 >= 4) w = w.slice(0, -2);
  // Normalise the ending: drop a final e, a final consonant-y, then a doubled consonant.
  if (w.endsWith('e') && w.length > 3) w = w.slice(0, -1);
  else if (w.endsWith('y') && w.length > 4 && !VOWELS.has(w.charAt(w.length - 2))) w = w.slice(0, -1);
  const last = w.charAt(w.length - 1);
  if (w.length > 3 && last === w.charAt(w.length - 2) && !VOWELS.has(last)) w = w.slice(0, -1);
  return w;
}

export interface Token {
  /** The stemmed key used for matching. */
  readonly stem: string;
  /** The word as written, for the reasoning. */
  readonly surface: string;
  /**
   * A particle ("off", "in", "back"): it only counts inside a phrase ("time off", "sign in", "money back"),
   * never as a word on its own.
   */
  readonly particle?: boolean;
  /**
   * A capitalised word inside a sentence of an example ("Seattle", "Friday", "PayPal"): a slot value, not
   * intent. Only set when tokenising with `{ entities: true }`.
   */
  readonly entity?: boolean;
  /** The joined form of a hyphenated word (`check-in` -> checkin): a word of its own, not part of phrases. */
  readonly joined?: boolean;
}

/** Particles of phrasal verbs and phrases: kept for bigrams, not scored alone (checked before the stop words). */
const PARTICLES = new Set(['off', 'out', 'up', 'down', 'in', 'on', 'over', 'back', 'away']);

export interface TokenizeOptions {
  /** Mark capitalised words that do not start a sentence as entities (for agent card examples). */
  entities?: boolean;
}

/**
 * Splits on anything but letters, digits and hyphens, lowercases, removes stop words, bare numbers and
 * one-letter words, and stems. A hyphenated word yields its parts and its joined form (`check-in` -> check,
 * checkin). Particles are kept, flagged, for phrases.
 */
export function tokenize(text: string, options: TokenizeOptions = {}): Token[] {
  const normalised = text
    .replace(/[\u2018\u2019\u02bc]/g, "'")
    .replace(/'s\b/gi, '')
    .replace(/\bcan't\b/gi, 'cannot')
    .replace(/\bwon't\b/gi, 'will not')
    .replace(/n't\b/gi, ' not')
    .replace(/'/g, '');
  const tokens: Token[] = [];
  const push = (raw: string, flags: { entity: boolean; joined?: boolean }): void => {
    if (raw.length < 2 || /^\d+$/.test(raw)) return;
    if (PARTICLES.has(raw)) {
      if (!flags.joined) tokens.push({ stem: raw, surface: raw, particle: true });
      return;
    }
    if (STOP_WORDS.has(raw)) return;
    tokens.push({
      stem: stem(raw),
      surface: raw,
      ...(flags.entity ? { entity: true } : {}),
      ...(flags.joined ? { joined: true } : {}),
    });
  };
  let sentenceStart = true;
  for (const match of normalised.matchAll(/[\p{L}\p{N}-]+|[.?!]/gu)) {
    const raw = match[0];
    if (raw === '.' || raw === '?' || raw === '!') {
      sentenceStart = true;
      continue;
    }
    const entity = Boolean(options.entities) && !sentenceStart && /^\p{Lu}/u.test(raw) && raw !== 'I';
    sentenceStart = false;
    const parts = raw.toLowerCase().split('-').filter(Boolean);
    for (const part of parts) push(part, { entity });
    if (parts.length > 1) push(parts.join(''), { entity, joined: true });
  }
  return tokens;
}

/** The tokens that count as words on their own. */
export const words = (tokens: readonly Token[]): Token[] => tokens.filter((t) => !t.particle);

/**
 * Adjacent pairs (particles included, joined forms not), as `a b` keys. Two particles make no phrase, and a
 * pair with an entity is a slot value, not a phrase.
 */
export function bigramsOf(tokens: readonly Token[]): string[] {
  const seq = tokens.filter((t) => !t.joined);
  const out: string[] = [];
  for (let i = 1; i < seq.length; i++) {
    const a = seq[i - 1]!;
    const b = seq[i]!;
    if ((a.particle && b.particle) || a.entity || b.entity) continue;
    out.push(`${a.stem} ${b.stem}`);
  }
  return out;
}
