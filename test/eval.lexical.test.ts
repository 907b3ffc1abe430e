/**
 * The lexical metrics of `troupe eval` against known values. BLEU and METEOR values were computed with
 * NLTK 3.8 on the same tokens (`sentence_bleu([truth], answer, smoothing_function=SmoothingFunction()
 * .method1)`; `single_meteor_score(truth, answer, wordnet=<no synonyms>)`, Porter stemmer in either
 * mode), F1 with the SQuAD v2.0 evaluation script's normalisation and F1, ROUGE-L with its LCS
 * definition (one case worked by hand below). They agree to the last printed digit.
 */
import { describe, expect, it } from 'vitest';
import { bleuScore, f1Score, meteorScore, rougeLScore, squadTokens, tokens } from '../src/eval/lexical.js';

const CASES: Array<{ answer: string; truth: string; f1: number; bleu: number; rouge: number; meteor: number }> = [
  {
    answer: 'Order A-1001 has shipped and arrives on Friday.',
    truth: 'Order A-1001 has shipped and should arrive on Friday.',
    f1: 0.823529411764706,
    bleu: 0.5911602603314157,
    rouge: 0.8421052631578948,
    meteor: 0.9041027559546079,
  },
  {
    answer: 'The cat sat on the mat',
    truth: 'The cat is sitting on the mat',
    f1: 0.6666666666666665,
    bleu: 0.21506254256566312,
    rouge: 0.7692307692307692,
    meteor: 0.7014492753623188,
  },
  {
    // NLTK's own doctest pair for METEOR (0.6944).
    answer: 'It is a guide to action which ensures that the military always obeys the commands of the party',
    truth: 'It is a guide to action that ensures that the military will forever heed Party commands',
    f1: 0.7142857142857143,
    bleu: 0.4208598069524091,
    rouge: 0.6470588235294118,
    meteor: 0.6944444444444445,
  },
  // "steeping"/"steep" and "teas"/"tea" match only through their stems.
  {
    answer: 'steeping green teas for two minutes',
    truth: 'Steep green tea for one to two minutes',
    f1: 0.5714285714285715,
    bleu: 0.07356556000975763,
    rouge: 0.5714285714285715,
    meteor: 0.754985754985755,
  },
  { answer: 'nothing in common', truth: 'completely different words', f1: 0, bleu: 0, rouge: 0, meteor: 0 },
];

describe('lexical metrics', () => {
  it.each(CASES)('scores $answer against $truth', ({ answer, truth, f1, bleu, rouge, meteor }) => {
    expect(f1Score(answer, truth)).toBeCloseTo(f1, 12);
    expect(bleuScore(answer, truth)).toBeCloseTo(bleu, 12);
    expect(rougeLScore(answer, truth)).toBeCloseTo(rouge, 12);
    expect(meteorScore(answer, truth)).toBeCloseTo(meteor, 12);
  });

  it('gives 1 for an answer equal to the truth, and 0 for an empty answer', () => {
    const truth = 'Steep green tea for two minutes at 80 degrees.';
    for (const score of [f1Score, bleuScore, rougeLScore]) expect(score(truth, truth)).toBeCloseTo(1, 12);
    // METEOR keeps its fragmentation penalty even for one chunk: 1 − 0.5·(1/9)³.
    expect(meteorScore(truth, truth)).toBeCloseTo(1 - 0.5 * (1 / 9) ** 3, 12);
    for (const score of [f1Score, bleuScore, rougeLScore, meteorScore]) expect(score('', truth)).toBe(0);
  });

  it('ROUGE-L by hand: LCS of "the cat sat on the mat" and "the cat is sitting on the mat" is 5 (the cat on the mat)', () => {
    // P = 5/6, R = 5/7, F = 2PR/(P+R) = 10/13.
    expect(rougeLScore('the cat sat on the mat', 'the cat is sitting on the mat')).toBeCloseTo(10 / 13, 12);
  });

  it('tokenises as the definitions say', () => {
    expect(squadTokens('The Order, A-1001: shipped an hour ago!')).toEqual(['order', 'a1001', 'shipped', 'hour', 'ago']);
    expect(tokens("Don't stop — Größe 42!")).toEqual(['don', 't', 'stop', 'größe', '42']);
    // SQuAD: both empty is a match, one empty is not.
    expect(f1Score('the', 'a')).toBe(1);
    expect(f1Score('the', 'tea')).toBe(0);
  });
});
