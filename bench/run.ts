/**
 * Troupe vs raw NATS, on one freshly started nats-server (operator mode as `troupe creds init` makes it, a user per role):
 *
 *   1. raw NATS request-reply against an echo responder (`nc.subscribe` callback, `msg.respond`);
 *   2. one agent hop: an A2A message with a thread's headers, sent straight to an echo agent's inbox
 *      (AgentHost over NatsTransport), as a thread does;
 *   3. a full turn as it runs in production: TroupeClient.send -> thread -> echo agent -> user on a durable
 *      TroupeNode (tenant demo: the account mapping puts thread input into the JetStream stream TROUPE_IN, the node
 *      consumes it through partition leases, commits the thread to the JetStream KV store and only then
 *      acks), in a thread per worker that lives on across turns, and again with a new thread for every
 *      turn; and the same turn on an in-process embedded mesh (MemoryBus, memory store: no NATS, nothing
 *      durable), to show what the transport and durability cost;
 *   4. patterns (bench/patterns.ts): handoff transition time and parallel fan-out overhead, in a second table;
 *   5. durability (bench/durability.ts, bench/memory.ts): the durable turn against a "raw turn" of the same
 *      NATS primitives, memory per live and passivated thread, and rehydrate latency, in a third part;
 *   6. agents from agent.yaml (bench/yaml-agent.ts): a YAML agent's turn, model time excluded, against a
 *      hand-written agent answering the same text (`summary.yamlAgentTurnVsHandwritten`);
 *   7. inspection (bench/inspection.ts): the agent hop and the durable turn with inspection off, on and off again;
 *   8. tracing (bench/tracing.ts): the same two with tracing off, on (OTLP/HTTP to a local sink) and off again
 *      (`summary.tracingOnHopVsOff`, `tracingOnTurnVsOff`, `tracingOffHopVsBaseline`, `tracingOffTurnVsBaseline`).
 *   9. cluster (bench/cluster.ts): the durable turn on a 3-server NATS cluster with replicas 3 against the raw
 *      primitives on the same cluster, in the same run (`summary.clusterDurableTurnVsRaw`: p50 over p50), and a
 *      turn after its partition consumer changed leader (`summary.clusterTurnAfterLeaderChangeP50Us`).
 *  10. takeover (bench/takeover.ts): a series of crashes, min/median/max of the time to take the partitions over.
 *  11. peers (bench/peers.ts), in the same groups as the rows they stand beside: LangGraph.js with MemorySaver
 *      beside the embedded turn, with PostgresSaver on the machine's PostgreSQL beside the durable turn, and the
 *      OpenAI Agents SDK's handoff beside the handoff row (`summary.embeddedTurnVsLangGraph`,
 *      `durableTurnVsLangGraphPostgres`, `handoffVsOpenAIAgents`: Troupe's throughput ÷ the peer's).
 *
 * Each scenario of 1 and 3 is measured sequentially (latency p50/p99) and with BENCH_CONCURRENCY operations
 * in flight (throughput), after a warm-up; a target's row, its floor and its raw baseline in turn, in
 * BENCH_ROUNDS windows each (`runScenarios`). Prints the tables and writes bench/results.json.
 *
 *   npm run bench        # defaults: BENCH_N=2000 BENCH_TURN_N=1000 BENCH_SECONDS=3 BENCH_CONCURRENCY=64
 *                        #           BENCH_MEM_THREADS=2000 BENCH_REHYDRATE_N=500 (about 1 min on 2 cores)
 *   BENCH_N=500 BENCH_TURN_N=200 BENCH_SECONDS=1 npm run bench
 *
 *   BENCH_N            sequential runs of the raw and agent-hop rows
 *   BENCH_TURN_N       sequential runs of the full-turn rows and of the raw turn
 *   BENCH_SECONDS      length of each concurrent run; BENCH_CONCURRENCY operations in flight
 *   BENCH_ROUNDS       windows each row's runs are split into, taken in turn with its baseline and floor (4)
 *   BENCH_MEM_THREADS  threads created for the memory measurement (child process), one turn each
 *   BENCH_MEM_LIMIT_THREADS  threads taken to the history limit (25 turns, 50 messages) for the second one (400)
 *   BENCH_REHYDRATE_N  passivated threads for the rehydrate rows
 *   BENCH_PATTERN_HANDOFF_N, BENCH_PATTERN_ORCH_N: see bench/patterns.ts
 *   BENCH_YAML_N, BENCH_YAML_WARMUP_N: see bench/yaml-agent.ts
 *   BENCH_CLUSTER_N    sequential turns of each cluster row (default 300)
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { availableParallelism, cpus } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeClient, textOfMessage, userMessage } from '../src/sdk/client.js';
import { startEmbedded } from '../src/team/embedded.js';
import { startLangGraphMemory, startLangGraphPostgres, type PeerRig } from './peers.js';
import { startThreadMachineRig, startXstateTurnFloor, type MachineRig } from './machine-floor.js';
import { durableTurnFloor, startEmbeddedTurnFloor, type DurableTurnFloor } from './turn-floor.js';
import { silentLogger } from '../src/observability/logger.js';
import { TroupeNode } from '../src/actors/node.js';
import { AgentReplySchema, decode, encodeJson, withRoutingRequest, type Message } from '../src/protocol/index.js';
import { KvThreadStore } from '../src/store/kv.js';
import { subjects } from '../src/transport/subjects.js';
import { startNatsServer, type NatsServerHandle } from '../test/helpers/nats-server.js';
import { ProcessGroup, type ManagedProcess } from '../test/helpers/processes.js';
import {
  attempt,
  durabilityErrors,
  meanRecordBytes,
  renderDurabilityReport,
  runMemoryChild,
  runRehydrateBench,
  deriveMemory,
  startRawTurn,
  streamCounters,
  unackedInbound,
  type DurabilityResults,
  type RawTurn,
  type StreamCounters,
} from './durability.js';
import {
  Tally,
  concurrent,
  connections,
  floorResponder,
  sequential,
  threadCallHeaders,
  summarize,
  type ConcurrentResult,
  type Op,
  type SequentialResult,
} from './measure.js';
import { renderPatternReport, runPatternBench } from './patterns.js';
import { renderYamlAgentReport, runYamlAgentBench } from './yaml-agent.js';
import { renderInspectionReport, runInspectionBench, type InspectionResults } from './inspection.js';
import { renderTakeoverReport, runTakeoverBench, type TakeoverResults } from './takeover.js';
import { renderClusterReport, runClusterBench } from './cluster.js';
import { controlInspection } from '../src/studio/stream.js';
import { renderTracingReport, runTracingBench, type TracingResults } from './tracing.js';
import { startTracing } from '../src/observability/tracing.js';
import { formatRate, formatRatio, formatUs, renderTable } from './table.js';
import { tuneHeap } from '../src/bin/heap.js';

// The in-process rows run with the heap setting of the `troupe` processes (src/bin/heap.ts), as the
// multi-process row's node and agent do; the raw rows beside them share it.
const v8Flags = tuneHeap();

// ---------------------------------------------------------------------------------------------------
// Configuration

function envNumber(name: string, fallback: number, { integer = false } = {}): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0 || (integer && !Number.isInteger(value))) {
    throw new Error(`${name} must be a positive ${integer ? 'integer' : 'number'}, not "${raw}"`);
  }
  return value;
}

const N = envNumber('BENCH_N', 2_000, { integer: true });
const TURN_N = envNumber('BENCH_TURN_N', 1_000, { integer: true });
const SECONDS = envNumber('BENCH_SECONDS', 3);
const CONCURRENCY = envNumber('BENCH_CONCURRENCY', 64, { integer: true });
const MEM_THREADS = envNumber('BENCH_MEM_THREADS', 2_000, { integer: true });
const MEM_LIMIT_THREADS = envNumber('BENCH_MEM_LIMIT_THREADS', 400, { integer: true });
const REHYDRATE_N = envNumber('BENCH_REHYDRATE_N', 500, { integer: true });
const YAML_N = envNumber('BENCH_YAML_N', 500, { integer: true });
const TAKEOVER_KILLS = envNumber('BENCH_TAKEOVER_KILLS', 30, { integer: true });
const TAKEOVER_TTL_MS = envNumber('BENCH_TAKEOVER_TTL_MS', 1_000, { integer: true });
const YAML_WARMUP_N = envNumber('BENCH_YAML_WARMUP_N', 50, { integer: true });
const WARMUP_N = Math.max(100, Math.round(N / 10));
const TURN_WARMUP_N = Math.max(50, Math.round(TURN_N / 10));
const CLUSTER_N = envNumber('BENCH_CLUSTER_N', 300, { integer: true });
const CLUSTER_STEPDOWNS = envNumber('BENCH_CLUSTER_STEPDOWNS', 8, { integer: true });
const PARTITIONS = 8;
/**
 * The concurrent warm-up of every scenario: 2 s at the default BENCH_SECONDS. V8 compiles a durable turn's
 * code over its first ~2,500 turns (at 64 in flight: 1,353 turns in the first second, 2,084 in the second,
 * 2,550-2,720 in each of the next eight; .tmp rig, bench/PROFILE.md session 25); with 1 s the first
 * measured window still ran while it compiled.
 */
const WARMUP_SECONDS = Math.min(2, (SECONDS * 2) / 3);
/** Windows a scenario's measured runs are split into, taken in turn with the rows it is compared with. */
const ROUNDS = envNumber('BENCH_ROUNDS', 4, { integer: true });
const TIMEOUT_MS = 10_000;
const TENANT = 'demo';
/** A tenant the account does not map into TROUPE_IN: a plain node serves it over queue-group ingress. */
const PLAIN_TENANT = 'bench';
/** The tenant of the multi-process row (its node and agent are child processes). */
const MP_TENANT = 'acme';
const AGENT_ID = 'echo';
/** The floor row's responder takes another agent's user (same permissions as echo's): a user may take only its own inbox. */
const FLOOR_AGENT_ID = 'pyecho';
const RAW_SUBJECT = 'bench.raw.echo';
const TEXT = 'Hello Troupe, please echo this benchmark message back to me.';
const RESULTS_FILE = process.env.BENCH_RESULTS_FILE ?? join(import.meta.dirname, 'results.json');

// ---------------------------------------------------------------------------------------------------
// Scenarios

interface Scenario {
  key:
    | 'raw'
    | 'hopFloor'
    | 'agentHop'
    | 'rawTurn'
    | 'durableTurnFloor'
    | 'fullTurn'
    | 'fullTurnNewThread'
    | 'fullTurnPlain'
    | 'fullTurnEmbedded'
    | 'threadMachine'
    | 'xstateTurnFloor'
    | 'embeddedTurnFloor'
    | 'fullTurnMultiProcess'
    | 'langGraphMemory'
    | 'langGraphPostgres';
  name: string;
  description: string;
  op: Op;
  /** Sequential runs (default BENCH_N) and warm-up runs. */
  n?: number;
  warmupN?: number;
}

interface ScenarioResult {
  key: Scenario['key'];
  name: string;
  description: string;
  sequential: SequentialResult;
  concurrent: ConcurrentResult;
}

interface VsRaw {
  /** Troupe latency / raw latency. */
  p50: number;
  p99: number;
  /** Troupe throughput / raw throughput. */
  throughput: number;
  /** Raw throughput / Troupe throughput. */
  slowdown: number;
}

/** Echoes every request on the raw client connection: the floor any NATS request-reply pays. */
function rawEchoResponder(nc: NatsConnection): Subscription {
  return nc.subscribe(RAW_SUBJECT, {
    callback: (err, msg) => {
      if (!err) msg.respond(msg.data);
    },
  });
}

/** The request body and headers a thread sends to an agent (see ThreadHost.callAgent). */
function agentCall(node: TroupeNode, threadId: string): { data: Uint8Array; headers: Record<string, string> } {
  const message: Message = {
    kind: 'message',
    role: 'user',
    messageId: randomUUID(),
    contextId: threadId,
    taskId: threadId,
    parts: [{ kind: 'text', text: TEXT }],
    metadata: { 'troupe/agent': 'user' },
  };
  const withRouting = withRoutingRequest(message, { agentCards: node.registry.peersOf(AGENT_ID), sender: 'user' });
  return { data: encodeJson(withRouting), headers: threadCallHeaders(TENANT, threadId, message.messageId) };
}

/**
 * Measures scenarios that are compared with each other (a row, its floor and raw NATS) in the same
 * moments: each is warmed up, then the measured runs are split into ROUNDS windows, taken in turn —
 * round 1 of each scenario, then round 2 of each, … — and added up (bench/measure.ts `Tally`). On a VM
 * whose speed drifts over a minute, a row and its baseline then see the same machine, where one after the
 * other they did not (a ratio of 0.86× and 1.46× in two runs of one series). `around` wraps each window
 * (the durable rows count their stream messages in it).
 */
async function runScenarios(group: Scenario[], around?: (s: Scenario, window: () => Promise<unknown>) => Promise<void>): Promise<ScenarioResult[]> {
  const results = new Map<Scenario, ScenarioResult>();
  const tallies = new Map<Scenario, { seq: Tally; conc: Tally }>();
  for (const s of group) {
    process.stderr.write(`  ${s.name}: warm-up…`);
    // One operation first: a scenario that cannot work (e.g. nobody consumes the stream) is reported
    // with its error at once instead of timing out thousands of times.
    try {
      await s.op(0, 0);
    } catch (err) {
      const firstError = `preflight: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`;
      process.stderr.write(` FAILED (${firstError}); skipped\n`);
      const none = summarize([]);
      results.set(s, {
        key: s.key,
        name: s.name,
        description: s.description,
        sequential: { ...none, errors: 1, firstError },
        concurrent: { concurrency: CONCURRENCY, ops: 0, errors: 0, seconds: 0, perSecond: Number.NaN, latency: none },
      });
      continue;
    }
    await sequential(s.op, s.warmupN ?? WARMUP_N);
    await concurrent(s.op, { concurrency: CONCURRENCY, seconds: WARMUP_SECONDS });
    tallies.set(s, { seq: new Tally(), conc: new Tally() });
    process.stderr.write(' done\n');
  }
  const measured = group.filter((s) => tallies.has(s));
  if (measured.length) {
    process.stderr.write(
      `  ${measured.length > 1 ? `${measured.length} rows in turn, ` : ''}${ROUNDS} rounds of sequential runs and ${CONCURRENCY} in flight:`,
    );
  }
  for (let round = 0; round < ROUNDS && measured.length; round++) {
    for (const s of measured) {
      const t = tallies.get(s)!;
      const n = s.n ?? N;
      // The sequential runs split as evenly as they go: rounds of n/ROUNDS, the remainder in the first ones.
      const runs = Math.floor(n / ROUNDS) + (round < n % ROUNDS ? 1 : 0);
      const window = async () => {
        await sequential(s.op, runs, t.seq);
        await concurrent(s.op, { concurrency: CONCURRENCY, seconds: SECONDS / ROUNDS }, t.conc);
      };
      await (around ? around(s, window) : window());
    }
    process.stderr.write(` ${round + 1}`);
  }
  if (measured.length) process.stderr.write(' done\n');
  return group.map(
    (s) =>
      results.get(s) ?? {
        key: s.key,
        name: s.name,
        description: s.description,
        sequential: tallies.get(s)!.seq.sequential(),
        concurrent: tallies.get(s)!.conc.concurrent(CONCURRENCY),
      },
  );
}

async function runScenario(s: Scenario): Promise<ScenarioResult> {
  return (await runScenarios([s]))[0]!;
}

function vsRaw(r: ScenarioResult, raw: ScenarioResult): VsRaw {
  return {
    p50: r.sequential.p50Us / raw.sequential.p50Us,
    p99: r.sequential.p99Us / raw.sequential.p99Us,
    throughput: r.concurrent.perSecond / raw.concurrent.perSecond,
    slowdown: raw.concurrent.perSecond / r.concurrent.perSecond,
  };
}

// ---------------------------------------------------------------------------------------------------
// Report

function report(meta: Record<string, unknown>, results: ScenarioResult[], header: string): string {
  const raw = results.find((r) => r.key === 'raw')!;
  const rows = results.map((r) => {
    const v = vsRaw(r, raw);
    const errors = r.sequential.errors + r.concurrent.errors;
    return [
      r.name,
      formatUs(r.sequential.p50Us),
      formatUs(r.sequential.p99Us),
      formatRatio(v.p50),
      formatRatio(v.p99),
      formatRate(r.concurrent.perSecond),
      formatUs(r.concurrent.latency.p50Us),
      formatUs(r.concurrent.latency.p99Us),
      formatRatio(v.throughput),
      formatRatio(v.slowdown),
      String(errors),
    ];
  });
  const table = renderTable(
    ['scenario', 'p50', 'p99', 'p50/raw', 'p99/raw', `req/s @${CONCURRENCY}`, `p50 @${CONCURRENCY}`, `p99 @${CONCURRENCY}`, 'tput/raw', 'slowdown', 'errors'],
    rows,
    ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
  );
  const summary = results
    .filter((r) => r.key !== 'raw')
    .map((r) => {
      const v = vsRaw(r, raw);
      return (
        `  ${r.name}: ${formatRatio(v.p50)} raw latency (p50; p99 ${formatRatio(v.p99)}), ` +
        `${formatRatio(v.throughput)} raw throughput (${formatRatio(v.slowdown)} slower than raw)`
      );
    });
  const errors = results.flatMap((r) =>
    [r.sequential.firstError, r.concurrent.firstError].filter((e): e is string => e !== undefined).map((e) => `  ${r.name}: ${e}`),
  );
  return [
    header,
    `sequential: ${N} requests after ${WARMUP_N} warm-up (full turns: ${TURN_N} after ${TURN_WARMUP_N}); concurrent: ${CONCURRENCY} in flight for ${SECONDS} s ` +
      `after ${WARMUP_SECONDS.toFixed(2)} s warm-up; agent request ${String(meta.agentRequestBytes)} B (raw echo sends the same bytes)`,
    '',
    table,
    `p50, p99: one request at a time; @${CONCURRENCY}: ${CONCURRENCY} in flight. p50/raw, p99/raw: latency ÷ raw latency; ` +
      'tput/raw: req/s ÷ raw req/s; slowdown: raw req/s ÷ req/s.',
    `durable: tenant demo, node with durable ingress (TROUPE_IN, ${PARTITIONS} partitions) and the JetStream KV store, ` +
      `stream message acked after the commit; not durable: tenant ${PLAIN_TENANT}, queue-group ingress, memory store; ` +
      'embedded: node, agent and client on one MemoryBus, memory store, no NATS.',
    '',
    'vs raw NATS request-reply:',
    ...summary,
    ...(errors.length ? ['', 'first errors:', ...errors] : []),
    '',
    `results: ${RESULTS_FILE}`,
  ].join('\n');
}

/**
 * The figures a run is judged by (issue targets and README), under stable names: bench/series.ts takes the
 * median and spread of each over several runs. A figure that could not be measured is null.
 */
export interface RunSummary {
  hopThroughputVsRaw: number | null;
  hopP50VsRaw: number | null;
  /** The floor of a hop's guarantees (validation at both edges, no agent host) ÷ raw: the best the hop rows can reach. */
  hopFloorThroughputVsRaw: number | null;
  hopFloorP50VsRaw: number | null;
  durableTurnThroughputVsRawTurn: number | null;
  durableTurnP50VsRawTurn: number | null;
  /**
   * The floor of the durable turn's guarantees (the raw turn's NATS work with validation at every edge, the
   * turn as an XState actor of the thread's shape and the record encoded and validated: bench/turn-floor.ts)
   * ÷ the raw turn: the best the durable turn can reach.
   */
  durableTurnFloorThroughputVsRawTurn: number | null;
  durableTurnFloorP50VsRawTurn: number | null;
  multiProcessTurnThroughputVsRawTurn: number | null;
  durableTurnsPerSecond: number | null;
  multiProcessTurnsPerSecond: number | null;
  embeddedTurnsPerSecond: number | null;
  /** The thread machine alone (real children, the agent answering at once): the floor of the embedded turn. */
  threadMachineTurnsPerSecond: number | null;
  /** XState alone, a turn of the thread's shape (a child machine invoking a promise): the floor of the thread machine. */
  xstateTurnFloorPerSecond: number | null;
  /**
   * The floor of the embedded turn's guarantees (bench/turn-floor.ts `startEmbeddedTurnFloor`: validation at
   * every edge, an XState turn of the thread's shape, the agent call over the memory transport, the record
   * checked and encoded, the status stream), turns per second.
   */
  embeddedTurnFloorPerSecond: number | null;
  liveIdleThreadBytes: number | null;
  /** A started XState root actor of a one-state machine: the floor of a live thread. */
  xstateRootActorBytes: number | null;
  /** That actor holding a copy of the measured threads' history in its context: the floor of a live thread that keeps its history. */
  xstateRootActorWithHistoryBytes: number | null;
  liveIdleThreadRssBytes: number | null;
  liveIdleThreadAtLimitBytes: number | null;
  liveIdleThreadAtLimitRssBytes: number | null;
  recordAtLimitBytes: number | null;
  passivatedThreadBytes: number | null;
  /** A dormant thread on a durable node: actor stopped after `dormantMs` at rest, its committed record's JSON kept in the host. */
  dormantThreadBytes: number | null;
  dormantThreadAtLimitBytes: number | null;
  /** A turn on a dormant thread (woken from its JSON) p50 ÷ a turn on a live one, durable node. */
  dormantTurnP50VsLive: number | null;
  dormantTurnAtLimitP50VsLive: number | null;
  passivatedTurnAtLimitP50VsLive: number | null;
  rehydrateP99Us: number | null;
  handoffP99Us: number | null;
  /** The same first chunk when the user addresses the target directly (one agent, no handoff): the handoff row's baseline. */
  handoffDirectP99Us: number | null;
  /** The handoff's legs over NATS with the guarantees at their edges alone (bench/handoff-floor.ts): the floor of the handoff row. */
  handoffFloorP99Us: number | null;
  /** The handoff's p99 over its warm-up's runs 11-410: what this row measured up to session 24, before V8 compiled the handoff's code. */
  handoffBeforeWarmUpP99Us: number | null;
  fanOutP50VsSlowest: number | null;
  yamlAgentTurnVsHandwritten: number | null;
  inspectionOnHopThroughputVsOff: number | null;
  inspectionOnTurnThroughputVsOff: number | null;
  takeoverMedianMs: number | null;
  takeoverMaxVsTtl: number | null;
  /** The embedded turn's throughput ÷ LangGraph.js with MemorySaver's, same shape, same run (bench/peers.ts). */
  embeddedTurnVsLangGraph: number | null;
  /** The durable turn's throughput ÷ LangGraph.js with PostgresSaver (durability "sync") on the machine's PostgreSQL. */
  durableTurnVsLangGraphPostgres: number | null;
  /** Handoffs one at a time: Troupe's runs per second ÷ the OpenAI Agents SDK's (mean time to the specialist's first chunk). */
  handoffVsOpenAIAgents: number | null;
}

function summarizeRun(r: {
  results: ScenarioResult[];
  patterns: Awaited<ReturnType<typeof runPatternBench>>;
  durability: DurabilityResults;
  yamlAgent: Awaited<ReturnType<typeof runYamlAgentBench>>;
  inspection: InspectionResults;
  takeover: TakeoverResults | { failed: string };
}): RunSummary {
  const fin = (x: number | undefined): number | null => (x === undefined || !Number.isFinite(x) ? null : x);
  const by = (k: Scenario['key']) => r.results.find((x) => x.key === k);
  const raw = by('raw')!;
  const hop = by('agentHop');
  const floor = by('hopFloor');
  const rawTurnRow = by('rawTurn');
  const perSecond = (k: Scenario['key']) => by(k)?.concurrent.perSecond;
  const vsRawTurn = (k: Scenario['key']) => fin((perSecond(k) ?? Number.NaN) / (rawTurnRow?.concurrent.perSecond ?? Number.NaN));
  const memory = 'failed' in r.durability.memory ? undefined : r.durability.memory;
  const derived = memory ? deriveMemory(memory) : undefined;
  const atLimit = 'failed' in r.durability.memoryAtLimit ? undefined : r.durability.memoryAtLimit;
  const derivedAtLimit = atLimit ? deriveMemory(atLimit) : undefined;
  const rehydrate = 'failed' in r.durability.rehydrate ? undefined : r.durability.rehydrate;
  const onVsOff = Object.values(r.inspection.onVsOff);
  return {
    hopThroughputVsRaw: hop ? fin(vsRaw(hop, raw).throughput) : null,
    hopP50VsRaw: hop ? fin(vsRaw(hop, raw).p50) : null,
    hopFloorThroughputVsRaw: floor ? fin(vsRaw(floor, raw).throughput) : null,
    hopFloorP50VsRaw: floor ? fin(vsRaw(floor, raw).p50) : null,
    durableTurnThroughputVsRawTurn: vsRawTurn('fullTurn'),
    durableTurnP50VsRawTurn: fin((by('fullTurn')?.sequential.p50Us ?? Number.NaN) / (rawTurnRow?.sequential.p50Us ?? Number.NaN)),
    durableTurnFloorThroughputVsRawTurn: vsRawTurn('durableTurnFloor'),
    durableTurnFloorP50VsRawTurn: fin((by('durableTurnFloor')?.sequential.p50Us ?? Number.NaN) / (rawTurnRow?.sequential.p50Us ?? Number.NaN)),
    multiProcessTurnThroughputVsRawTurn: vsRawTurn('fullTurnMultiProcess'),
    durableTurnsPerSecond: fin(perSecond('fullTurn')),
    multiProcessTurnsPerSecond: fin(perSecond('fullTurnMultiProcess')),
    embeddedTurnsPerSecond: fin(perSecond('fullTurnEmbedded')),
    threadMachineTurnsPerSecond: fin(perSecond('threadMachine')),
    xstateTurnFloorPerSecond: fin(perSecond('xstateTurnFloor')),
    embeddedTurnFloorPerSecond: fin(perSecond('embeddedTurnFloor')),
    liveIdleThreadBytes: derived ? fin(derived.liveNode.heap + derived.liveNode.buffers) : null,
    xstateRootActorBytes: fin(memory?.bareActorBytes),
    xstateRootActorWithHistoryBytes: fin(memory?.historyActorBytes),
    liveIdleThreadRssBytes: memory ? fin((memory.samples.live.rss - memory.samples.baseline.rss) / memory.threads) : null,
    liveIdleThreadAtLimitBytes: derivedAtLimit ? fin(derivedAtLimit.liveNode.heap + derivedAtLimit.liveNode.buffers) : null,
    liveIdleThreadAtLimitRssBytes: atLimit ? fin((atLimit.samples.live.rss - atLimit.samples.baseline.rss) / atLimit.threads) : null,
    recordAtLimitBytes: atLimit ? fin(atLimit.recordBytesPerThread) : null,
    passivatedThreadBytes: derived ? fin(derived.passivatedNode.heap + derived.passivatedNode.buffers) : null,
    dormantThreadBytes: derived?.dormantNode ? fin(derived.dormantNode.heap + derived.dormantNode.buffers) : null,
    dormantThreadAtLimitBytes: derivedAtLimit?.dormantNode ? fin(derivedAtLimit.dormantNode.heap + derivedAtLimit.dormantNode.buffers) : null,
    dormantTurnP50VsLive: rehydrate?.dormantTurn ? fin(rehydrate.dormantTurn.p50Us / rehydrate.liveTurn.p50Us) : null,
    dormantTurnAtLimitP50VsLive: rehydrate?.atLimit ? fin(rehydrate.atLimit.dormantTurn.p50Us / rehydrate.atLimit.liveTurn.p50Us) : null,
    passivatedTurnAtLimitP50VsLive: rehydrate?.atLimit ? fin(rehydrate.atLimit.passivatedTurn.p50Us / rehydrate.atLimit.liveTurn.p50Us) : null,
    rehydrateP99Us: fin(rehydrate?.rehydrate.p99Us),
    handoffP99Us: fin(r.patterns.handoff.transition.p99Us),
    handoffDirectP99Us: fin(r.patterns.handoff.direct.p99Us),
    handoffFloorP99Us: fin(r.patterns.handoff.floor.p99Us),
    handoffBeforeWarmUpP99Us: fin(r.patterns.handoff.warmUp.transition.first.p99Us),
    fanOutP50VsSlowest: fin(r.patterns.orchestration.overhead.p50),
    yamlAgentTurnVsHandwritten: fin(r.yamlAgent.ratio.excludingModelP50),
    inspectionOnHopThroughputVsOff: fin(onVsOff[0]),
    inspectionOnTurnThroughputVsOff: fin(onVsOff[1]),
    embeddedTurnVsLangGraph: fin((perSecond('fullTurnEmbedded') ?? Number.NaN) / (perSecond('langGraphMemory') ?? Number.NaN)),
    durableTurnVsLangGraphPostgres: fin((perSecond('fullTurn') ?? Number.NaN) / (perSecond('langGraphPostgres') ?? Number.NaN)),
    handoffVsOpenAIAgents: fin(r.patterns.handoff.peer.meanUs / r.patterns.handoff.transition.meanUs),
    takeoverMedianMs: 'failed' in r.takeover ? null : r.takeover.medianMs,
    takeoverMaxVsTtl: 'failed' in r.takeover ? null : r.takeover.maxVsTtl,
  };
}

// ---------------------------------------------------------------------------------------------------
// Main

/** Waits until the durable node consumes every partition (it holds all the leases). */
async function waitForPartitions(node: TroupeNode, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const owned = (node.ps().actors[0]?.detail?.['partitions'] as number[] | undefined) ?? [];
    if (owned.length === PARTITIONS) return;
    if (Date.now() > deadline) throw new Error(`the durable node consumes partitions [${owned.join(', ')}] after ${timeoutMs} ms, expected all ${PARTITIONS}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function main(): Promise<void> {
  const server: NatsServerHandle = await startNatsServer();
  const procs = new ProcessGroup();
  /** The multi-process row's node and agent: what they logged at warn level or above goes into the results. */
  const mpProcs: ManagedProcess[] = [];
  const pool = connections((user, tenant) => server.as(user, tenant));
  const connect = (name: string, user = 'node', tenant = TENANT) => pool.connect(name, user, tenant);
  let host: AgentHost | undefined;
  let node: TroupeNode | undefined;
  let plainHost: AgentHost | undefined;
  let plainNode: TroupeNode | undefined;
  let store: KvThreadStore | undefined;
  let embedded: Awaited<ReturnType<typeof startEmbedded>> | undefined;
  let threadMachineRig: MachineRig | undefined;
  let xstateFloorRig: MachineRig | undefined;
  let embeddedFloorRig: MachineRig | undefined;
  let langGraphMemory: PeerRig | undefined;
  let langGraphPostgres: PeerRig | undefined;
  let rawTurn: RawTurn | undefined;
  let floorTurn: RawTurn | undefined;
  let floorTurnGuarantees: DurableTurnFloor | undefined;
  let rawSub: Subscription | undefined;
  let floorSub: { unsubscribe(): void } | undefined;
  try {
    // One connection per role, each as the user that role runs as in production.
    const rawResponder = await connect('bench-raw-responder', 'node');
    const rawRequester = await connect('bench-raw-requester', 'node');
    const agentT = await connect('bench-agent-echo', AGENT_ID);
    const nodeT = await connect('bench-node', 'node');
    const clientT = await connect('bench-client', 'client');

    rawSub = rawEchoResponder(rawResponder.connection);
    const floorT = await connect('bench-floor-responder', FLOOR_AGENT_ID);
    floorSub = floorResponder(floorT, TENANT, FLOOR_AGENT_ID);
    await floorT.flush();
    await rawResponder.flush();

    const echo = defineAgent({
      card: { id: AGENT_ID, name: 'Echo', description: 'Repeats what it is told' },
      handle: (_message, ctx) => reply(ctx.text, { to: 'user' }),
    });
    host = await new AgentHost({ transport: agentT, agent: echo, tenant: TENANT }).start();
    // As in production: durable ingress from TROUPE_IN on the node's connection, threads in JetStream KV.
    store = await KvThreadStore.open(nodeT.jetstreamConnection);
    node = await new TroupeNode({
      transport: nodeT,
      tenant: TENANT,
      store,
      durable: { nc: nodeT.jetstreamConnection, partitions: PARTITIONS },
      config: { entryAgent: AGENT_ID },
    }).start();
    await node.registry.waitFor([AGENT_ID]);
    await waitForPartitions(node);
    const client = new TroupeClient(clientT, { tenant: TENANT, principal: 'client' });
    const troupeNode = node;
    // The same turn over NATS without durability: plain node (queue-group ingress, memory store). The account
    // has no agent or client user for this tenant, so every role connects as `node`, on its own connection.
    plainHost = await new AgentHost({ transport: await connect('bench-plain-agent', 'node'), agent: echo, tenant: PLAIN_TENANT }).start();
    plainNode = await new TroupeNode({ transport: await connect('bench-plain-node', 'node'), tenant: PLAIN_TENANT, config: { entryAgent: AGENT_ID } }).start();
    await plainNode.registry.waitFor([AGENT_ID]);
    const plainClient = new TroupeClient(await connect('bench-plain-client', 'node'), PLAIN_TENANT);
    // The same team on an in-process mesh: MemoryBus transport, memory store.
    embedded = await startEmbedded({ name: 'bench-embedded', agents: [echo], config: { entryAgent: AGENT_ID } }, silentLogger(), TENANT);
    const embeddedClient = embedded.client;
    threadMachineRig = startThreadMachineRig(TEXT, AGENT_ID);
    xstateFloorRig = startXstateTurnFloor(TEXT);
    const jsm = await jetstreamManager(rawRequester.connection);

    const rawPayload = agentCall(troupeNode, 'bench-hop').data;
    const header =
      `Troupe bench — node ${process.version} · nats-server ${rawRequester.connection.info?.version ?? '?'} · ` +
      `${availableParallelism()} CPUs (${cpus()[0]?.model.trim() ?? 'unknown'}) · ${new Date().toISOString()}`;
    process.stderr.write(`${header}\n`);

    const turnOn = async (c: TroupeClient, threadId: string) => {
      const res = await c.send(TEXT, { threadId, timeoutMs: TIMEOUT_MS });
      if (res.error) throw new Error(`turn failed: ${res.error.code}: ${res.error.message}`);
      if (res.text !== TEXT) throw new Error(`turn answered "${res.text}" (state ${res.final.status.state})`);
    };
    const turn = (threadId: string) => turnOn(client, threadId);

    // The raw turn is the baseline of the durable turn, so it runs first; its KV value is as large as the
    // record of a thread at the history limit (measured on one thread taken there first).
    for (let i = 0; i < 30; i++) await turn('bench-size');
    const sizedRecordBytes = await meanRecordBytes(rawRequester.connection, TENANT, ['bench-size']);
    const rawTurnOptions = {
      echoSubject: RAW_SUBJECT,
      request: rawPayload,
      valueBytes: sizedRecordBytes,
      messageBytes: encodeJson(userMessage(TEXT)).length,
      workers: CONCURRENCY,
      timeoutMs: TIMEOUT_MS,
    };
    rawTurn = await startRawTurn(rawRequester.connection, rawTurnOptions);
    const rawTurnOp = rawTurn.op;
    // The same NATS work with the durable turn's guarantees (bench/turn-floor.ts), its threads' records
    // shaped like that thread's.
    const sized = await store.get(TENANT, 'bench-size');
    if (!sized) throw new Error('the thread bench-size has no record after 30 turns');
    floorTurnGuarantees = await durableTurnFloor({
      transport: rawRequester,
      tenant: TENANT,
      agentId: FLOOR_AGENT_ID,
      text: TEXT,
      record: sized.record,
      timeoutMs: TIMEOUT_MS,
    });
    floorTurn = await startRawTurn(rawRequester.jetstreamConnection, { ...rawTurnOptions, name: 'floor', guarantees: floorTurnGuarantees });
    embeddedFloorRig = await startEmbeddedTurnFloor({ text: TEXT, record: sized.record, timeoutMs: TIMEOUT_MS });
    langGraphMemory = startLangGraphMemory(TEXT);
    langGraphPostgres = await startLangGraphPostgres(TEXT);

    // The multi-process row, as deployed: the node (`troupe up`) and the agent (`troupe agent`) are processes
    // of their own and this process is the load generator, in tenant acme so nothing else runs there.
    const nodeEnv = { ...process.env, TROUPE_NATS_CREDS: server.credsFile('node', MP_TENANT), TROUPE_TENANT: MP_TENANT, TROUPE_LOG_LEVEL: 'warn' };
    mpProcs.push(
      await procs.spawnTroupe(['up', '--nats', server.url, '--team', 'bench/fixtures/echo-team.ts', '--partitions', String(PARTITIONS)], nodeEnv, {
        name: 'bench node',
      }),
    );
    mpProcs.push(await procs.spawnTroupe(['agent', 'bench/fixtures/echo-agent.ts', '--nats', server.url], nodeEnv, { name: 'bench agent' }));
    const mpClient = new TroupeClient(await connect('bench-mp-client', 'node', MP_TENANT), { tenant: MP_TENANT, principal: 'node' });

    const scenarios: Scenario[] = [
      {
        key: 'raw',
        name: 'raw NATS request-reply',
        description: 'nc.request to an nc.subscribe callback that responds with the request body',
        op: async () => {
          const msg = await rawRequester.connection.request(RAW_SUBJECT, rawPayload, { timeout: TIMEOUT_MS });
          if (msg.data.length !== rawPayload.length) throw new Error(`echo returned ${msg.data.length} bytes, sent ${rawPayload.length}`);
        },
      },
      {
        key: 'hopFloor',
        name: "validated request-reply (an agent hop's guarantees alone)",
        description:
          'NatsTransport.request of the same A2A Message with thread headers to a responder on an agent user that only validates ' +
          'it and answers with a new A2A Message, the reply validated by the caller',
        op: async (w) => {
          const threadId = `bench-floor-${w}`;
          const { data, headers } = agentCall(troupeNode, threadId);
          const res = await nodeT.request(subjects.agentInbox(TENANT, FLOOR_AGENT_ID), data, { timeoutMs: TIMEOUT_MS, headers });
          const answer = decode(AgentReplySchema, res.data, 'floor reply');
          if (answer.kind !== 'message' || textOfMessage(answer) !== TEXT) throw new Error(`floor replied ${JSON.stringify(answer).slice(0, 200)}`);
        },
      },
      {
        key: 'agentHop',
        name: 'Troupe agent hop',
        description: 'NatsTransport.request of an A2A Message with thread headers to the echo AgentHost inbox',
        op: async (w) => {
          const threadId = `bench-hop-${w}`;
          const { data, headers } = agentCall(troupeNode, threadId);
          const res = await nodeT.request(subjects.agentInbox(TENANT, AGENT_ID), data, { timeoutMs: TIMEOUT_MS, headers });
          const answer = decode(AgentReplySchema, res.data, 'echo reply');
          if (answer.kind !== 'message') throw new Error(`echo replied with ${answer.kind}: ${JSON.stringify(answer).slice(0, 200)}`);
          if (textOfMessage(answer) !== TEXT) throw new Error(`echo replied "${textOfMessage(answer)}"`);
        },
      },
      {
        key: 'rawTurn',
        name: "raw turn (the durable turn's work, NATS alone)",
        description:
          'js.publish to a work-queue stream -> durable pull consumer -> core request to the echo responder -> one KV compare-and-set ' +
          '-> ackAck -> core publish of the answer, which the publisher awaits',
        op: rawTurnOp,
        n: TURN_N,
        warmupN: TURN_WARMUP_N,
      },
      {
        key: 'durableTurnFloor',
        name: "raw turn with the durable turn's guarantees (floor of the durable turn)",
        description:
          "the raw turn carrying an A2A message validated at each edge, the turn run as an XState actor of the thread's shape whose " +
          "agent call goes over Troupe's transport to a validating responder, and the thread record at the history limit encoded " +
          'and validated before its compare-and-set (bench/turn-floor.ts)',
        op: floorTurn.op,
        n: TURN_N,
        warmupN: TURN_WARMUP_N,
      },
      {
        key: 'fullTurn',
        name: 'Troupe full turn, durable',
        description:
          'TroupeClient.send -> TROUPE_IN -> thread (durable TroupeNode, KV store, ack after commit) -> echo agent -> user; ' +
          'each worker keeps one thread (one turn in flight per thread), so its history grows to the 50-message limit',
        op: (w) => turn(`bench-turn-${w}`),
        n: TURN_N,
        warmupN: TURN_WARMUP_N,
      },
      {
        key: 'fullTurnNewThread',
        name: 'Troupe full turn, durable, new thread',
        description: 'as above, but every turn opens a new thread (creates the thread actor and its KV record)',
        op: () => turn(`bench-new-${randomUUID()}`),
        n: TURN_N,
        warmupN: TURN_WARMUP_N,
      },
      {
        key: 'fullTurnPlain',
        name: 'Troupe full turn, NATS, not durable',
        description: `the long-lived-thread turn on a plain node (tenant ${PLAIN_TENANT}: queue-group ingress, memory store): NATS transport, no JetStream`,
        op: (w) => turnOn(plainClient, `bench-plain-${w}`),
        n: TURN_N,
        warmupN: TURN_WARMUP_N,
      },
      {
        key: 'fullTurnEmbedded',
        name: 'Troupe full turn, embedded (in-process)',
        description: 'the long-lived-thread turn on an embedded mesh (startEmbedded: MemoryBus transport, memory store; no NATS, not durable)',
        op: (w) => turnOn(embeddedClient, `bench-emb-${w}`),
        n: TURN_N,
        warmupN: TURN_WARMUP_N,
      },
      {
        key: 'threadMachine',
        name: 'thread machine alone (floor of the embedded turn)',
        description:
          'the thread machine with its real children, the agent request answered at once: no host, transport, store, codec or agent host (bench/machine-floor.ts)',
        op: threadMachineRig.op,
        n: TURN_N,
        warmupN: TURN_WARMUP_N,
      },
      {
        key: 'xstateTurnFloor',
        name: 'XState turn of the same shape (floor of the thread machine)',
        description: 'a root actor starting a child machine per turn that invokes a promise: XState alone, nothing of Troupe (bench/machine-floor.ts)',
        op: xstateFloorRig.op,
        n: TURN_N,
        warmupN: TURN_WARMUP_N,
      },
      {
        key: 'embeddedTurnFloor',
        name: "the embedded turn's guarantees alone (floor of the embedded turn)",
        description:
          'validation at every edge, the XState turn above with its agent call over the memory transport to a validating responder, the record (at the history limit) checked and encoded, the status stream: no thread machine, host, store or agent host (bench/turn-floor.ts)',
        op: embeddedFloorRig.op,
        n: TURN_N,
        warmupN: TURN_WARMUP_N,
      },
      {
        key: 'fullTurnMultiProcess',
        name: 'Troupe full turn, durable, multi-process',
        description: 'the durable long-lived-thread turn with the node (troupe up), the echo agent (troupe agent) and this load generator in three processes',
        op: (w) => turnOn(mpClient, `bench-mp-${w}`),
        n: TURN_N,
        warmupN: TURN_WARMUP_N,
      },
      {
        key: 'langGraphMemory',
        name: 'LangGraph.js turn, MemorySaver (peer of the embedded turn)',
        description:
          'a one-node echo graph, a thread_id per worker, its messages kept to 50, checkpointed in memory (bench/peers.ts): in process, nothing durable, like the embedded turn',
        op: langGraphMemory.op,
        n: TURN_N,
        warmupN: TURN_WARMUP_N,
      },
      {
        key: 'langGraphPostgres',
        name: 'LangGraph.js turn, PostgresSaver (peer of the durable turn)',
        description:
          'the same graph checkpointed in the machine\'s PostgreSQL with durability "sync" (the checkpoint written before invoke returns; bench/peers.ts), against the durable turn committed to JetStream KV before the ack',
        op: langGraphPostgres.op,
        n: TURN_N,
        warmupN: TURN_WARMUP_N,
      },
    ];

    const footprints: Partial<Record<Scenario['key'], { messages: number; kvWrites: number }>> = {};
    // What a durable row's windows put on TROUPE_IN and into the thread bucket (the other rows of its group
    // use streams and buckets of their own).
    const countFootprint = async (s: Scenario, window: () => Promise<unknown>) => {
      if (s.key !== 'fullTurn' && s.key !== 'fullTurnNewThread') return void (await window());
      const before: StreamCounters = await streamCounters(jsm);
      await window();
      const after = await streamCounters(jsm);
      const sum = (footprints[s.key] ??= { messages: 0, kvWrites: 0 });
      sum.messages += after.inSeq - before.inSeq;
      sum.kvWrites += after.kvSeq - before.kvSeq;
    };
    // Each target's row is measured in turn with its baseline and its floor (runScenarios); the other rows alone.
    const groups: Scenario['key'][][] = [
      ['raw', 'hopFloor', 'agentHop'],
      ['rawTurn', 'durableTurnFloor', 'fullTurn', 'langGraphPostgres'],
      ['fullTurnNewThread'],
      ['fullTurnPlain'],
      ['fullTurnEmbedded', 'threadMachine', 'xstateTurnFloor', 'embeddedTurnFloor', 'langGraphMemory'],
      ['fullTurnMultiProcess'],
    ];
    const grouped = new Set(groups.flat());
    for (const s of scenarios) if (!grouped.has(s.key)) groups.push([s.key]);
    const measuredBy = new Map<Scenario['key'], ScenarioResult>();
    for (const keys of groups) {
      const group = keys.map((k) => scenarios.find((s) => s.key === k)!);
      for (const r of await runScenarios(group, countFootprint)) measuredBy.set(r.key, r);
    }
    const results: ScenarioResult[] = scenarios.map((s) => measuredBy.get(s.key)!);
    await embedded.stop();
    embedded = undefined;
    threadMachineRig.stop();
    xstateFloorRig.stop();
    embeddedFloorRig.stop();
    await langGraphMemory.stop();
    await langGraphPostgres.stop();
    langGraphPostgres = undefined;
    await plainHost.stop();
    plainHost = undefined;
    await plainNode.stop();
    plainNode = undefined;
    const unacked = await unackedInbound(jsm);

    // ---- inspection: the agent hop and the durable turn with it off, on (an operator following everything), off again ----
    process.stderr.write('inspection:\n');
    const operatorT = await connect('bench-operator', 'operator');
    let inspectionRecords = 0;
    operatorT.subscribe(subjects.inspectAll(TENANT), () => void inspectionRecords++);
    const inspection: InspectionResults = await runInspectionBench({
      measure: (name, op) => runScenario({ key: 'fullTurn', name, description: '', op, n: TURN_N, warmupN: TURN_WARMUP_N }),
      scenarios: [scenarios.find((x) => x.key === 'agentHop')!, scenarios.find((x) => x.key === 'fullTurn')!].map((s) => ({ name: s.name, op: s.op })),
      setInspection: async (on) => {
        await controlInspection(operatorT, TENANT, { on });
        await operatorT.flush();
      },
      records: () => inspectionRecords,
    });

    // ---- tracing: the same two with tracing off (no provider), on (every span exported over OTLP/HTTP), off again ----
    process.stderr.write('tracing:\n');
    const tracing: TracingResults = await runTracingBench({
      measure: (name, op) => runScenario({ key: 'fullTurn', name, description: '', op, n: TURN_N, warmupN: TURN_WARMUP_N }),
      scenarios: (['agentHop', 'fullTurn'] as const).map((key) => {
        const s = scenarios.find((x) => x.key === key)!;
        return { key, name: s.name, op: s.op, baselinePerSecond: results.find((r) => r.key === key)!.concurrent.perSecond };
      }),
      start: async (endpoint) => {
        const handle = await startTracing({ serviceName: 'troupe-bench', env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint } });
        if (!handle) throw new Error('tracing did not start');
        return handle;
      },
    });

    const patterns = await runPatternBench({ url: server.url, asNode: server.asNode, timeoutMs: TIMEOUT_MS, log: (s) => process.stderr.write(s) });
    const yamlAgent = await runYamlAgentBench({
      asNode: server.asNode,
      n: YAML_N,
      warmupN: YAML_WARMUP_N,
      timeoutMs: TIMEOUT_MS,
      log: (s) => process.stderr.write(s),
    });

    // ---- durability ----
    process.stderr.write('durability:\n');
    const byKey = (k: Scenario['key']) => results.find((r) => r.key === k)!;
    const longLived = Array.from({ length: CONCURRENCY }, (_, w) => `bench-turn-${w}`);
    const recordBytes = await meanRecordBytes(rawRequester.connection, TENANT, longLived);
    const messageBytes = encodeJson(userMessage(TEXT)).length;
    const rawTurnResult = byKey('rawTurn');
    const fp = footprints.fullTurn ?? { messages: 0, kvWrites: 0 };
    const log = (text: string) => process.stderr.write(text);
    const rehydrate = await attempt(
      'rehydrate',
      () =>
        runRehydrateBench({
          node: troupeNode,
          client,
          nc: rawRequester.connection,
          tenant: TENANT,
          text: TEXT,
          n: REHYDRATE_N,
          timeoutMs: TIMEOUT_MS,
          log,
        }),
      log,
    );
    const takeover = await attempt('takeover', () => runTakeoverBench({ asNode: server.asNode, kills: TAKEOVER_KILLS, ttlMs: TAKEOVER_TTL_MS, log }), log);
    const memory = await attempt('memory', () => runMemoryChild({ BENCH_MEM_THREADS: String(MEM_THREADS), BENCH_MEM_TURNS: '1' }), log);
    // The same at the history limit: 25 turns are 50 messages, the default historyLimit.
    const memoryAtLimit = await attempt(
      'memory at the history limit',
      () => runMemoryChild({ BENCH_MEM_THREADS: String(MEM_LIMIT_THREADS), BENCH_MEM_TURNS: '25' }),
      log,
    );
    const durability: DurabilityResults = {
      throughput: {
        rawTurn: rawTurnResult,
        durableTurn: byKey('fullTurn'),
        others: [byKey('durableTurnFloor'), byKey('fullTurnPlain'), byKey('fullTurnEmbedded')],
        footprint: {
          messages: fp.messages,
          kvWrites: fp.kvWrites,
          kvWritesPerTurn: fp.messages ? fp.kvWrites / fp.messages : Number.NaN,
          recordBytes,
          messageBytes,
          unacked,
        },
      },
      memory,
      memoryAtLimit,
      rehydrate,
    };

    // ---- a 3-server cluster, replicas 3: the durable turn vs the raw primitives on it ----
    process.stderr.write('cluster (3 servers, replicas 3):\n');
    const cluster = await attempt(
      'cluster',
      () =>
        runClusterBench({
          n: CLUSTER_N,
          warmupN: TURN_WARMUP_N,
          seconds: SECONDS,
          concurrency: CONCURRENCY,
          timeoutMs: TIMEOUT_MS,
          stepdowns: CLUSTER_STEPDOWNS,
          log,
        }),
      log,
    );

    const raw = results[0]!;
    const meta = {
      date: new Date().toISOString(),
      node: process.version,
      natsServer: rawRequester.connection.info?.version ?? null,
      cpus: availableParallelism(),
      cpuModel: cpus()[0]?.model.trim() ?? null,
      platform: `${process.platform}-${process.arch}`,
      v8Flags,
      config: {
        n: N,
        warmupN: WARMUP_N,
        turnN: TURN_N,
        turnWarmupN: TURN_WARMUP_N,
        seconds: SECONDS,
        warmupSeconds: WARMUP_SECONDS,
        concurrency: CONCURRENCY,
        rounds: ROUNDS,
        timeoutMs: TIMEOUT_MS,
        memThreads: MEM_THREADS,
        rehydrateN: REHYDRATE_N,
        partitions: PARTITIONS,
      },
      agentRequestBytes: rawPayload.length,
      // Leases lost, consumers made again, handlers retried: what would explain an outlier of that row.
      multiProcessWarnings: mpProcs.flatMap((p) => warningsOf(p.name, `${p.stdout}\n${p.stderr}`)).slice(0, 50),
    };
    if (meta.multiProcessWarnings.length > 0) log(`multi-process node and agent warnings:\n${meta.multiProcessWarnings.join('\n')}\n`);
    const json = {
      meta,
      units: { latency: 'µs', throughput: 'operations/s', memory: 'bytes' },
      scenarios: results.map((r) => ({ ...r, ...(r.key === 'raw' ? {} : { vsRaw: vsRaw(r, raw) }) })),
      patterns,
      durability: { ...durability, footprints },
      yamlAgent,
      inspection,
      takeover,
      tracing,
      cluster,
      summary: {
        ...summarizeRun({ results, patterns, durability, yamlAgent, inspection, takeover }),
        tracingOnHopVsOff: tracing.onVsOff.agentHop,
        tracingOnTurnVsOff: tracing.onVsOff.fullTurn,
        tracingOffHopVsBaseline: tracing.offVsBaseline.agentHop,
        tracingOffTurnVsBaseline: tracing.offVsBaseline.fullTurn,
        clusterDurableTurnVsRaw: 'failed' in cluster ? null : cluster.durableVsRawP50,
        clusterTurnAfterLeaderChangeP50Us: 'failed' in cluster ? null : cluster.afterLeaderChange.p50Us,
      },
    };
    writeFileSync(RESULTS_FILE, `${JSON.stringify(json, null, 2)}\n`);
    process.stdout.write(
      `\n${report(meta, results, header)}\n\n${renderPatternReport(patterns)}\n\n${renderDurabilityReport(durability, CONCURRENCY)}\n\n${renderYamlAgentReport(yamlAgent)}\n\n${renderInspectionReport(inspection)}\n\n${renderTracingReport(tracing)}\n\n${'failed' in takeover ? `takeover: ${takeover.failed}` : renderTakeoverReport(takeover)}\n\n${'failed' in cluster ? `cluster: ${cluster.failed}` : renderClusterReport(cluster)}\n`,
    );
    const failed =
      results.reduce((n, r) => n + r.sequential.errors + r.concurrent.errors, 0) +
      [patterns.handoff.transition, patterns.handoff.direct, patterns.orchestration.fanOut, patterns.orchestration.slowestAlone].reduce(
        (n, r) => n + r.errors,
        0,
      ) +
      durabilityErrors(durability) +
      yamlAgent.handwritten.errors +
      yamlAgent.yaml.errors +
      inspection.rows.reduce((n, r) => n + r.sequential.errors + r.concurrent.errors, 0) +
      tracing.rows.reduce((n, r) => n + r.sequential.errors + r.concurrent.errors, 0) +
      ('failed' in takeover ? 1 : 0) +
      ('failed' in cluster ? 1 : [cluster.durableTurn, cluster.rawTurn].reduce((n, r) => n + r.sequential.errors + r.concurrent.errors, 0));
    if (failed > 0) process.stderr.write(`\n${failed} operations failed: see "first errors" above\n`);
  } finally {
    rawSub?.unsubscribe();
    floorSub?.unsubscribe();
    await rawTurn?.stop().catch(() => undefined);
    await floorTurn?.stop().catch(() => undefined);
    floorTurnGuarantees?.stop();
    await embedded?.stop().catch(() => undefined);
    threadMachineRig?.stop();
    xstateFloorRig?.stop();
    embeddedFloorRig?.stop();
    await langGraphPostgres?.stop().catch(() => undefined);
    await plainHost?.stop().catch(() => undefined);
    await plainNode?.stop().catch(() => undefined);
    await host?.stop().catch((err: unknown) => console.error('agent host stop failed:', err));
    await node?.stop().catch((err: unknown) => console.error('node stop failed:', err));
    await store?.close().catch(() => undefined);
    await pool.closeAll();
    await procs.stopAll();
    await server.stop();
  }
}

/** The lines of a process's JSON log at warn level or above, named and cut short. */
function warningsOf(name: string, output: string): string[] {
  return output
    .split('\n')
    .filter((line) => /^\{.*"level":(4|5|6)0\b/.test(line))
    .map((line) => `${name}: ${line.slice(0, 400)}`);
}

main().then(
  () => {
    process.exitCode = 0;
  },
  (err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  },
);
