/**
 * A campaign of cluster chaos runs: test/cluster.chaos.nats.test.ts run again and again, each run's output
 * kept, and a tally of what they printed. One run is thousands of turns and 20 node kills; a path that loses
 * or repeats an answer once in ten runs passes most single runs, so the evidence for "0 lost, 0 duplicated"
 * is a campaign (docs/cluster.md).
 *
 *   npx tsx scripts/chaos-campaign.ts --runs 20 [--out .tmp/campaign] [--keep-logs]
 *   npx tsx scripts/chaos-campaign.ts --minutes 120 --evidence docs/evidence/cluster-campaign-<date>.jsonl --machine "2 cores, shared"
 *   npx tsx scripts/chaos-campaign.ts --tally .tmp/campaign      # only the tally of runs already made
 *
 * Each run writes `<out>/run-<n>.log` (the suite's output); the nodes' logs of a run with a problem (at
 * debug with --keep-logs, else at info) are copied to `<out>/run-<n>-nodes/`, and with --keep-logs those
 * of a run whose takeover median exceeds --slow-ms (default 7000) too. The tally goes to stdout and `<out>/tally.json`. With --evidence, each run's line
 * is appended to that JSONL file as the run ends (a failed run too, with its cause) and the tally line
 * after the last: the file docs/cluster.md quotes. Exit code: 0 when every run passed with 0 lost, 0
 * duplicated and no call id executed twice, 1 otherwise, 2 on bad arguments.
 */
import { execFileSync, spawn } from 'node:child_process';
import { appendFileSync, cpSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseArgs, stripVTControlCharacters } from 'node:util';

/** What the suite counted (its `[cluster-chaos] figures {…}` line); see test/cluster.chaos.nats.test.ts. */
export interface ChaosFigures {
  attempted?: number;
  /** Answered on `out` or, failing that, in the stored history. */
  answered?: number;
  /** Answered on `out` (the system delivered it), seen by the client or an observer on some server. */
  deliveredOnOut?: number;
  /** Of those, on `out` before the harness sent any copy of the message. */
  deliveredBeforeCopy?: number;
  /** Answers found only in the stored history, never on `out`. */
  storeOnly?: number;
  /** Answers the harness read from the store (some were on `out` too, missed by its subscriber). */
  recovered?: number;
  lost?: number;
  duplicated?: number;
  /** Messages the harness sent again for want of an answer, and the copies it sent. */
  resent?: number;
  copies?: number;
  /** Messages read from the store or sent again, and the bound the suite holds them to. */
  helped?: number;
  helpBound?: number;
  /** Agent executions, and call ids executed more than once (a turn run twice). */
  executions?: number;
  executedTwice?: number;
  /** Of those, the ones whose executions overlap no fault (a turn run twice but as a recovery). */
  executedTwiceOutsideFaults?: number;
  kills?: number;
  takeover?: { minMs: number; medianMs: number; maxMs: number };
  seconds?: number;
  /** The settings the run used, as the suite printed them. */
  settings?: Record<string, unknown>;
}

export interface ChaosRun extends ChaosFigures {
  run: number;
  /** The suite passed (its assertions held and it ran to the end). */
  passed: boolean;
  /** Why a run failed: the first error vitest printed, else what is known. */
  cause?: string;
}

/** The suite's machine-readable line: `[cluster-chaos] figures {json}`. */
const FIGURES = /\[cluster-chaos\] figures (\{.*\})/;
/** The human line, for runs of the suite from before the figures line. */
const LINE =
  /turns attempted (\d+), answered (\d+) .*?lost (\d+), duplicated (\d+), sent again for want of an answer (\d+);.*?min (\d+) ms, median (\d+) ms, max (\d+) ms; whole run (\d+) s/;
/** The first error vitest reports for a failed test (an assertion, a timeout, a throw). */
const ERROR_LINE = /^\s*((?:AssertionError|[A-Z][A-Za-z]*Error|Error): .+)$/m;

/** Why a failed run failed, from its output (vitest's first error line; the caller adds an exit code if it has one). */
export function causeOf(plain: string): string {
  // vitest lists the failures under "Failed Tests", after the suite's own output (which may quote errors).
  const failures = plain.lastIndexOf('Failed Tests');
  const error = (ERROR_LINE.exec(failures >= 0 ? plain.slice(failures) : '') ?? ERROR_LINE.exec(plain))?.[1]?.trim();
  if (error) return error.length > 500 ? `${error.slice(0, 500)}…` : error;
  return /Tests\s+/.test(plain) ? 'vitest reported a failure without an error line' : 'the suite printed no test summary (it did not finish)';
}

/** What one run's output says; a run whose output has no figures line (it failed before the end) has only `passed` and its cause. */
export function parseRun(run: number, output: string): ChaosRun {
  // vitest prints the suite's summary as "Tests  1 passed (1)" (with colour codes around the words).
  const plain = stripVTControlCharacters(output);
  const passed = /Tests\s+1 passed/.test(plain) && !/Tests\s+.*failed/.test(plain);
  const base: ChaosRun = { run, passed, ...(passed ? {} : { cause: causeOf(plain) }) };
  const f = FIGURES.exec(plain);
  if (f) {
    const j = JSON.parse(f[1]!) as Omit<ChaosFigures, 'takeover'> & { takeover?: { minMs: number | null; medianMs: number | null; maxMs: number | null } };
    const { takeover: t, ...rest } = j;
    return {
      ...base,
      ...rest,
      ...(t && t.minMs !== null && t.medianMs !== null && t.maxMs !== null ? { takeover: { minMs: t.minMs, medianMs: t.medianMs, maxMs: t.maxMs } } : {}),
    };
  }
  const m = LINE.exec(plain);
  if (!m) return base;
  const n = m.slice(1).map(Number) as number[];
  return {
    ...base,
    attempted: n[0],
    answered: n[1],
    lost: n[2],
    duplicated: n[3],
    resent: n[4],
    takeover: { minMs: n[5]!, medianMs: n[6]!, maxMs: n[7]! },
    seconds: n[8],
  };
}

/**
 * Passed, with nothing lost or duplicated and no turn executed twice but as the recovery from a fault (a
 * turn whose node died before its commit runs again: docs/cluster.md); those are counted in the tally.
 */
export function isClean(r: ChaosRun): boolean {
  return r.passed && r.lost === 0 && r.duplicated === 0 && (r.executedTwiceOutsideFaults ?? 0) === 0;
}

export function tally(runs: ChaosRun[]) {
  const sum = (f: (r: ChaosRun) => number | undefined) => runs.reduce((s, r) => s + (f(r) ?? 0), 0);
  const medians = runs.flatMap((r) => (r.takeover ? [r.takeover.medianMs] : [])).sort((a, b) => a - b);
  const clean = runs.filter(isClean).length;
  return {
    runs: runs.length,
    passed: runs.filter((r) => r.passed).length,
    clean,
    problemRuns: runs.filter((r) => !isClean(r)).map((r) => r.run),
    /** Each failed run with its cause: every run made is counted, none left out. */
    failures: runs.filter((r) => !r.passed).map((r) => ({ run: r.run, cause: r.cause ?? 'unknown' })),
    turns: sum((r) => r.attempted),
    answered: sum((r) => r.answered),
    deliveredOnOut: sum((r) => r.deliveredOnOut),
    deliveredBeforeCopy: sum((r) => r.deliveredBeforeCopy),
    storeOnly: sum((r) => r.storeOnly),
    recovered: sum((r) => r.recovered),
    lost: sum((r) => r.lost),
    duplicated: sum((r) => r.duplicated),
    resent: sum((r) => r.resent),
    copies: sum((r) => r.copies),
    executions: sum((r) => r.executions),
    executedTwice: sum((r) => r.executedTwice),
    executedTwiceOutsideFaults: sum((r) => r.executedTwiceOutsideFaults),
    kills: sum((r) => r.kills),
    takeoverMedianMs: medians.length ? { min: medians[0]!, median: medians[Math.floor(medians.length / 2)]!, max: medians.at(-1)! } : undefined,
    /**
     * With k problem runs in n, the one-sided 95% upper bound on the chance that a run has a problem
     * (exact binomial for k = 0: 1 - 0.05^(1/n), the "rule of three" ≈ 3/n).
     */
    problemRateUpper95: runs.length === 0 ? 1 : clean === runs.length ? 1 - Math.pow(0.05, 1 / runs.length) : undefined,
  };
}

/** Where a run was made, for its evidence line. */
export interface RunContext {
  date: string;
  commit: string;
  command: string;
  machine: string;
}

/** One run's line of the evidence JSONL. */
export function evidenceLine(r: ChaosRun, ctx: RunContext): string {
  return JSON.stringify({ kind: 'run', date: ctx.date, commit: ctx.commit, command: ctx.command, machine: ctx.machine, ...r });
}

/** The tally's line of the evidence JSONL (after every run's). */
export function tallyLine(runs: ChaosRun[], ctx: RunContext): string {
  return JSON.stringify({ kind: 'tally', date: ctx.date, commit: ctx.commit, command: ctx.command, machine: ctx.machine, ...tally(runs) });
}

const SUITE_COMMAND = 'npx vitest run test/cluster.chaos.nats.test.ts --maxWorkers=1';

function runOnce(out: string, n: number, keepLogs: boolean): Promise<{ output: string; code: number | null }> {
  return new Promise((resolve) => {
    // 20 node kills per run (the suite's default is fewer, to keep CI short).
    const env = {
      ...process.env,
      CLUSTER_CHAOS_KILLS: process.env.CLUSTER_CHAOS_KILLS ?? '20',
      ...(keepLogs ? { CLUSTER_CHAOS_LOG_LEVEL: process.env.CLUSTER_CHAOS_LOG_LEVEL ?? 'debug', CLUSTER_CHAOS_KEEP_LOGS: '1' } : {}),
    };
    const [cmd, ...args] = SUITE_COMMAND.split(' ');
    const child = spawn(cmd!, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => void (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => void (output += d.toString()));
    child.on('close', (code) => {
      writeFileSync(join(out, `run-${n}.log`), output);
      resolve({ output, code });
    });
  });
}

function print(runs: ChaosRun[], out: string): ReturnType<typeof tally> {
  const t = tally(runs);
  for (const r of runs) {
    const head = `run ${String(r.run).padStart(3)}  ${isClean(r) ? 'clean  ' : 'PROBLEM'}`;
    process.stdout.write(
      r.attempted === undefined
        ? `${head}  no figures (the suite ${r.passed ? 'passed' : `failed: ${r.cause}`})\n`
        : `${head}  turns ${r.attempted}  on out ${r.deliveredOnOut ?? '?'}  store only ${r.storeOnly ?? '?'}  lost ${r.lost}  duplicated ${r.duplicated}  ` +
            `executed twice ${r.executedTwice ?? '?'} (${r.executedTwiceOutsideFaults ?? '?'} outside faults)  resent ${r.resent}  takeover median ${r.takeover?.medianMs} ms (max ${r.takeover?.maxMs})` +
            `${r.passed ? '' : `  failed: ${r.cause}`}\n`,
    );
  }
  process.stdout.write(
    `\n${t.runs} runs, ${t.passed} passed, ${t.clean} clean${t.problemRuns.length ? ` (problems in runs ${t.problemRuns.join(', ')})` : ''}; ` +
      `${t.turns} turns, on out ${t.deliveredOnOut} (${t.deliveredBeforeCopy} before any copy), store only ${t.storeOnly}, lost ${t.lost}, duplicated ${t.duplicated}, ` +
      `executed twice ${t.executedTwice} (${t.executedTwiceOutsideFaults} outside faults), resent ${t.resent} (${t.copies} copies)` +
      (t.takeoverMedianMs ? `; takeover medians ${t.takeoverMedianMs.min}–${t.takeoverMedianMs.max} ms (median ${t.takeoverMedianMs.median})` : '') +
      (t.problemRateUpper95 !== undefined ? `; a problem run is at most ${(100 * t.problemRateUpper95).toFixed(1)}% likely (95% bound)` : '') +
      '\n',
  );
  writeFileSync(join(out, 'tally.json'), `${JSON.stringify({ ...t, each: runs }, null, 2)}\n`);
  return t;
}

/** The commit the runs are made at, `-dirty` when the tree has changes (the runs then are not of that commit alone). */
function commitOf(): string {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' }).trim();
    return dirty ? `${head}-dirty` : head;
  } catch {
    return 'unknown';
  }
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
        evidence: { type: 'string' },
        machine: { type: 'string' },
        'keep-logs': { type: 'boolean', default: false },
        'slow-ms': { type: 'string', default: '7000' },
      },
    }).values;
  } catch (err) {
    process.stderr.write(
      `${(err as Error).message}\nusage: npx tsx scripts/chaos-campaign.ts --runs N | --minutes M | --tally DIR [--out DIR] [--keep-logs] [--evidence FILE --machine TEXT]\n`,
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
  if (args.evidence && !args.machine) {
    process.stderr.write('--evidence needs --machine (the cores, and whether the machine was shared or busy)\n');
    return 2;
  }
  mkdirSync(args.out, { recursive: true });
  const ctx: RunContext = {
    date: new Date().toISOString().slice(0, 10),
    commit: commitOf(),
    command: `CLUSTER_CHAOS_KILLS=${process.env.CLUSTER_CHAOS_KILLS ?? '20'} ${SUITE_COMMAND}`,
    machine: args.machine ?? '',
  };
  if (args.evidence) mkdirSync(dirname(args.evidence), { recursive: true });
  const runs: ChaosRun[] = [];
  for (let n = 1; n <= maxRuns && Date.now() < until; n++) {
    rmSync(join('.tmp', 'cluster-chaos'), { recursive: true, force: true });
    const { output, code } = await runOnce(args.out, n, args['keep-logs']);
    const parsed = parseRun(n, output);
    const r = parsed.passed || code === null ? parsed : { ...parsed, cause: `${parsed.cause} (exit code ${code})` };
    runs.push(r);
    if (args.evidence) appendFileSync(args.evidence, `${evidenceLine(r, ctx)}\n`);
    // The nodes' logs of a run with a problem are kept always (the next run starts by removing them); of a
    // slow one with --keep-logs.
    if ((!isClean(r) || (args['keep-logs'] && (r.takeover?.medianMs ?? 0) > slowMs)) && existsSync(join('.tmp', 'cluster-chaos'))) {
      cpSync(join('.tmp', 'cluster-chaos'), join(args.out, `run-${n}-nodes`), { recursive: true });
    }
    process.stdout.write(
      `run ${n}: ${isClean(r) ? 'clean' : 'PROBLEM'}, ${r.attempted ?? '?'} turns, lost ${r.lost ?? '?'}, duplicated ${r.duplicated ?? '?'}, executed twice ${r.executedTwice ?? '?'} (${r.executedTwiceOutsideFaults ?? '?'} outside faults)${r.passed ? '' : `; failed: ${r.cause}`}\n`,
    );
  }
  process.stdout.write('\n');
  if (args.evidence) appendFileSync(args.evidence, `${tallyLine(runs, ctx)}\n`);
  return print(runs, args.out).problemRuns.length ? 1 : 0;
}

if (import.meta.url === `file://${process.argv[1]}`) process.exitCode = await main();
