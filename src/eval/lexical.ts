/**
 * Lexical metrics of an answer against a ground truth, each 0–1, computed here (no model involved).
 * Each follows a published definition and the reference implementation named with it, so scores agree
 * with what people get from those tools (test/eval.lexical.test.ts checks values computed with them).
 *
 * Tokens: `f1_score` normalises as the SQuAD evaluation script does (below); the others take lower-cased
 * runs of letters and digits (`"Don't stop!"` → `don`, `t`, `stop`), which for ASCII text is also what
 * Google's `rouge-score` tokenizer produces.
 */
import { stemmer } from 'stemmer';

/** Answers and ground truths are cut to this many tokens before scoring (LCS and alignment are quadratic). */
const MAX_SCORED_TOKENS = 5_000;

/** Lower-cased runs of letters and digits. */
export function tokens(text: string): string[] {
  return (text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []).slice(0, MAX_SCORED_TOKENS);
}

function counts(items: readonly string[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const t of items) m.set(t, (m.get(t) ?? 0) + 1);
  return m;
}

function overlap(a: Map<string, number>, b: Map<string, number>): number {
  let n = 0;
  for (const [k, v] of a) n += Math.min(v, b.get(k) ?? 0);
  return n;
}

// ---------------------------------------------------------------------------------------------------
// F1 — SQuAD token F1 (Rajpurkar et al. 2016, "SQuAD: 100,000+ Questions for Machine Comprehension of
// Text"; the official evaluate-v2.0.py): lower-case, drop ASCII punctuation, drop the articles a, an,
// the, split on whitespace; F1 of the multiset overlap of tokens. When either side has no tokens, 1 if
// both have none, else 0.

const ASCII_PUNCTUATION = /[!"#$%&'()*+,\-./:;<=>?@[\\\]^_`{|}~]/g;

export function squadTokens(text: string): string[] {
  return text
    .toLowerCase()
    .replace(ASCII_PUNCTUATION, '')
    .replace(/\b(?:a|an|the)\b/g, ' ')
    .split(/\s+/)
    .filter(Boolean)
    .slice(0, MAX_SCORED_TOKENS);
}

export function f1Score(answer: string, truth: string): number {
  const pred = squadTokens(answer);
  const gold = squadTokens(truth);
  if (pred.length === 0 || gold.length === 0) return pred.length === gold.length ? 1 : 0;
  const same = overlap(counts(pred), counts(gold));
  if (same === 0) return 0;
  const precision = same / pred.length;
  const recall = same / gold.length;
  return (2 * precision * recall) / (precision + recall);
}

// ---------------------------------------------------------------------------------------------------
// BLEU — Papineni et al. 2002, "BLEU: a Method for Automatic Evaluation of Machine Translation": the
// geometric mean of the modified (clipped) n-gram precisions p1…p4 with uniform weights, times the
// brevity penalty BP = 1 if c > r, else exp(1 − r/c). One reference, one sentence, so a zero count is
// smoothed as in Chen & Cherry 2014 ("A Systematic Comparison of Smoothing Techniques for
// Sentence-Level BLEU"), method 1: pₙ = ε / (n-grams of the answer) with ε = 0.1 — NLTK's
// `sentence_bleu(..., smoothing_function=SmoothingFunction().method1)`, including its rules that no
// unigram in common scores 0 and that pₙ's denominator is at least 1.

function ngrams(items: readonly string[], n: number): Map<string, number> {
  const m = new Map<string, number>();
  for (let i = 0; i + n <= items.length; i++) {
    const key = items.slice(i, i + n).join('\u0000');
    m.set(key, (m.get(key) ?? 0) + 1);
  }
  return m;
}

export function bleuScore(answer: string, truth: string, maxN = 4, epsilon = 0.1): number {
  const hyp = tokens(answer);
  const ref = tokens(truth);
  if (hyp.length === 0) return 0;
  let logSum = 0;
  for (let n = 1; n <= maxN; n++) {
    const h = ngrams(hyp, n);
    const matched = overlap(h, ngrams(ref, n));
    const total = Math.max(1, hyp.length - n + 1);
    if (n === 1 && matched === 0) return 0;
    logSum += Math.log((matched === 0 ? epsilon : matched) / total) / maxN;
  }
  const bp = hyp.length > ref.length ? 1 : Math.exp(1 - ref.length / hyp.length);
  return bp * Math.exp(logSum);
}

// ---------------------------------------------------------------------------------------------------
// ROUGE — ROUGE-L (Lin 2004, "ROUGE: A Package for Automatic Evaluation of Summaries", §3.1): from the
// longest common subsequence of answer and truth, P = LCS/|answer|, R = LCS/|truth|, and the F-measure
// with β = 1, F = 2PR/(P + R) — the `rougeL` F-measure of Google's `rouge-score` (no stemming).

function lcsLength(a: readonly string[], b: readonly string[]): number {
  if (a.length === 0 || b.length === 0) return 0;
  let prev = new Uint32Array(b.length + 1);
  let row = new Uint32Array(b.length + 1);
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) row[j] = a[i - 1] === b[j - 1] ? prev[j - 1]! + 1 : Math.max(prev[j]!, row[j - 1]!);
    [prev, row] = [row, prev];
  }
  return prev[b.length]!;
}

export function rougeLScore(answer: string, truth: string): number {
  const hyp = tokens(answer);
  const ref = tokens(truth);
  const lcs = lcsLength(hyp, ref);
  if (lcs === 0) return 0;
  const precision = lcs / hyp.length;
  const recall = lcs / ref.length;
  return (2 * precision * recall) / (precision + recall);
}

// ---------------------------------------------------------------------------------------------------
// METEOR — Banerjee & Lavie 2005, "METEOR: An Automatic Metric for MT Evaluation with Improved
// Correlation with Human Judgments": unigrams aligned in stages — exact, then Porter stems (Porter
// 1980) — then Fmean = P·R / (α·P + (1 − α)·R) with α = 0.9 (the paper's 10PR / (R + 9P)), a
// fragmentation penalty γ·(chunks / matches)^β with γ = 0.5, β = 3, and score = Fmean·(1 − penalty).
// The alignment and chunk count are NLTK's `single_meteor_score` (each answer word, from the last, takes
// the last unmatched equal word of the truth); NLTK's third stage, WordNet synonyms, is not done here,
// so a synonym that NLTK would match is not matched.

type Enumerated = Array<[number, string]>;

function matchEnums(hyp: Enumerated, ref: Enumerated): Array<[number, number]> {
  const matches: Array<[number, number]> = [];
  for (let i = hyp.length - 1; i >= 0; i--) {
    for (let j = ref.length - 1; j >= 0; j--) {
      if (hyp[i]![1] === ref[j]![1]) {
        matches.push([hyp[i]![0], ref[j]![0]]);
        hyp.splice(i, 1);
        ref.splice(j, 1);
        break;
      }
    }
  }
  return matches;
}

export function meteorScore(answer: string, truth: string, alpha = 0.9, beta = 3, gamma = 0.5): number {
  const hypTokens = tokens(answer);
  const refTokens = tokens(truth);
  const hyp: Enumerated = hypTokens.map((t, i) => [i, t]);
  const ref: Enumerated = refTokens.map((t, i) => [i, t]);
  const exact = matchEnums(hyp, ref);
  const stemmed = matchEnums(
    hyp.map(([i, t]) => [i, stemmer(t)]),
    ref.map(([i, t]) => [i, stemmer(t)]),
  );
  const matches = [...exact, ...stemmed].sort((a, b) => a[0] - b[0]);
  if (matches.length === 0 || hypTokens.length === 0 || refTokens.length === 0) return 0;
  const precision = matches.length / hypTokens.length;
  const recall = matches.length / refTokens.length;
  const fmean = (precision * recall) / (alpha * precision + (1 - alpha) * recall);
  let chunks = 1;
  for (let i = 0; i < matches.length - 1; i++) {
    if (!(matches[i + 1]![0] === matches[i]![0] + 1 && matches[i + 1]![1] === matches[i]![1] + 1)) chunks++;
  }
  const penalty = gamma * (chunks / matches.length) ** beta;
  return (1 - penalty) * fmean;
}

export const LEXICAL_SCORERS = {
  f1_score: f1Score,
  bleu: bleuScore,
  rouge: rougeLScore,
  meteor: meteorScore,
} as const;
