/**
 * Measures the sanitiser on the labelled corpus (test/fixtures/sanitiser/corpus.jsonl, built by
 * build-corpus.ts): recall per detector, precision overall and per detector, and the look-alikes it
 * masks by mistake. Prints the figures; asserts the bar (recall ≥ 99% on card numbers and on
 * keys and tokens) and floors under the rest so a regression fails.
 *
 * Read the figures with care: the corpus and the detectors have the same author, and the detectors were
 * tuned on the first 328 strings. The held-out part (ids `holdout-…`) was written afterwards and measured
 * once before any change: overall recall 83.8% (masked by some detector: 89.2%), precision 97.1%; cards
 * 7/9 (a card followed by `/12/26`; one label was wrong, 2746… is outside Mastercard's range), keys 3/5
 * under their own label (a Slack webhook URL and a SendGrid key were masked only as `[secret]`), phones
 * 6/7 (`0033 …`), secrets 3/4 (`password is sunflower77`), one false positive (a Stripe publishable
 * key). Those gaps were then fixed by rule, so today's held-out figures are no longer unseen: the first
 * ones are the better estimate for new text.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEFAULT_SANITISER_POLICY, DETECTORS, findSensitiveSpans, sanitise, type DetectorId, type ResolvedSpan } from '../src/sanitiser/sanitiser.js';

interface CorpusEntry {
  id: string;
  text: string;
  spans: Array<{ label: DetectorId; start: number; end: number; value: string }>;
  negatives: Array<{ start: number; end: number; value: string }>;
}

const corpus: CorpusEntry[] = readFileSync(new URL('./fixtures/sanitiser/corpus.jsonl', import.meta.url), 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((line) => JSON.parse(line) as CorpusEntry);

const overlaps = (a: { start: number; end: number }, b: { start: number; end: number }) => a.start < b.end && b.start < a.end;
const covers = (outer: { start: number; end: number }, inner: { start: number; end: number }) => outer.start <= inner.start && outer.end >= inner.end;

interface Tally {
  gold: number;
  found: number;
  masked: number;
  predicted: number;
  correct: number;
}

/** The held-out part was written after the detectors were tuned on the rest; its figures are reported apart. */
const isHoldout = (e: CorpusEntry) => e.id.startsWith('holdout-');

function evaluate(entries: CorpusEntry[]) {
  const tally = new Map<DetectorId, Tally>(DETECTORS.map((d) => [d, { gold: 0, found: 0, masked: 0, predicted: 0, correct: 0 }]));
  const misses: string[] = [];
  const falsePositives: string[] = [];
  let negativesHit = 0;
  let negatives = 0;
  for (const entry of entries) {
    const spans: ResolvedSpan[] = findSensitiveSpans(entry.text, { policy: DEFAULT_SANITISER_POLICY }).value;
    for (const gold of entry.spans) {
      const t = tally.get(gold.label)!;
      t.gold++;
      // Found: masked under its own label, all of it. Masked: hidden by any detector.
      if (spans.some((s) => s.detector === gold.label && covers(s, gold))) t.found++;
      else
        misses.push(
          `${entry.id} ${gold.label}: ${JSON.stringify(gold.value)} -> ${JSON.stringify(sanitise(entry.text, { policy: DEFAULT_SANITISER_POLICY }).value)}`,
        );
      if (spans.some((s) => covers(s, gold))) t.masked++;
    }
    for (const s of spans) {
      const t = tally.get(s.detector)!;
      t.predicted++;
      if (entry.spans.some((g) => overlaps(s, g))) t.correct++;
      else falsePositives.push(`${entry.id} ${s.detector}: ${JSON.stringify(entry.text.slice(s.start, s.end))}`);
    }
    for (const neg of entry.negatives) {
      negatives++;
      if (spans.some((s) => overlaps(s, neg))) negativesHit++;
    }
  }
  return { tally, misses, falsePositives, negatives, negativesHit };
}

const pct = (a: number, b: number) => (b === 0 ? 'n/a' : `${((100 * a) / b).toFixed(1)}%`);

function report(title: string, entries: CorpusEntry[], result: ReturnType<typeof evaluate>): string {
  const { tally } = result;
  const total = (f: (t: Tally) => number) => DETECTORS.reduce((n, d) => n + f(tally.get(d)!), 0);
  return [
    `${title}: ${entries.length} strings, ${total((t) => t.gold)} labelled spans, ${result.negatives} look-alikes`,
    ...DETECTORS.map((d) => {
      const t = tally.get(d)!;
      return `  ${d.padEnd(12)} gold ${String(t.gold).padStart(3)}  recall ${pct(t.found, t.gold).padStart(6)}  masked ${pct(t.masked, t.gold).padStart(6)}  precision ${pct(t.correct, t.predicted).padStart(6)} (${t.correct}/${t.predicted})`;
    }),
    `  overall recall ${pct(
      total((t) => t.found),
      total((t) => t.gold),
    )}, masked by any detector ${pct(
      total((t) => t.masked),
      total((t) => t.gold),
    )}, precision ${pct(
      total((t) => t.correct),
      total((t) => t.predicted),
    )}`,
    `  look-alikes masked: ${result.negativesHit}/${result.negatives}`,
    `  misses:`,
    ...result.misses.map((m) => `    ${m}`),
    `  false positives:`,
    ...result.falsePositives.map((m) => `    ${m}`),
  ].join('\n');
}

describe('sanitiser on the labelled corpus', () => {
  const result = evaluate(corpus);
  const { tally } = result;
  const sum = (f: (t: Tally) => number, ids: readonly DetectorId[] = DETECTORS) => ids.reduce((n, d) => n + f(tally.get(d)!), 0);
  const recall = (ids: readonly DetectorId[]) => sum((t) => t.found, ids) / sum((t) => t.gold, ids);
  const precision = sum((t) => t.correct) / sum((t) => t.predicted);
  const KEYS_AND_TOKENS: DetectorId[] = ['apiKey', 'jwt', 'bearer', 'privateKey'];

  it('has at least 200 strings, with positives for every detector and look-alikes', () => {
    expect(corpus.length).toBeGreaterThanOrEqual(200);
    for (const d of DETECTORS) expect(tally.get(d)!.gold, d).toBeGreaterThan(0);
    expect(result.negatives).toBeGreaterThanOrEqual(100);
  });

  it('prints recall per detector and precision, for the whole corpus and its held-out part', () => {
    const holdout = corpus.filter(isHoldout);
    console.log(report('sanitiser corpus (all)', corpus, result));
    console.log(report('held-out part', holdout, evaluate(holdout)));
    expect(holdout.length).toBeGreaterThan(0);
  });

  it('finds at least 99% of card numbers', () => {
    expect(recall(['card'])).toBeGreaterThanOrEqual(0.99);
  });

  it('finds at least 99% of API keys, JWTs, bearer credentials and private keys', () => {
    expect(recall(KEYS_AND_TOKENS)).toBeGreaterThanOrEqual(0.99);
    for (const d of KEYS_AND_TOKENS) expect(recall([d]), d).toBeGreaterThanOrEqual(0.99);
  });

  it('keeps recall and precision above their floors on the other detectors', () => {
    // Floors sit a little under today's figures (printed above), so a regression fails this test.
    expect(recall(['iban'])).toBeGreaterThanOrEqual(0.99);
    expect(recall(['email'])).toBeGreaterThanOrEqual(0.9);
    expect(recall(['phone'])).toBeGreaterThanOrEqual(0.9);
    expect(recall(['secret'])).toBeGreaterThanOrEqual(0.9);
    expect(recall(['highEntropy'])).toBeGreaterThanOrEqual(0.85);
    expect(precision).toBeGreaterThanOrEqual(0.9);
  });
});
