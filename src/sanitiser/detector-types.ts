/** What every detector is: its id, the spans it finds, the work it counts, its options; and merging spans. */

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

interface DetectorOptions {
  /** Extra key names (lowercase words) that mark a secret, besides password, token, api key, … */
  secretWords: ReadonlySet<string>;
}

export type Detector = (text: string, work: Work, options: DetectorOptions) => Span[];

/** Merges two lists of spans, each sorted by start, into one sorted list (linear). */
export function mergeSorted(a: Span[], b: Span[]): Span[] {
  if (a.length === 0) return b;
  if (b.length === 0) return a;
  const out: Span[] = [];
  let i = 0,
    j = 0;
  while (i < a.length || j < b.length) {
    if (j >= b.length || (i < a.length && a[i]!.start <= b[j]!.start)) out.push(a[i++]!);
    else out.push(b[j++]!);
  }
  return out;
}
