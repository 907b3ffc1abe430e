/**
 * A campaign of cluster chaos runs: test/cluster.chaos.nats.test.ts run again and again, each run's output
 * kept, and a tally of what they printed. One run is about 10,000 turns and 20 node kills; a path that loses
 * or repeats an answer once in ten runs passes most single runs, so the evidence for "0 lost, 0 duplicated"
 * is a campaign (docs/cluster.md).
 *
 *   npx tsx scripts/chaos-campaign.ts --runs 20 [--out .tmp/campaign] [--keep-logs]
 *   npx tsx scripts/chaos-campaign.ts --minutes 120
 *   npx tsx scripts/chaos-campaign.ts --tally .tmp/campaign      # only the tally of runs already made
 *
 * Each run writes `<out>/run-<n>.log` (the suite's output); with --keep-logs the nodes' debug logs of a run
 * with a problem, or whose takeover median exceeds --slow-ms (default 7000), are copied to
 * `<out>/run-<n>-nodes/`. The tally goes to stdout and `<out>/tally.json`. Exit code: 0 when every run
 * passed with 0 lost and 0 duplicated, 1 otherwise, 2 on bad arguments.
 */
import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs, stripVTControlCharacters } from 'node:util';

export interface ChaosRun {
  run: number;
  /** The suite passed (its assertions held and it ran to the end). */
  passed: boolean;
  attempted?: number;
  answered?: number;
  lost?: number;
  duplicated?: number;
  copies?: number;
  takeover?: { minMs: number; medianMs: number; maxMs: number };
  seconds?: number;
}

/** The suite's machine-readable line: `[cluster-chaos] figures {json}`. */
const FIGURES = /\[cluster-chaos\] figures (\{.*\})/;
/** The human line, for runs of the suite from before the figures line. */
const LINE =
  /turns attempted (\d+), answered (\d+) .*?lost (\d+), duplicated (\d+), sent again for want of an answer (\d+);.*?min (\d+) ms, median (\d+) ms, max (\d+) ms; whole run (\d+) s/;

/** What one run's output says; a run whose output has no summary line (it failed before the end) has only `passed`. */
export function parseRun(run: number, output: string): ChaosRun {
  // vitest prints the suite's summary as "Tests  1 passed (1)" (with colour codes around the words).
  const plain = stripVTControlCharacters(output);
  const passed = /Tests\s+1 passed/.test(plain) && !/Tests\s+.*failed/.test(plain);
  const f = FIGURES.exec(plain);
  if (f) {
    const j = JSON.parse(f[1]!) as Omit<ChaosRun, 'run' | 'passed'> & { takeover?: { minMs: number | null; medianMs: number | null; maxMs: number | null } };
    const t = j.takeover;
    return {
      run,
      passed,
      attempted: j.attempted,
      answered: j.answered,
      lost: j.lost,
      duplicated: j.duplicated,
      copies: j.copies,
      ...(t && t.minMs !== null && t.medianMs !== null && t.maxMs !== null ? { takeover: { minMs: t.minMs, medianMs: t.medianMs, maxMs: t.maxMs } } : {}),
      seconds: j.seconds,
    };
  }
  const m = LINE.exec(plain);
  if (!m) return { run, passed };
  const n = m.slice(1).map(Number) as number[];
  return {
    run,
    passed,
    attempted: n[0],
    answered: n[1],
    lost: n[2],
    duplicated: n[3],
    copies: n[4],
    takeover: { minMs: n[5]!, medianMs: n[6]!, maxMs: n[7]! },
    seconds: n[8],
  };
}

export function isClean(r: ChaosRun): boolean {
  return r.passed && r.lost === 0 && r.duplicated === 0;
}

export function tally(runs: ChaosRun[]) {
  const sum = (f: (r: ChaosRun) => number | undefined) => runs.reduce((s, r) => s + (f(r) ?? 0), 0);
  const medians = runs.flatMap((r) => (r.takeover ? [r.takeover.medianMs] : [])).sort((a, b) => a - b);
  const clean = runs.filter(isClean).length;
  return {
    runs: runs.length,
    clean,
    problemRuns: runs.filter((r) => !isClean(r)).map((r) => r.run),
    turns: sum((r) => r.attempted),
    lost: sum((r) => r.lost),
    duplicated: sum((r) => r.duplicated),
    copies: sum((r) => r.copies),
    takeoverMedianMs: medians.length ? { min: medians[0]!, median: medians[Math.floor(medians.length / 2)]!, max: medians.at(-1)! } : undefined,
    /**
     * With k problem runs in n, the one-sided 95% upper bound on the chance that a run has a problem
     * (exact binomial for k = 0: 1 - 0.05^(1/n), the "rule of three" ≈ 3/n).
     */
    problemRateUpper95: runs.length === 0 ? 1 : clean === runs.length ? 1 - Math.pow(0.05, 1 / runs.length) : undefined,
  };
}

function runOnce(out: string, n: number, keepLogs: boolean): Promise<string> {
  return new Promise((resolve) => {
    // 20 node kills per run (the suite's default is fewer, to keep CI short).
    const env = {
      ...process.env,
      CLUSTER_CHAOS_KILLS: process.env.CLUSTER_CHAOS_KILLS ?? '20',
      ...(keepLogs ? { CLUSTER_CHAOS_LOG_LEVEL: process.env.CLUSTER_CHAOS_LOG_LEVEL ?? 'debug', CLUSTER_CHAOS_KEEP_LOGS: '1' } : {}),
    };
    const child = spawn('npx', ['vitest', 'run', 'test/cluster.chaos.nats.test.ts'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => void (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => void (output += d.toString()));
    child.on('close', () => {
      writeFileSync(join(out, `run-${n}.log`), output);
      resolve(output);
    });
  });
}

function print(runs: ChaosRun[], out: string): ReturnType<typeof tally> {
  const t = tally(runs);
  for (const r of runs) {
    const head = `run ${String(r.run).padStart(3)}  ${isClean(r) ? 'clean  ' : 'PROBLEM'}`;
    process.stdout.write(
      r.attempted === undefined
        ? `${head}  no summary (the suite ${r.passed ? 'passed' : 'failed'} before printing one)\n`
        : `${head}  turns ${r.attempted}  lost ${r.lost}  duplicated ${r.duplicated}  copies ${r.copies}  takeover median ${r.takeover?.medianMs} ms (max ${r.takeover?.maxMs})\n`,
    );
  }
  process.stdout.write(
    `\n${t.runs} runs, ${t.clean} clean${t.problemRuns.length ? ` (problems in runs ${t.problemRuns.join(', ')})` : ''}; ${t.turns} turns, lost ${t.lost}, duplicated ${t.duplicated}, copies ${t.copies}` +
      (t.takeoverMedianMs ? `; takeover medians ${t.takeoverMedianMs.min}–${t.takeoverMedianMs.max} ms (median ${t.takeoverMedianMs.median})` : '') +
      (t.problemRateUpper95 !== undefined ? `; a problem run is at most ${(100 * t.problemRateUpper95).toFixed(1)}% likely (95% bound)` : '') +
      '\n',
  );
  writeFileSync(join(out, 'tally.json'), `${JSON.stringify({ ...t, each: runs }, null, 2)}\n`);
  return t;
}

async function main(): Promise<number> {
  let args;
  try {
    args = parseArgs({
      options: {
        runs: { type: 'string' },
        minutes: { type: 'string' },
        out: { type: 'string', default: join('.tmp', 'campaign') },
        tally: { type: 'string' },
        'keep-logs': { type: 'boolean', default: false },
        'slow-ms': { type: 'string', default: '7000' },
      },
    }).values;
  } catch (err) {
    process.stderr.write(
      `${(err as Error).message}\nusage: npx tsx scripts/chaos-campaign.ts --runs N | --minutes M | --tally DIR [--out DIR] [--keep-logs]\n`,
    );
    return 2;
  }
  if (args.tally) {
    if (!existsSync(args.tally)) {
      process.stderr.write(`no such directory: ${args.tally}\n`);
      return 2;
    }
    const files = readdirSync(args.tally).filter((f) => /^run-\d+\.log$/.test(f));
    const runs = files.map((f) => parseRun(Number(/\d+/.exec(f)![0]), readFileSync(join(args.tally!, f), 'utf8'))).sort((a, b) => a.run - b.run);
    return print(runs, args.tally).problemRuns.length ? 1 : 0;
  }
  const maxRuns = args.runs ? Number(args.runs) : Number.POSITIVE_INFINITY;
  const until = args.minutes ? Date.now() + Number(args.minutes) * 60_000 : Number.POSITIVE_INFINITY;
  const slowMs = Number(args['slow-ms']);
  if ((!args.runs && !args.minutes) || !(maxRuns > 0) || !(until > Date.now()) || !(slowMs > 0)) {
    process.stderr.write('give --runs N (N > 0), --minutes M (M > 0) or --tally DIR\n');
    return 2;
  }
  mkdirSync(args.out, { recursive: true });
  const runs: ChaosRun[] = [];
  for (let n = 1; n <= maxRuns && Date.now() < until; n++) {
    rmSync(join('.tmp', 'cluster-chaos'), { recursive: true, force: true });
    const r = parseRun(n, await runOnce(args.out, n, args['keep-logs']));
    runs.push(r);
    if (args['keep-logs'] && (!isClean(r) || (r.takeover?.medianMs ?? 0) > slowMs) && existsSync(join('.tmp', 'cluster-chaos'))) {
      cpSync(join('.tmp', 'cluster-chaos'), join(args.out, `run-${n}-nodes`), { recursive: true });
    }
    process.stdout.write(
      `run ${n}: ${isClean(r) ? 'clean' : 'PROBLEM'}, ${r.attempted ?? '?'} turns, lost ${r.lost ?? '?'}, duplicated ${r.duplicated ?? '?'}\n`,
    );
  }
  process.stdout.write('\n');
  return print(runs, args.out).problemRuns.length ? 1 : 0;
}

if (import.meta.url === `file://${process.argv[1]}`) process.exitCode = await main();
