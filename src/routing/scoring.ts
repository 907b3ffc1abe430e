/**
 * Router policies: what picks an agent for a message that names no recipient.
 *
 * A policy returns a {@link RouterDecision}: the best agent, a confidence in [0, 1], a human reasoning and,
 * for a message that asks several agents several things, `additionalAgents` to fan out to. The router
 * machine compares the confidence with the policy's threshold (0.7 by default): at or above, it routes
 * (and fans out to the additional agents); below, it asks the user to clarify.
 *
 * {@link ScoringPolicy} is deterministic and local: it scores the agents' cards (name, description, skills'
 * names, descriptions, tags and examples) against the message with a TF-IDF-like weighting across the
 * team. The LLM policy (`llm-policy.ts`) sits behind the same interface (`policy.ts`).
 *
 * Pure: no I/O, no clock, no randomness. The scoring policy keeps the index of the last team it saw.
 */
import type { AgentCard, RouterDecision } from '../protocol/index.js';
import { DEFAULT_CONFIDENCE_THRESHOLD, requireAgents, routingText, type RouterPolicy, type RouterPolicyInput } from './policy.js';
import { bigramsOf, stem, tokenize, words, type Token } from './text.js';

export { stem, tokenize, type Token } from './text.js';

// ---------------------------------------------------------------------------------------------------------
// The team index

/** How much one occurrence of a word in each field of a card counts. Tags and examples are the most telling. */
const FIELD_WEIGHTS = {
  name: 2,
  description: 1,
  skillName: 1.5,
  skillDescription: 1,
  tag: 3,
  /**
   * Per word of an example. Examples are phrased like real requests and so carry incidental words (cities,
   * days, "tomorrow"); a word only one example has counts little, a word the examples share or that the
   * tags confirm counts a lot, and the example as a whole adds the phrase-level similarity below.
   */
  example: 1,
} as const;

/** Raw field weight -> [0, 1): a tag (3) gives 0.7, a description word (1) 0.33, tag + example 0.86. */
const saturate = (raw: number): number => 1 - Math.exp(-raw / 2.5);

/** Weight of a matching bigram relative to a matching word (it comes on top of its two words). */
const BIGRAM_FACTOR = 1;
/**
 * Weight of the best whole-example similarity (idf-weighted cosine) added to the score; it only counts when
 * the message shares at least two words with that example, so one incidental word does not look like a paraphrase.
 */
const EXAMPLE_FACTOR = 0.6;
const EXAMPLE_MIN_OVERLAP = 2;
/** A word the team does not know may still match a known word sharing a long prefix, at this discount. */
const PREFIX_DISCOUNT = 0.6;
/** Weight of an entity (a slot value such as a city or a day) in an example, relative to the example's other words. */
const ENTITY_FACTOR = 0.25;
const MIN_PREFIX = 5;

/**
 * Frequent English words that rarely say on their own which agent is meant ("work", "right", "problem",
 * "new"): a background-corpus prior, on top of the team IDF. Their weight is halved unless the agent lists
 * the very word as a one-word tag (then the card's author meant it). Chosen from general word-frequency
 * lists, not from any team.
 */
const COMMON_WORDS = new Set(
  `time day week month year today people person thing way work job problem issue question answer information
  info part place point number fact reason result example kind type side end bit stuff matter case home world
  life hand head name line level area group system new old good great bad big small little long short right
  wrong left last next first same different fine real whole full easy hard high low early late best better own
  possible important general current usual normal simple main certain recent use try call ask look find take
  put keep start show turn move run set happen mean seem feel think talk come option detail change update check`
    .split(/\s+/)
    .filter(Boolean)
    .map(stem),
);
const COMMON_DISCOUNT = 0.5;

interface Field {
  /** Weight of each word. */
  readonly weight: number;
  /** Weight of each adjacent pair (defaults to `weight`). */
  readonly bigramWeight?: number;
  readonly tokens: Token[];
}

/** What is scored: a whole card, or one skill of it together with the card's name and description. */
interface Profile {
  /** stem -> weight in [0, 1). */
  readonly terms: Map<string, number>;
  readonly bigrams: Map<string, number>;
  /** One set of stems per example. */
  readonly examples: Array<Set<string>>;
}

interface AgentProfile {
  readonly card: AgentCard;
  readonly whole: Profile;
  /** One per skill; empty for a card without skills (the whole card is scored then). */
  readonly skills: Array<{ readonly name: string; readonly profile: Profile }>;
}

export interface MatchedTerm {
  /** The stemmed key. */
  readonly term: string;
  /** The word as the user wrote it. */
  readonly surface: string;
  /** Its contribution to the agent's score. */
  readonly contribution: number;
}

export interface AgentScore {
  readonly agentId: string;
  readonly score: number;
  /** The message words that matched the card, largest contribution first. */
  readonly matched: MatchedTerm[];
  /** The skill that matched best, when the card has skills and any matched. */
  readonly skill?: string;
  /** The part of `score` that comes from earlier messages of the thread (see `historyWeight`). */
  readonly fromHistory?: number;
}

/**
 * A request usually targets one skill: an agent scores as its best skill plus this share of whatever the rest
 * of its card adds. Words scattered over unrelated skills ("room" in hotels, "show" in trips) count less than
 * words that belong together ("printer", "laptop" in network and devices).
 */
const CROSS_SKILL_SHARE = 0.3;

function cardFields(card: AgentCard): Field[] {
  return [
    { weight: FIELD_WEIGHTS.name, tokens: tokenize(`${card.name} ${card.id}`) },
    { weight: FIELD_WEIGHTS.description, tokens: tokenize(card.description) },
  ];
}

function skillFields(skill: AgentCard['skills'][number]): Field[] {
  const fields: Field[] = [
    { weight: FIELD_WEIGHTS.skillName, tokens: tokenize(`${skill.name} ${skill.id}`) },
    { weight: FIELD_WEIGHTS.skillDescription, tokens: tokenize(skill.description) },
  ];
  for (const tag of skill.tags) {
    // A multi-word tag is a phrase: the phrase (as bigrams) keeps the full weight, while its words alone
    // share it ("tenant rights" says little about "right now").
    const tokens = tokenize(tag);
    const n = Math.max(1, words(tokens).length);
    fields.push({ weight: FIELD_WEIGHTS.tag / Math.sqrt(n), bigramWeight: FIELD_WEIGHTS.tag, tokens });
  }
  for (const example of skill.examples ?? []) {
    fields.push({ weight: FIELD_WEIGHTS.example, tokens: tokenize(example, { entities: true }) });
  }
  return fields;
}

function buildProfile(fields: readonly Field[], examples: readonly string[], oneWordTags: ReadonlySet<string>): Profile {
  const rawTerms = new Map<string, number>();
  const rawBigrams = new Map<string, number>();
  for (const field of fields) {
    // A word counts once per field, so a long description cannot outweigh a tag by repetition.
    const fieldTerms = new Map<string, number>();
    for (const t of words(field.tokens)) {
      const w = field.weight * (t.entity ? ENTITY_FACTOR : 1);
      fieldTerms.set(t.stem, Math.max(fieldTerms.get(t.stem) ?? 0, w));
    }
    for (const [s, w] of fieldTerms) rawTerms.set(s, (rawTerms.get(s) ?? 0) + w);
    const bigramWeight = field.bigramWeight ?? field.weight;
    for (const b of new Set(bigramsOf(field.tokens))) rawBigrams.set(b, (rawBigrams.get(b) ?? 0) + bigramWeight);
  }
  const terms = new Map<string, number>();
  for (const [term, raw] of rawTerms) {
    const damp = COMMON_WORDS.has(term) && !oneWordTags.has(term) ? COMMON_DISCOUNT : 1;
    terms.set(term, saturate(raw) * damp);
  }
  const bigrams = new Map([...rawBigrams].map(([k, v]) => [k, saturate(v)] as const));
  const exampleSets = examples.map(
    (ex) =>
      new Set(
        words(tokenize(ex, { entities: true }))
          .filter((t) => !t.entity)
          .map((t) => t.stem),
      ),
  );
  return { terms, bigrams, examples: exampleSets };
}

function buildAgentProfile(card: AgentCard): AgentProfile {
  const oneWordTags = new Set(
    card.skills.flatMap((skill) =>
      skill.tags
        .map((tag) => words(tokenize(tag)))
        .filter((t) => t.length === 1)
        .map((t) => t[0]!.stem),
    ),
  );
  const base = cardFields(card);
  const whole = buildProfile(
    [...base, ...card.skills.flatMap(skillFields)],
    card.skills.flatMap((s) => s.examples ?? []),
    oneWordTags,
  );
  const skills = card.skills.map((skill) => ({
    name: skill.name,
    profile: buildProfile([...base, ...skillFields(skill)], skill.examples ?? [], oneWordTags),
  }));
  return { card, whole, skills };
}

interface Query {
  /** message stem -> the known key it resolves to, and a discount for prefix matches. */
  readonly resolved: Map<string, { key: string; discount: number }>;
  readonly surfaces: Map<string, string>;
  readonly bigrams: Set<string>;
  /** The message as an idf-weighted vector, for the example similarity. */
  readonly vector: Map<string, number>;
  readonly norm: number;
}

/** The agents' cards, indexed for scoring. Built per decision; cheap for teams of tens of agents. */
export class TeamIndex {
  private readonly profiles: AgentProfile[];
  /** stem or bigram -> normalised inverse document frequency in (0, 1]. */
  private readonly idf = new Map<string, number>();
  private readonly prefixCache = new Map<string, string | undefined>();

  constructor(agents: readonly AgentCard[]) {
    this.profiles = agents.map(buildAgentProfile);
    const n = this.profiles.length;
    const df = new Map<string, number>();
    for (const { whole } of this.profiles) {
      for (const key of [...whole.terms.keys(), ...whole.bigrams.keys()]) df.set(key, (df.get(key) ?? 0) + 1);
    }
    // idf = ln((N+1)/df) / ln(N+1): 1 for a word only one agent has, near 0 for a word every agent has.
    const norm = Math.log(n + 1);
    for (const [key, count] of df) this.idf.set(key, Math.log((n + 1) / count) / norm);
  }

  get size(): number {
    return this.profiles.length;
  }

  /** The weight of a term across the team; 0 for a term no agent knows. */
  idfOf(term: string): number {
    return this.idf.get(term) ?? 0;
  }

  /** A known term sharing a long prefix with an unknown one (reimbursable ~ reimburs), if any. */
  private prefixMatch(term: string): string | undefined {
    if (this.prefixCache.has(term)) return this.prefixCache.get(term);
    let best: string | undefined;
    let bestLen = 0;
    if (term.length >= MIN_PREFIX) {
      for (const known of this.idf.keys()) {
        if (known.includes(' ') || known.length < MIN_PREFIX) continue;
        let common = 0;
        const max = Math.min(term.length, known.length);
        while (common < max && term.charCodeAt(common) === known.charCodeAt(common)) common++;
        if (common >= MIN_PREFIX && common >= 0.75 * max && common > bestLen) {
          best = known;
          bestLen = common;
        }
      }
    }
    // The index may live long (the policy caches it): keep the cache of unknown words bounded.
    if (this.prefixCache.size >= 10_000) this.prefixCache.clear();
    this.prefixCache.set(term, best);
    return best;
  }

  private query(tokens: readonly Token[]): Query {
    // Unique stems, remembering the first way the user wrote each.
    const surfaces = new Map<string, string>();
    for (const t of words(tokens)) if (!surfaces.has(t.stem)) surfaces.set(t.stem, t.surface);
    const resolved = new Map<string, { key: string; discount: number }>();
    for (const s of surfaces.keys()) {
      if (this.idf.has(s)) resolved.set(s, { key: s, discount: 1 });
      else {
        const near = this.prefixMatch(s);
        if (near) resolved.set(s, { key: near, discount: PREFIX_DISCOUNT });
      }
    }
    const vector = new Map<string, number>();
    for (const { key, discount } of resolved.values()) vector.set(key, Math.max(vector.get(key) ?? 0, this.idfOf(key) * discount));
    return { resolved, surfaces, bigrams: new Set(bigramsOf(tokens)), vector, norm: Math.hypot(...vector.values()) };
  }

  private scoreProfile(profile: Profile, q: Query): { score: number; matched: MatchedTerm[] } {
    const matched: MatchedTerm[] = [];
    let score = 0;
    for (const [s, { key, discount }] of q.resolved) {
      const w = profile.terms.get(key);
      if (!w) continue;
      const contribution = this.idfOf(key) * w * discount;
      score += contribution;
      matched.push({ term: key, surface: q.surfaces.get(s)!, contribution });
    }
    for (const b of q.bigrams) {
      const w = profile.bigrams.get(b);
      if (w) score += BIGRAM_FACTOR * this.idfOf(b) * w;
    }
    if (q.norm > 0) {
      let best = 0;
      for (const example of profile.examples) {
        let dot = 0;
        let norm = 0;
        let overlap = 0;
        for (const s of example) {
          const idf = this.idfOf(s);
          norm += idf * idf;
          const m = q.vector.get(s) ?? 0;
          if (m > 0) overlap++;
          dot += idf * m;
        }
        if (norm > 0 && overlap >= EXAMPLE_MIN_OVERLAP) best = Math.max(best, dot / (Math.sqrt(norm) * q.norm));
      }
      score += EXAMPLE_FACTOR * best;
    }
    matched.sort((a, b) => b.contribution - a.contribution);
    return { score, matched };
  }

  /** Scores every agent against the tokens; agents in input order. */
  score(tokens: readonly Token[]): AgentScore[] {
    const q = this.query(tokens);
    return this.profiles.map(({ card, whole, skills }) => {
      const all = this.scoreProfile(whole, q);
      let best: { score: number; name: string } | undefined;
      for (const skill of skills) {
        const s = this.scoreProfile(skill.profile, q).score;
        if (!best || s > best.score) best = { score: s, name: skill.name };
      }
      if (!best) return { agentId: card.id, score: all.score, matched: all.matched };
      const score = best.score + CROSS_SKILL_SHARE * Math.max(0, all.score - best.score);
      return { agentId: card.id, score, matched: all.matched, ...(best.score > 0 ? { skill: best.name } : {}) };
    });
  }
}

// ---------------------------------------------------------------------------------------------------------
// Calibration

/**
 * Evidence strength of the best score, a logistic in the score: one distinctive tag word (score ~0.7-1.0)
 * is strong evidence (>= 0.9); a lone description word (~0.33) is weak (< 0.4).
 */
const STRENGTH_MIDPOINT = 0.45;
const STRENGTH_SLOPE = 10;
export const evidenceStrength = (best: number): number => 1 / (1 + Math.exp(-STRENGTH_SLOPE * (best - STRENGTH_MIDPOINT)));

/**
 * How much the best agent dominates the runner-up, from their ratio r = second / best: 1 when alone,
 * 0.5 on a tie, 0.94 at r = 0.5, 0.71 at r = 0.8.
 */
const DOMINANCE_EXPONENT = 4;
export const dominance = (best: number, second: number): number => {
  if (best <= 0) return 0;
  const r = Math.max(0, second) / best;
  return 1 / (1 + r ** DOMINANCE_EXPONENT);
};

/** Splits a message into the clauses a user uses to ask several things at once. */
export function splitClauses(text: string): string[] {
  return text
    .split(/[?!;\n]+|[.:,](?=\s|$)|\s[-\u2013\u2014]\s|\b(?:and|also|plus|then|but|as well as)\b/i)
    .map((c) => c.trim())
    .filter((c) => c.length > 0);
}

// ---------------------------------------------------------------------------------------------------------
// The scoring policy

export interface ScoringPolicyOptions {
  /** Confidence at or above which the router routes instead of asking the user. Default 0.7. */
  threshold?: number;
  /**
   * Weight of earlier user messages (most recent first, halved each step back, at most three) added to the
   * agents' scores, so a short follow-up ("and on Saturday?") stays with the topic. Default 0.5; 0 turns it off.
   */
  historyWeight?: number;
}

/** An additional agent must score at least this share of the best agent's score on the whole message. */
const ADDITIONAL_MIN_RATIO = 0.2;

export class ScoringPolicy implements RouterPolicy {
  readonly name = 'scoring';
  readonly threshold: number;
  private readonly historyWeight: number;
  /** The index of the last team seen: the registry's team rarely changes between messages. */
  private cached: { fingerprint: string; index: TeamIndex } | undefined;

  constructor(options: ScoringPolicyOptions = {}) {
    const threshold = options.threshold ?? DEFAULT_CONFIDENCE_THRESHOLD;
    if (!(threshold >= 0 && threshold <= 1)) throw new RangeError(`threshold must be within [0, 1], got ${threshold}`);
    this.threshold = threshold;
    this.historyWeight = Math.max(0, options.historyWeight ?? 0.5);
  }

  /** Every agent's score for the message (history included), best first. For clarification prompts and tooling. */
  rank(input: RouterPolicyInput): AgentScore[] {
    requireAgents(input.agents, this.name);
    return this.rankWith(this.indexFor(input.agents), input);
  }

  async decide(input: RouterPolicyInput): Promise<RouterDecision> {
    requireAgents(input.agents, this.name);
    const index = this.indexFor(input.agents);
    const text = routingText(input.message);
    const order = this.rankWith(index, input);
    const best = order[0]!;
    const second = order[1];
    const secondScore = second?.score ?? 0;

    const strength = evidenceStrength(best.score);
    const dom = dominance(best.score, secondScore);
    const singleConfidence = strength * dom;

    // Several requests in one message: each clause with its own confident winner.
    const multi = this.multiIntent(index, text, order);
    if (multi && multi.agents.length > 1) {
      const [primary, ...additional] = multi.agents;
      return {
        agentId: primary!.agentId,
        confidence: round(multi.confidence),
        reasoning: this.explainMulti(multi),
        additionalAgents: additional.map((a) => a.agentId),
      };
    }

    return {
      agentId: best.agentId,
      confidence: round(singleConfidence),
      reasoning: this.explainSingle(best, second, strength, dom, singleConfidence),
    };
  }

  private indexFor(agents: readonly AgentCard[]): TeamIndex {
    const fingerprint = JSON.stringify(agents.map((a) => [a.id, a.name, a.description, a.skills]));
    if (this.cached?.fingerprint !== fingerprint) this.cached = { fingerprint, index: new TeamIndex(agents) };
    return this.cached.index;
  }

  /** Agents ordered by score, best first (ties: input order). */
  private rankWith(index: TeamIndex, input: RouterPolicyInput): AgentScore[] {
    const scores = index.score(tokenize(routingText(input.message)));
    // Earlier user messages, most recent first; the agents' replies are not evidence of what the user wants.
    const recent = (input.history ?? [])
      .filter((m) => m.role === 'user' && m.messageId !== input.message.messageId)
      .slice(-3)
      .reverse();
    if (this.historyWeight === 0 || recent.length === 0) return sortScores(scores);
    const bonus = scores.map(() => 0);
    recent.forEach((m, i) => {
      const weight = this.historyWeight / 2 ** i;
      index.score(tokenize(routingText(m))).forEach((h, j) => {
        bonus[j]! += weight * h.score;
      });
    });
    return sortScores(scores.map((s, j) => (bonus[j]! > 0 ? { ...s, score: s.score + bonus[j]!, fromHistory: bonus[j]! } : s)));
  }

  private multiIntent(index: TeamIndex, text: string, order: AgentScore[]): MultiIntent | undefined {
    const clauses = splitClauses(text);
    if (clauses.length < 2) return undefined;
    const bestScore = order[0]!.score;
    const winners = new Map<string, ClauseWinner>();
    for (const clause of clauses) {
      const ranked = sortScores(index.score(tokenize(clause)));
      const top = ranked[0]!;
      const confidence = evidenceStrength(top.score) * dominance(top.score, ranked[1]?.score ?? 0);
      if (confidence < this.threshold) continue;
      const whole = order.find((s) => s.agentId === top.agentId)!;
      if (whole.score < ADDITIONAL_MIN_RATIO * bestScore) continue;
      const previous = winners.get(top.agentId);
      if (!previous || previous.confidence < confidence) winners.set(top.agentId, { agentId: top.agentId, clause, confidence, whole, top });
    }
    if (winners.size < 2) return undefined;
    // Primary: the one scoring best on the whole message.
    const agents = [...winners.values()].sort((a, b) => b.whole.score - a.whole.score);
    return { agents, confidence: Math.min(...agents.map((a) => a.confidence)) };
  }

  private explainSingle(best: AgentScore, second: AgentScore | undefined, strength: number, dom: number, confidence: number): string {
    const terms = termList(best.matched);
    const history = best.fromHistory ? `earlier messages in the thread (+${best.fromHistory.toFixed(2)})` : '';
    const skill = best.skill ? ` (skill "${best.skill}")` : '';
    const head =
      terms || history
        ? `${best.agentId}${skill} matches ${[terms, history].filter(Boolean).join(' and ')} (score ${best.score.toFixed(2)})`
        : `no agent's card matches a word of the message (${best.agentId} is only the first listed)`;
    const runnerUp =
      second && second.score > 0
        ? `; runner-up ${second.agentId} (${second.score.toFixed(2)}${second.matched.length ? `: ${termList(second.matched)}` : ''})`
        : '';
    const verdict =
      confidence >= this.threshold
        ? 'clear match'
        : strength < 0.5
          ? 'weak evidence: the message may be for none of these agents'
          : dom < 0.75
            ? `ambiguous between ${best.agentId} and ${second?.agentId ?? 'others'}`
            : 'not enough evidence';
    return `${head}${runnerUp}. Confidence ${confidence.toFixed(2)} = evidence ${strength.toFixed(2)} x margin ${dom.toFixed(2)}: ${verdict}.`;
  }

  private explainMulti(multi: MultiIntent): string {
    const parts = multi.agents.map((a) => `"${a.clause}" -> ${a.agentId} (${termList(a.top.matched)}; confidence ${a.confidence.toFixed(2)})`);
    return `The message asks ${multi.agents.length} things: ${parts.join('; ')}. Confidence ${multi.confidence.toFixed(2)} is the lowest of the parts.`;
  }
}

interface ClauseWinner {
  agentId: string;
  clause: string;
  confidence: number;
  /** The agent's score on the whole message. */
  whole: AgentScore;
  /** The agent's score on its clause. */
  top: AgentScore;
}

interface MultiIntent {
  agents: ClauseWinner[];
  confidence: number;
}

function sortScores(scores: readonly AgentScore[]): AgentScore[] {
  return scores
    .map((s, i) => ({ s, i }))
    .sort((a, b) => b.s.score - a.s.score || a.i - b.i)
    .map(({ s }) => s);
}

function termList(matched: readonly MatchedTerm[], max = 5): string {
  const seen = new Set<string>();
  const words: string[] = [];
  for (const m of matched) {
    if (seen.has(m.surface)) continue;
    seen.add(m.surface);
    words.push(`"${m.surface}"`);
    if (words.length === max) break;
  }
  return words.join(', ');
}

const round = (x: number): number => Math.round(Math.min(1, Math.max(0, x)) * 1000) / 1000;
