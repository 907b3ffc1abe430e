/**
 * `npm run bench`: runs bench/run.ts BENCH_RUNS times (default 3), each in a fresh process on a fresh
 * nats-server, and writes
 *
 *   bench/results.json              every run in full, and `summary`: the median of each figure, with
 *                                   `spread` (min, max and every run's value) beside it
 *   bench/results/<date>.json       the same, a dated copy to commit with the docs figures it backs
 *                                   (<date>-2.json, -3… for a later series of the same day)
 *
 * then rewrites the benchmark table of docs/benchmark.md (between `<!-- bench:begin -->` and `<!-- bench:end -->`)
 * from that file (bench/readme.ts; `--no-readme` leaves it alone). Every BENCH_* setting of
 * bench/run.ts applies to each run.
 *
 *   npm run bench                      # 3 runs, defaults
 *   BENCH_RUNS=5 npm run bench
 *   BENCH_QUICK=1 npm run bench        # one run, short windows (QUICK below): the same summary keys, a quick
 *                                      # check, written to .tmp/bench-quick.json only (no dated results, no docs)
 *   npm run bench:once                 # one run of bench/run.ts, its tables and bench/results.json
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BENCHMARK_DOC, writeReadmeTable } from './readme.js';

const BENCH_DIR = import.meta.dirname;
const REPO_ROOT = join(BENCH_DIR, '..');
/** BENCH_QUICK=1: what each setting is when not set, for one short run (the figures are noisier, the keys the same). */
const QUICK: Record<string, string> = {
  BENCH_N: '400',
  BENCH_TURN_N: '200',
  BENCH_SECONDS: '1',
  BENCH_ROUNDS: '2',
  BENCH_MEM_THREADS: '300',
  BENCH_MEM_LIMIT_THREADS: '100',
  BENCH_REHYDRATE_N: '100',
  BENCH_PATTERN_HANDOFF_N: '100',
  BENCH_PATTERN_HANDOFF_WARMUP_N: '200',
  BENCH_PATTERN_ORCH_N: '20',
  BENCH_YAML_N: '100',
  BENCH_YAML_WARMUP_N: '50',
  BENCH_CLUSTER_N: '100',
  BENCH_CLUSTER_STEPDOWNS: '1',
  BENCH_TAKEOVER_KILLS: '3',
};
const quick = process.env.BENCH_QUICK === '1';
if (quick) for (const [k, v] of Object.entries(QUICK)) process.env[k] ??= v;
const runs = quick ? 1 : Number(process.env.BENCH_RUNS ?? 3);
if (!Number.isInteger(runs) || runs < 1 || runs > 20) {
  console.error(`BENCH_RUNS must be a whole number from 1 to 20, not "${process.env.BENCH_RUNS}"`);
  process.exit(2);
}

type Summary = Record<string, number | null>;
interface RunJson {
  meta: Record<string, unknown>;
  summary: Summary;
  [k: string]: unknown;
}

function runOnce(i: number): Promise<RunJson> {
  const file = join(REPO_ROOT, '.tmp', `bench-run-${i}.json`);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--conditions=source', '--import', 'tsx', join(BENCH_DIR, 'run.ts')], {
      cwd: REPO_ROOT,
      env: { ...process.env, BENCH_RESULTS_FILE: file },
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (code !== 0) return reject(new Error(`run ${i + 1} of bench/run.ts failed (${signal ?? `exit ${code}`})`));
      resolve(JSON.parse(readFileSync(file, 'utf8')) as RunJson);
    });
  });
}

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

async function main(): Promise<void> {
  mkdirSync(join(REPO_ROOT, '.tmp'), { recursive: true });
  const all: RunJson[] = [];
  for (let i = 0; i < runs; i++) {
    process.stderr.write(`\n=== bench run ${i + 1} of ${runs} ===\n`);
    all.push(await runOnce(i));
  }
  const keys = Object.keys(all[0]!.summary);
  const summary: Summary = {};
  const spread: Record<string, { min: number; max: number; values: Array<number | null> }> = {};
  for (const k of keys) {
    const values = all.map((r) => r.summary[k] ?? null);
    const measured = values.filter((v): v is number => v !== null);
    summary[k] = measured.length ? median(measured) : null;
    if (measured.length) spread[k] = { min: Math.min(...measured), max: Math.max(...measured), values };
  }
  const date = new Date().toISOString().slice(0, 10);
  const out = { meta: { ...all[0]!.meta, runs, dates: all.map((r) => r.meta['date']) }, summary, spread, runs: all };
  const json = `${JSON.stringify(out, null, 2)}\n`;
  if (quick) {
    writeFileSync(join(REPO_ROOT, '.tmp', 'bench-quick.json'), json);
    process.stdout.write('\nquick run (BENCH_QUICK=1):\n');
    for (const k of keys) process.stdout.write(`  ${k}: ${summary[k] === null ? 'not measured' : fmt(summary[k]!)}\n`);
    process.stdout.write('\nresults: .tmp/bench-quick.json\n');
    return;
  }
  writeFileSync(join(BENCH_DIR, 'results.json'), json);
  mkdirSync(join(BENCH_DIR, 'results'), { recursive: true });
  // A second series on one day gets its own file: the docs cite the earlier one by name.
  let name = `${date}.json`;
  for (let n = 2; existsSync(join(BENCH_DIR, 'results', name)); n++) name = `${date}-${n}.json`;
  writeFileSync(join(BENCH_DIR, 'results', name), json);
  process.stdout.write(`\nmedian of ${runs} runs (min – max):\n`);
  for (const k of keys) {
    const s = spread[k];
    process.stdout.write(`  ${k}: ${summary[k] === null ? 'not measured' : `${fmt(summary[k]!)} (${fmt(s!.min)} – ${fmt(s!.max)})`}\n`);
  }
  process.stdout.write(`\nresults: bench/results.json and bench/results/${name}\n`);
  if (!process.argv.includes('--no-readme')) {
    writeReadmeTable(BENCHMARK_DOC, `bench/results/${name}`, out);
    process.stdout.write('docs/benchmark.md table rewritten from it\n');
  }
}

const fmt = (x: number) => (Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 10 ? x.toFixed(1) : x.toFixed(3));

main().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : err);
  process.exitCode = 1;
});
