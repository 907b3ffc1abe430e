/**
 * Writes the benchmark table of docs/benchmark.md from a results file of bench/series.ts, between the markers
 * `<!-- bench:begin -->` and `<!-- bench:end -->`, so every figure the docs quote is in a committed file.
 *
 *   node --conditions=source --import tsx bench/readme.ts bench/results/2026-11-26.json
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, relative, resolve } from 'node:path';

/** The page that holds the table. */
export const BENCHMARK_DOC = resolve(import.meta.dirname, '..', 'docs', 'benchmark.md');

interface SeriesJson {
  meta: Record<string, unknown>;
  summary: Record<string, number | null>;
  spread: Record<string, { min: number; max: number }>;
}

type Unit = 'ratio' | 'us' | 'ms' | 'bytes' | 'rate';
/** Each figure: what it is, its unit, and the target the hot-path issue set (if any). */
const FIGURES: Array<{ key: string; label: string; unit: Unit; target?: { op: '>=' | '<='; value: number } }> = [
  { key: 'hopThroughputVsRaw', label: 'agent hop throughput, 64 in flight, ÷ raw request-reply', unit: 'ratio', target: { op: '>=', value: 0.8 } },
  { key: 'hopP50VsRaw', label: 'agent hop p50 ÷ raw request-reply p50', unit: 'ratio', target: { op: '<=', value: 1.2 } },
  { key: 'hopFloorThroughputVsRaw', label: "the floor of a hop's guarantees (validation at both edges, no agent host), 64 in flight, ÷ raw", unit: 'ratio' },
  { key: 'hopFloorP50VsRaw', label: "the floor of a hop's guarantees, p50 ÷ raw p50", unit: 'ratio' },
  {
    key: 'durableTurnThroughputVsRawTurn',
    label: 'durable full turn throughput, 64 threads, ÷ the raw turn (same NATS work)',
    unit: 'ratio',
    target: { op: '>=', value: 0.5 },
  },
  {
    key: 'durableTurnFloorThroughputVsRawTurn',
    label: "the floor of a durable turn's guarantees (the raw turn + validation, XState actor, record, status stream, answered marker), 64 threads, ÷ raw turn",
    unit: 'ratio',
  },
  { key: 'durableTurnP50VsRawTurn', label: 'durable full turn p50 ÷ raw turn p50', unit: 'ratio' },
  { key: 'durableTurnsPerSecond', label: 'durable full turns per second (one process)', unit: 'rate' },
  { key: 'multiProcessTurnsPerSecond', label: 'durable full turns per second, node / agent / client in 3 processes', unit: 'rate' },
  { key: 'multiProcessTurnThroughputVsRawTurn', label: 'multi-process turn throughput ÷ raw turn', unit: 'ratio' },
  { key: 'embeddedTurnsPerSecond', label: 'embedded full turns per second (no NATS)', unit: 'rate', target: { op: '>=', value: 10_000 } },
  {
    key: 'threadMachineTurnsPerSecond',
    label: 'the thread machine alone, turns per second (its children, no host, transport or store: the floor of the embedded turn)',
    unit: 'rate',
  },
  {
    key: 'embeddedTurnFloorPerSecond',
    label:
      "the embedded turn's guarantees alone (validation at every edge, an XState turn of the thread's shape calling over the memory transport, record checked and encoded, status stream), turns per second",
    unit: 'rate',
  },
  {
    key: 'xstateTurnFloorPerSecond',
    label: "an XState turn of the thread's shape (a child machine invoking a promise), turns per second: the floor of the thread machine",
    unit: 'rate',
  },
  { key: 'liveIdleThreadBytes', label: 'live idle thread on a durable node (heap + buffers)', unit: 'bytes', target: { op: '<=', value: 4_096 } },
  { key: 'xstateRootActorBytes', label: 'a started XState root actor of a one-state machine (the floor of a live thread)', unit: 'bytes' },
  {
    key: 'xstateRootActorWithHistoryBytes',
    label: "that actor holding a copy of an idle thread's history (2 messages) in its context (the floor of a live thread that keeps its history)",
    unit: 'bytes',
  },
  { key: 'liveIdleThreadRssBytes', label: 'live idle thread, RSS growth per thread (embedded, record included)', unit: 'bytes' },
  { key: 'liveIdleThreadAtLimitBytes', label: 'live idle thread at the history limit (50 messages) on a durable node (heap + buffers)', unit: 'bytes' },
  { key: 'liveIdleThreadAtLimitRssBytes', label: 'live idle thread at the history limit, RSS growth per thread (embedded, record included)', unit: 'bytes' },
  { key: 'recordAtLimitBytes', label: 'thread record at the history limit, encoded', unit: 'bytes' },
  {
    key: 'dormantThreadBytes',
    label: "dormant thread on a durable node: at rest 30 s, its actor stopped and its record's JSON kept (heap + buffers)",
    unit: 'bytes',
  },
  { key: 'dormantThreadAtLimitBytes', label: 'dormant thread at the history limit on a durable node', unit: 'bytes' },
  { key: 'dormantTurnP50VsLive', label: 'turn on a dormant thread (woken from its JSON, no KV read) p50 ÷ on a live thread', unit: 'ratio' },
  { key: 'dormantTurnAtLimitP50VsLive', label: 'the same at the history limit (50 messages): a turn on a dormant thread p50 ÷ on a live one', unit: 'ratio' },
  { key: 'passivatedTurnAtLimitP50VsLive', label: 'a turn on a passivated thread at the history limit (read from KV) p50 ÷ on a live one', unit: 'ratio' },
  { key: 'passivatedThreadBytes', label: 'passivated thread on a durable node', unit: 'bytes' },
  { key: 'rehydrateP99Us', label: 'rehydrate a passivated thread from KV, p99', unit: 'us' },
  { key: 'handoffP99Us', label: "handoff: message → target's first chunk, p99", unit: 'us', target: { op: '<=', value: 5_000 } },
  { key: 'handoffDirectP99Us', label: 'the same first chunk with the target addressed directly (no handoff), p99', unit: 'us' },
  { key: 'handoffFloorP99Us', label: "the handoff's legs over NATS with the guarantees at their edges alone (the floor of the handoff row), p99", unit: 'us' },
  {
    key: 'handoffBeforeWarmUpP99Us',
    label: "the handoff's first 400 runs after 10 (before V8 has compiled its code; what the row measured with 10 warm-up runs), p99",
    unit: 'us',
  },
  { key: 'fanOutP50VsSlowest', label: 'fan-out to 3 agents p50 ÷ the slowest agent alone', unit: 'ratio' },
  { key: 'yamlAgentTurnVsHandwritten', label: 'agent.yaml turn (model time excluded) ÷ hand-written agent', unit: 'ratio' },
  { key: 'inspectionOnHopThroughputVsOff', label: 'agent hop throughput with inspection on ÷ off', unit: 'ratio' },
  { key: 'inspectionOnTurnThroughputVsOff', label: 'durable turn throughput with inspection on ÷ off', unit: 'ratio' },
  { key: 'takeoverMedianMs', label: 'takeover after a crash, median of 30 (lease ttl 1 s)', unit: 'ms' },
  { key: 'takeoverMaxVsTtl', label: 'takeover after a crash, worst of 30 ÷ lease ttl', unit: 'ratio' },
  { key: 'clusterDurableTurnVsRaw', label: 'durable turn p50 on a 3-server cluster (replicas 3) ÷ raw turn p50 there', unit: 'ratio' },
  { key: 'clusterTurnAfterLeaderChangeP50Us', label: 'on that cluster, a turn sent 500 ms after its partition consumer changed leader, p50 of 8', unit: 'us' },
];

function format(x: number, unit: Unit): string {
  switch (unit) {
    case 'ratio':
      return `${x.toFixed(2)}×`;
    case 'us':
      return x >= 1_000_000 ? `${(x / 1_000_000).toFixed(2)} s` : x >= 1_000 ? `${(x / 1_000).toFixed(1)} ms` : `${x.toFixed(0)} µs`;
    case 'ms':
      return `${x.toFixed(0)} ms`;
    case 'bytes':
      return x >= 1_024 ? `${(x / 1_024).toFixed(1)} KiB` : `${x.toFixed(0)} B`;
    case 'rate':
      return x.toFixed(0);
  }
}

export function renderReadmeTable(file: string, r: SeriesJson, link = file): string {
  const rows = FIGURES.filter((f) => f.key in r.summary).map((f) => {
    const v = r.summary[f.key];
    const s = r.spread[f.key];
    const target = f.target ? `${f.target.op === '>=' ? '≥' : '≤'} ${format(f.target.value, f.unit)}` : '';
    const met = v === null || v === undefined || !f.target ? '' : (f.target.op === '>=' ? v >= f.target.value : v <= f.target.value) ? 'met' : 'not met';
    return `| ${f.label} | ${v === null || v === undefined ? 'not measured' : format(v, f.unit)} | ${s ? `${format(s.min, f.unit)} – ${format(s.max, f.unit)}` : ''} | ${target} | ${met} |`;
  });
  const m = r.meta;
  return [
    `Median of ${String(m['runs'])} runs of \`npm run bench\` (${String(m['cpus'])} CPUs, ${String(m['cpuModel'])}, Node ${String(m['node'])}, nats-server ${String(m['natsServer'])}), from [\`${file}\`](${link}):`,
    '',
    '| figure | median | min – max | target | |',
    '|---|---:|---:|---|---|',
    ...rows,
  ].join('\n');
}

export function writeReadmeTable(readmePath: string, file: string, r: SeriesJson): void {
  const readme = readFileSync(readmePath, 'utf8');
  const begin = '<!-- bench:begin -->';
  const end = '<!-- bench:end -->';
  const i = readme.indexOf(begin);
  const j = readme.indexOf(end);
  if (i < 0 || j < i) throw new Error(`${readmePath} has no ${begin} … ${end} section for the benchmark table`);
  writeFileSync(
    readmePath,
    `${readme.slice(0, i + begin.length)}\n${renderReadmeTable(file, r, relative(dirname(readmePath), resolve(import.meta.dirname, '..', file)))}\n${readme.slice(j)}`,
  );
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const file = process.argv[2];
  if (!file) {
    console.error('usage: bench/readme.ts <results file of bench/series.ts>');
    process.exit(2);
  }
  writeReadmeTable(BENCHMARK_DOC, file, JSON.parse(readFileSync(file, 'utf8')) as SeriesJson);
}
