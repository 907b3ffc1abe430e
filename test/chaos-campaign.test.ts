/**
 * scripts/chaos-campaign.ts reads what each chaos run printed: the figures line the suite writes (and the
 * human line of runs made before it), whether vitest passed the suite, and tallies a campaign.
 */
import { describe, expect, it } from 'vitest';
import { isClean, parseRun, tally } from '../scripts/chaos-campaign.js';

const ESC = String.fromCharCode(27);
const passedFooter = `${ESC}[2m      Tests ${ESC}[22m ${ESC}[1m${ESC}[32m1 passed${ESC}[39m${ESC}[22m${ESC}[90m (1)${ESC}[39m`;
const failedFooter = `${ESC}[2m      Tests ${ESC}[22m ${ESC}[1m${ESC}[31m1 failed${ESC}[39m${ESC}[22m${ESC}[90m (1)${ESC}[39m`;
const figures = (lost: number, duplicated: number) =>
  `[cluster-chaos] figures ${JSON.stringify({ attempted: 9577, answered: 9577, recovered: 31, lost, duplicated, copies: 21, kills: 20, takeover: { minMs: 3493, medianMs: 4588, maxMs: 6000 }, seconds: 169 })}`;
const humanLine =
  '[cluster-chaos] turns attempted 8578, answered 8578 (12 of them read from the stored history: …), lost 0, duplicated 1, sent again for want of an answer 15; ' +
  'node kills 20, takeover (kill -9 to the answer of a message sent right after it, lease ttl 3000 ms) min 2900 ms, median 4168 ms, max 6036 ms; whole run 160 s; a thread…';

describe('chaos campaign tally', () => {
  it('reads the figures line of a passed run', () => {
    const r = parseRun(1, `stdout | …\n${figures(0, 0)}\n\n${passedFooter}\n`);
    expect(r).toEqual({
      run: 1,
      passed: true,
      attempted: 9577,
      answered: 9577,
      lost: 0,
      duplicated: 0,
      copies: 21,
      takeover: { minMs: 3493, medianMs: 4588, maxMs: 6000 },
      seconds: 169,
    });
    expect(isClean(r)).toBe(true);
  });

  it('reads the human line of a run made before the figures line', () => {
    const r = parseRun(2, `${humanLine}\n${passedFooter}`);
    expect(r).toMatchObject({
      passed: true,
      attempted: 8578,
      lost: 0,
      duplicated: 1,
      copies: 15,
      takeover: { minMs: 2900, medianMs: 4168, maxMs: 6036 },
      seconds: 160,
    });
    expect(isClean(r)).toBe(false);
  });

  it('a failed suite or one that printed nothing is a problem run', () => {
    expect(isClean(parseRun(3, `${figures(0, 0)}\n${failedFooter}`))).toBe(false);
    expect(parseRun(4, 'Error: the cluster did not start')).toEqual({ run: 4, passed: false });
  });

  it('tallies runs, and bounds the chance of a problem run only when every run was clean', () => {
    const clean = [1, 2, 3].map((n) => parseRun(n, `${figures(0, 0)}\n${passedFooter}`));
    const t = tally(clean);
    expect(t).toMatchObject({ runs: 3, clean: 3, problemRuns: [], turns: 3 * 9577, lost: 0, duplicated: 0, copies: 63 });
    expect(t.problemRateUpper95).toBeCloseTo(1 - Math.pow(0.05, 1 / 3), 10);
    const mixed = tally([...clean, parseRun(4, `${figures(2, 0)}\n${passedFooter}`)]);
    expect(mixed).toMatchObject({ runs: 4, clean: 3, problemRuns: [4], lost: 2 });
    expect(mixed.problemRateUpper95).toBeUndefined();
  });
});
