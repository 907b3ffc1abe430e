/**
 * scripts/chaos-campaign.ts reads what each chaos run printed: the figures line the suite writes (and the
 * human line of runs made before it), whether vitest passed the suite and, when not, why; tallies a
 * campaign with every run in it, and writes the lines of the evidence JSONL.
 */
import { describe, expect, it } from 'vitest';
import { causeOf, evidenceLine, isClean, parseRun, tally, tallyLine, type RunContext } from '../scripts/chaos-campaign.js';

const ESC = String.fromCharCode(27);
const passedFooter = `${ESC}[2m      Tests ${ESC}[22m ${ESC}[1m${ESC}[32m1 passed${ESC}[39m${ESC}[22m${ESC}[90m (1)${ESC}[39m`;
const failedFooter = `${ESC}[2m      Tests ${ESC}[22m ${ESC}[1m${ESC}[31m1 failed${ESC}[39m${ESC}[22m${ESC}[90m (1)${ESC}[39m`;
const settings = {
  nodeKills: 20,
  threads: 24,
  partitions: 8,
  leaseTtlMs: 5000,
  replicas: 3,
  historyLimit: 50,
  agentTimeoutMs: 30000,
  retries: 2,
  retryDelayMs: 1000,
};
const figures = (lost: number, duplicated: number, executedTwice = 0, executedTwiceOutsideFaults = 0) =>
  `[cluster-chaos] figures ${JSON.stringify({
    attempted: 9577,
    answered: 9577,
    deliveredOnOut: 9550,
    deliveredBeforeCopy: 9540,
    storeOnly: 27,
    recovered: 31,
    lost,
    duplicated,
    duplicatedByClient: duplicated,
    resent: 12,
    copies: 21,
    helped: 40,
    helpBound: 575,
    executions: 9577 + executedTwice,
    executedTwice,
    executedTwiceOutsideFaults,
    kills: 20,
    takeover: { minMs: 3493, medianMs: 4588, maxMs: 6000 },
    seconds: 169,
    settings,
  })}`;
const humanLine =
  '[cluster-chaos] turns attempted 8578, answered 8578 (12 of them read from the stored history: …), lost 0, duplicated 1, sent again for want of an answer 15; ' +
  'node kills 20, takeover (kill -9 to the answer of a message sent right after it, lease ttl 3000 ms) min 2900 ms, median 4168 ms, max 6036 ms; whole run 160 s; a thread…';
const assertionFailure =
  'stdout | [cluster-chaos] what the nodes logged about chaos-3-m7: {"err":"Error: no responders"}\n' +
  '⎯⎯⎯⎯⎯⎯⎯ Failed Tests 1 ⎯⎯⎯⎯⎯⎯⎯\n FAIL  test/cluster.chaos.nats.test.ts > chaos … > server kills …\nAssertionError: call ids the agents executed more than once outside any fault: expected [ …(1) ] to deeply equal []\n ❯ test/cluster.chaos.nats.test.ts:611:5';

describe('chaos campaign: one run', () => {
  it('reads the figures line of a passed run, every figure kept apart', () => {
    const r = parseRun(1, `stdout | …\n${figures(0, 0)}\n\n${passedFooter}\n`);
    expect(r).toEqual({
      run: 1,
      passed: true,
      attempted: 9577,
      answered: 9577,
      deliveredOnOut: 9550,
      deliveredBeforeCopy: 9540,
      storeOnly: 27,
      recovered: 31,
      lost: 0,
      duplicated: 0,
      duplicatedByClient: 0,
      resent: 12,
      copies: 21,
      helped: 40,
      helpBound: 575,
      executions: 9577,
      executedTwice: 0,
      executedTwiceOutsideFaults: 0,
      kills: 20,
      takeover: { minMs: 3493, medianMs: 4588, maxMs: 6000 },
      seconds: 169,
      settings,
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
      resent: 15,
      takeover: { minMs: 2900, medianMs: 4168, maxMs: 6036 },
      seconds: 160,
    });
    expect(isClean(r)).toBe(false);
  });

  it('a failed run keeps its figures and says why it failed', () => {
    const r = parseRun(3, `${figures(0, 0, 1, 1)}\n${assertionFailure}\n${failedFooter}`);
    expect(r).toMatchObject({
      run: 3,
      passed: false,
      executedTwiceOutsideFaults: 1,
      cause: 'AssertionError: call ids the agents executed more than once outside any fault: expected [ …(1) ] to deeply equal []',
    });
    expect(isClean(r)).toBe(false);
  });

  it('a call id executed twice outside any fault makes a run a problem run; one executed again during a fault is counted, not a problem', () => {
    expect(isClean(parseRun(4, `${figures(0, 0, 1, 1)}\n${passedFooter}`))).toBe(false);
    const recovered = parseRun(4, `${figures(0, 0, 2, 0)}\n${passedFooter}`);
    expect(isClean(recovered)).toBe(true);
    expect(tally([recovered])).toMatchObject({ executedTwice: 2, executedTwiceOutsideFaults: 0, clean: 1 });
  });

  it('a run that printed no figures is a failed run with its cause', () => {
    expect(parseRun(5, 'Error: the cluster did not start\n    at startNatsCluster')).toEqual({
      run: 5,
      passed: false,
      cause: 'Error: the cluster did not start',
    });
    expect(parseRun(6, 'stdout | [cluster-chaos] +3.1 s kill -9 of nats-server n1')).toEqual({
      run: 6,
      passed: false,
      cause: 'the suite printed no test summary (it did not finish)',
    });
    expect(causeOf(`Error: Test timed out in 600000ms.\n${failedFooter}`)).toBe('Error: Test timed out in 600000ms.');
  });
});

describe('chaos campaign: the tally and the evidence', () => {
  const clean = [1, 2, 3].map((n) => parseRun(n, `${figures(0, 0)}\n${passedFooter}`));

  it('tallies every run, and bounds the chance of a problem run only when every run was clean', () => {
    const t = tally(clean);
    expect(t).toMatchObject({
      runs: 3,
      passed: 3,
      clean: 3,
      problemRuns: [],
      failures: [],
      turns: 3 * 9577,
      deliveredOnOut: 3 * 9550,
      deliveredBeforeCopy: 3 * 9540,
      storeOnly: 3 * 27,
      recovered: 3 * 31,
      lost: 0,
      duplicated: 0,
      resent: 36,
      copies: 63,
      executedTwice: 0,
      kills: 60,
      takeoverMedianMs: { min: 4588, median: 4588, max: 4588 },
    });
    expect(t.problemRateUpper95).toBeCloseTo(1 - Math.pow(0.05, 1 / 3), 10);
    const mixed = tally([...clean, parseRun(4, `${figures(2, 0)}\n${passedFooter}`), parseRun(5, 'Error: the cluster did not start')]);
    expect(mixed).toMatchObject({
      runs: 5,
      passed: 4,
      clean: 3,
      problemRuns: [4, 5],
      lost: 2,
      failures: [{ run: 5, cause: 'Error: the cluster did not start' }],
    });
    expect(mixed.problemRateUpper95).toBeUndefined();
  });

  it('writes one JSON line per run and a tally line, each saying where it was made', () => {
    const ctx: RunContext = { date: '2026-11-29', commit: 'abc1234', command: 'CLUSTER_CHAOS_KILLS=20 npx vitest run …', machine: '2 cores, shared' };
    const failed = parseRun(4, 'Error: the cluster did not start');
    const lines = [...clean, failed].map((r) => JSON.parse(evidenceLine(r, ctx)) as Record<string, unknown>);
    expect(lines[0]).toMatchObject({ kind: 'run', date: '2026-11-29', commit: 'abc1234', machine: '2 cores, shared', run: 1, passed: true, lost: 0, settings });
    expect(lines[3]).toEqual({ kind: 'run', ...ctx, run: 4, passed: false, cause: 'Error: the cluster did not start' });
    const t = JSON.parse(tallyLine([...clean, failed], ctx)) as Record<string, unknown>;
    expect(t).toMatchObject({ kind: 'tally', commit: 'abc1234', runs: 4, passed: 3, failures: [{ run: 4, cause: 'Error: the cluster did not start' }] });
  });
});
