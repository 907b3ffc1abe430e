/**
 * Pattern benchmarks over the bench's nats-server (called from bench/run.ts), each actor on its own
 * connection, one run at a time, a new thread per run:
 *
 *   a. handoff transition: from publishing the user message that triggers a handoff to the first chunk
 *      the target streams on the thread's `.out` (user -> node -> source agent, which hands off at once
 *      -> node -> target, which streams one chunk at once -> `.out`). Baseline: the same first chunk
 *      when the user addresses the target directly (no source hop, no handoff). Floor: the handoff's legs
 *      with their guarantees alone (bench/handoff-floor.ts). The three are sampled in turn, a run of each
 *      per round.
 *   b. orchestration overhead: one message the scoring policy fans out in parallel to 3 agents taking
 *      20 / 30 / 40 ms, against a message routed to the 40 ms agent alone (full turns, TroupeClient.send).
 *      Overhead ratio = fan-out p50 / slowest-alone p50.
 *
 *   BENCH_PATTERN_HANDOFF_N (default 400 of each) runs after BENCH_PATTERN_HANDOFF_WARMUP_N (default 1,000
 *   of each, in turn: as long as V8 needs to finish compiling the handoff's code, see bench/PROFILE.md
 *   session 25); BENCH_PATTERN_ORCH_N (default 80) runs after 10 warm-up runs. The warm-up's runs are kept
 *   in the results too (`handoff.warmUp`), its first BENCH_PATTERN_HANDOFF_N after the first 10 apart: what
 *   the bench measured before session 25.
 *
 * Tenant `patterns` (not `demo`): the account maps `troupe.demo.in.*.*` into the durable TROUPE_IN
 * stream; these numbers are about the patterns once a message is in a thread, over plain queue-group
 * ingress, and the ratios compare like with like.
 */
import { randomUUID } from 'node:crypto';
import { defineAgent, reply, type AgentDefinition } from '../src/sdk/agent.js';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeClient, textOfMessage, userMessage } from '../src/sdk/client.js';
import { TroupeNode } from '../src/actors/node.js';
import { ScoringPolicy } from '../src/routing/scoring.js';
import type { ThreadConfig } from '../src/machines/thread.js';
import {
  CLIENT_ROUTING_URI,
  ErrorReplySchema,
  ThreadAckSchema,
  ThreadEventSchema,
  decode,
  encodeJson,
  type Message,
  type ThreadEvent,
} from '../src/protocol/index.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import type { UserConnectOptions } from '../test/helpers/nats-server.js';
import { connectHandoffFloor } from './handoff-floor.js';
import { startOpenAIAgentsHandoff } from './peers.js';
import { elapsedUs, sequential, summarize, type LatencyStats } from './measure.js';
import { formatRatio, formatUs, renderTable } from './table.js';
import { z } from 'zod';

export interface PatternBenchOptions {
  url: string;
  /** The demo node user (every role of the pattern bench connects as it: its tenant has no users of its own). */
  asNode: UserConnectOptions;
  /**
   * Default `patterns`: a tenant the account does not map into the durable TROUPE_IN stream, so a plain
   * node (queue-group ingress) serves it next to whatever serves `demo`. No other node may serve it.
   */
  tenant?: string;
  handoffRuns?: number;
  handoffWarmupRuns?: number;
  orchestrationRuns?: number;
  timeoutMs?: number;
  /** Progress output (stderr in bench/run.ts). */
  log?: (text: string) => void;
}

export interface PatternRow extends LatencyStats {
  errors: number;
  firstError?: string;
}

/** A row's warm-up runs: all of them, and its first `handoffRuns` after the first 10 (while V8 compiles the handoff's code). */
export interface WarmUpRow {
  all: LatencyStats;
  first: LatencyStats;
}

export interface PatternResults {
  config: {
    tenant: string;
    handoffRuns: number;
    handoffWarmupRuns: number;
    orchestrationRuns: number;
    warmupRuns: number;
    agentDelaysMs: Record<string, number>;
  };
  handoff: {
    /** User message sent -> first chunk from the handoff target on `.out`. */
    transition: PatternRow;
    /** User message sent -> first chunk when the user addresses the target directly. */
    direct: PatternRow;
    /** The same legs as a handoff with the guarantees at their edges alone (bench/handoff-floor.ts). */
    floor: PatternRow;
    /** The OpenAI Agents SDK's handoff in process, `run` to the specialist's first text delta (bench/peers.ts). */
    peer: PatternRow;
    /** transition / direct. */
    vsDirect: { p50: number; p99: number };
    /** The warm-up's runs of each row (`first`: what the bench measured up to session 24). */
    warmUp: { transition: WarmUpRow; direct: WarmUpRow; floor: WarmUpRow };
  };
  orchestration: {
    /** Full turn, parallel fan-out to the three agents. */
    fanOut: PatternRow;
    /** Full turn routed to the slowest agent alone. */
    slowestAlone: PatternRow;
    /** fanOut / slowestAlone. */
    overhead: { p50: number; p99: number };
  };
}

/** A signed difference: +1.20 ms, -85 µs. */
const formatDeltaUs = (us: number): string => (us < 0 ? `-${formatUs(-us)}` : `+${formatUs(us)}`);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const AckOrError = z.union([ThreadAckSchema, ErrorReplySchema]);

function envRuns(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer, not "${raw}"`);
  return n;
}

// ---------------------------------------------------------------------------------------------------
// Agents

export const SOURCE = 'desk';
export const TARGET = 'specialist';
const CHUNK = 'on it';

/** Hands every conversation to the specialist at once. */
export const desk = defineAgent({
  card: { id: SOURCE, name: 'Front desk', description: 'Greets users and hands them to a specialist' },
  handle: (_m, ctx) =>
    reply('desk: passing you on', { handoff: { targetAgentId: TARGET, contextSummary: `The user said: ${ctx.text}`, handoffReason: 'bench' } }),
});

/** Streams one chunk at once, then answers (accepting the handoff when there is one). */
export const specialist = defineAgent({
  card: { id: TARGET, name: 'Specialist', description: 'Takes over conversations', capabilities: { streaming: true } },
  async *handle() {
    yield CHUNK;
    return reply('specialist: here');
  },
});

/** The fan-out agents: the scoring policy gives each a clause of FAN_OUT_TEXT. */
const DELAYS_MS = { forecast: 20, flights: 30, refunds: 40 } as const;
const SLOWEST = 'refunds';
const FAN_OUT_TEXT = 'What is the weather in Rome, book me a flight to Rome, and refund my last invoice';
const SLOWEST_TEXT = 'Please refund my last invoice';

function delayedAgent(card: { id: keyof typeof DELAYS_MS; name: string; description: string; skill: string; tags: string[] }): AgentDefinition {
  const delay = DELAYS_MS[card.id];
  return defineAgent({
    card: {
      id: card.id,
      name: card.name,
      description: card.description,
      skills: [{ id: card.id, name: card.skill, description: card.description, tags: card.tags }],
    },
    handle: async (_m, ctx) => {
      await sleep(delay);
      return reply(`${card.id} (${delay} ms): ${ctx.text.length} chars`, { to: 'user' });
    },
  });
}

const fanOutAgents = [
  delayedAgent({
    id: 'forecast',
    name: 'Forecast',
    description: 'Weather forecasts for any city',
    skill: 'Weather',
    tags: ['weather', 'forecast', 'rain', 'temperature'],
  }),
  delayedAgent({
    id: 'flights',
    name: 'Flights',
    description: 'Books flights and plane tickets',
    skill: 'Flight booking',
    tags: ['flight', 'book', 'ticket', 'plane'],
  }),
  delayedAgent({
    id: 'refunds',
    name: 'Refunds',
    description: 'Refunds invoices and charges',
    skill: 'Refunds',
    tags: ['refund', 'invoice', 'charge', 'billing'],
  }),
];

// ---------------------------------------------------------------------------------------------------
// Mesh

export interface Mesh {
  node: TroupeNode;
  client: TroupeClient;
  clientT: NatsTransport;
  stop(): Promise<void>;
}

export async function startMesh(
  opts: PatternBenchOptions & { tenant: string },
  name: string,
  agents: AgentDefinition[],
  config: Partial<ThreadConfig>,
  policy?: ScoringPolicy,
): Promise<Mesh> {
  const transports: NatsTransport[] = [];
  const hosts: AgentHost[] = [];
  let node: TroupeNode | undefined;
  // The account has no users for these agents or this tenant (`client` may only use troupe.demo.*): every
  // role connects as the DEMO account's `node` user, each on its own connection.
  const connect = async (conn: string) => {
    const t = await NatsTransport.connect({ ...opts.asNode, name: `bench-${name}-${conn}` });
    transports.push(t);
    return t;
  };
  const stop = async () => {
    await Promise.all(hosts.map((h) => h.stop().catch(() => undefined)));
    await node?.stop().catch(() => undefined);
    await Promise.all(transports.map((t) => t.drain().catch(() => t.close())));
  };
  try {
    node = await new TroupeNode({
      transport: await connect('node'),
      tenant: opts.tenant,
      config,
      ...(policy ? { policy } : {}),
      idleMs: 0,
    }).start();
    for (const agent of agents) hosts.push(await new AgentHost({ transport: await connect(agent.card.id), agent, tenant: opts.tenant }).start());
    await node.registry.waitFor(agents.map((a) => a.card.id));
    const clientT = await connect('client');
    return { node, client: new TroupeClient(clientT, opts.tenant), clientT, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------------
// a. Handoff transition

/**
 * Publishes one user message into a new thread and resolves with the µs from the publish to the first
 * chunk `from` streamed on the thread's `.out`, once the turn's final answer is in.
 */
export async function timeToFirstChunk(mesh: Mesh, tenant: string, message: Message, from: string, expectRoute: string, timeoutMs: number): Promise<number> {
  const threadId = `bench-pat-${randomUUID()}`;
  let firstChunkUs: number | undefined;
  let start = 0n;
  let settle!: (e: ThreadEvent) => void;
  let fail!: (e: Error) => void;
  const final = new Promise<ThreadEvent>((resolve, reject) => {
    settle = resolve;
    fail = reject;
  });
  // Handled here so a timeout before the ack cannot become an unhandled rejection.
  final.catch(() => undefined);
  const sub = mesh.clientT.subscribe(subjects.threadOut(tenant, 'local', threadId), (msg) => {
    const event = decode(ThreadEventSchema, msg.data, 'thread event');
    if (event.kind === 'artifact-update' && firstChunkUs === undefined && event.artifact.metadata?.['troupe/agent'] === from) {
      firstChunkUs = elapsedUs(start);
    }
    if (event.kind === 'status-update' && event.final) settle(event);
  });
  const timer = setTimeout(() => fail(new Error(`no final answer on ${threadId} within ${timeoutMs} ms`)), timeoutMs);
  try {
    await mesh.clientT.flush();
    start = process.hrtime.bigint();
    const ack = decode(AckOrError, (await mesh.clientT.request(subjects.threadIn(tenant, 'local', threadId), encodeJson(message), { timeoutMs })).data, 'ack');
    if (ack.kind === 'error') throw new Error(`${ack.error.code}: ${ack.error.message}`);
    const end = await final;
    if (end.kind !== 'status-update') throw new Error('unexpected final event');
    const route = (end.status.message?.metadata?.['troupe/route'] as Array<{ from: string; to: string }> | undefined)
      ?.map((s) => `${s.from}>${s.to}`)
      .join(',');
    if (route !== expectRoute) throw new Error(`route ${route ?? '(none)'}, expected ${expectRoute}: "${textOfMessage(end.status.message)}"`);
    if (firstChunkUs === undefined) throw new Error(`no chunk from ${from} before the final answer`);
    return firstChunkUs;
  } finally {
    clearTimeout(timer);
    sub.unsubscribe();
  }
}

/**
 * Runs each of `samples` `n` times after `warmup` runs of each, both in rounds: one run of each per round,
 * the order rotating from round to round. A row per sampler; its samples are what it returns (µs), not its
 * duration. The warm-up's samples are summarised too: all of them, and the first `n` after the first 10.
 */
async function sampledInTurn(samples: ReadonlyArray<() => Promise<number>>, n: number, warmup: number): Promise<Array<{ row: PatternRow; warmUp: WarmUpRow }>> {
  const rounds = async (count: number) => {
    const rows = samples.map(() => ({ samples: [] as number[], errors: 0, firstError: undefined as string | undefined }));
    for (let i = 0; i < count; i++) {
      for (let k = 0; k < samples.length; k++) {
        const at = (i + k) % samples.length;
        const row = rows[at]!;
        try {
          row.samples.push(await samples[at]!());
        } catch (err) {
          row.errors++;
          row.firstError ??= err instanceof Error ? err.message : String(err);
        }
      }
    }
    return rows;
  };
  const warm = await rounds(warmup);
  const measured = await rounds(n);
  return measured.map((r, i) => ({
    row: { ...summarize(r.samples), errors: r.errors, ...(r.firstError ? { firstError: r.firstError } : {}) },
    warmUp: { all: summarize(warm[i]!.samples), first: summarize(warm[i]!.samples.slice(10, 10 + n)) },
  }));
}

// ---------------------------------------------------------------------------------------------------
// Run

export async function runPatternBench(options: PatternBenchOptions): Promise<PatternResults> {
  const opts = { ...options, tenant: options.tenant ?? 'patterns' };
  const log = opts.log ?? (() => undefined);
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const handoffRuns = opts.handoffRuns ?? envRuns('BENCH_PATTERN_HANDOFF_N', 400);
  const handoffWarmupRuns = opts.handoffWarmupRuns ?? envRuns('BENCH_PATTERN_HANDOFF_WARMUP_N', 1_000);
  const orchestrationRuns = opts.orchestrationRuns ?? envRuns('BENCH_PATTERN_ORCH_N', 80);
  const warmupRuns = 10;

  // a. Handoffs. The thread stays in the handoff after each run; every run is a new thread. The handoff,
  // its baseline (the target addressed directly) and its floor are sampled in turn, one run of each per
  // round in a rotating order, so that a VM whose speed drifts within a minute shows all three the same
  // moments (a p99 is a handful of runs). The handoff and its baseline each have a node of their own, so
  // neither measures the other's open handoff threads.
  log('  handoff transition: ');
  let transition: PatternRow;
  let direct: PatternRow;
  let floor: PatternRow;
  let peerRow: PatternRow;
  let warmUp: PatternResults['handoff']['warmUp'];
  const directMesh = await startMesh(opts, 'handoff-direct', [desk, specialist], { entryAgent: SOURCE, agentTimeoutMs: timeoutMs, retries: 0 });
  try {
    const handoffMesh = await startMesh(opts, 'handoff', [desk, specialist], { entryAgent: SOURCE, agentTimeoutMs: timeoutMs, retries: 0 });
    try {
      const floorRig = await connectHandoffFloor(opts.asNode, 'bench-handoff-floor', timeoutMs);
      try {
        log(`warm-up ×${handoffWarmupRuns}, then ×${handoffRuns} each of the handoff, the target addressed directly and the floor, in turn…`);
        const peer = startOpenAIAgentsHandoff(CHUNK);
        const rows = await sampledInTurn(
          [
            () => timeToFirstChunk(handoffMesh, opts.tenant, userMessage('I need the specialist'), TARGET, `user>${SOURCE},${SOURCE}>${TARGET}`, timeoutMs),
            () =>
              timeToFirstChunk(
                directMesh,
                opts.tenant,
                userMessage('I need the specialist', { metadata: { [CLIENT_ROUTING_URI]: { recipient: TARGET } } }),
                TARGET,
                `user>${TARGET}`,
                timeoutMs,
              ),
            floorRig.sample,
            peer.firstChunkUs,
          ],
          handoffRuns,
          handoffWarmupRuns,
        );
        [transition, direct, floor, peerRow] = [rows[0]!.row, rows[1]!.row, rows[2]!.row, rows[3]!.row];
        warmUp = { transition: rows[0]!.warmUp, direct: rows[1]!.warmUp, floor: rows[2]!.warmUp };
      } finally {
        await floorRig.stop();
      }
    } finally {
      await handoffMesh.stop();
    }
  } finally {
    await directMesh.stop();
  }
  log(' done\n');

  // b. Orchestration.
  log('  orchestration overhead: ');
  const policy = new ScoringPolicy();
  const orchMesh = await startMesh(
    opts,
    'orchestration',
    fanOutAgents,
    { entryAgent: SLOWEST, usePolicy: true, agentTimeoutMs: timeoutMs, retries: 0, orchestration: { strategy: 'parallel', maxParallelAgents: 3 } },
    policy,
  );
  let fanOut: PatternRow;
  let slowestAlone: PatternRow;
  try {
    const decision = await policy.decide({ message: userMessage(FAN_OUT_TEXT), agents: fanOutAgents.map((a) => a.card) });
    const fanned = [decision.agentId, ...(decision.additionalAgents ?? [])].sort().join(',');
    if (fanned !== Object.keys(DELAYS_MS).sort().join(',')) throw new Error(`the policy fans out to ${fanned}, expected all three agents`);
    const turn = async (text: string, expectAgents: string[]) => {
      const res = await orchMesh.client.send(text, { threadId: `bench-orch-${randomUUID()}`, timeoutMs });
      if (res.error) throw new Error(`${res.error.code}: ${res.error.message}`);
      const used = res.final.status.message?.metadata?.['agentsUsed'] ?? [res.final.status.message?.metadata?.['troupe/agent']];
      if ([...(used as string[])].sort().join(',') !== [...expectAgents].sort().join(','))
        throw new Error(`answered by ${JSON.stringify(used)}: "${res.text}"`);
    };
    log(`warm-up… ×${orchestrationRuns} fan-out…`);
    for (let i = 0; i < warmupRuns; i++) await turn(FAN_OUT_TEXT, Object.keys(DELAYS_MS)).catch(() => undefined);
    fanOut = await sequential(() => turn(FAN_OUT_TEXT, Object.keys(DELAYS_MS)), orchestrationRuns);
    log(` ×${orchestrationRuns} slowest alone…`);
    for (let i = 0; i < warmupRuns; i++) await turn(SLOWEST_TEXT, [SLOWEST]).catch(() => undefined);
    slowestAlone = await sequential(() => turn(SLOWEST_TEXT, [SLOWEST]), orchestrationRuns);
    log(' done\n');
  } finally {
    await orchMesh.stop();
  }

  return {
    config: { tenant: opts.tenant, handoffRuns, handoffWarmupRuns, orchestrationRuns, warmupRuns, agentDelaysMs: { ...DELAYS_MS } },
    handoff: { transition, direct, floor, peer: peerRow, vsDirect: { p50: transition.p50Us / direct.p50Us, p99: transition.p99Us / direct.p99Us }, warmUp },
    orchestration: { fanOut, slowestAlone, overhead: { p50: fanOut.p50Us / slowestAlone.p50Us, p99: fanOut.p99Us / slowestAlone.p99Us } },
  };
}

// ---------------------------------------------------------------------------------------------------
// Report

export function renderPatternReport(r: PatternResults): string {
  const { handoff: h, orchestration: o } = r;
  const delays = Object.entries(r.config.agentDelaysMs)
    .map(([id, ms]) => `${id} ${ms} ms`)
    .join(', ');
  const line = (name: string, s: PatternRow, base: string, p50: number, p99: number) => [
    name,
    String(s.count),
    formatUs(s.p50Us),
    formatUs(s.p99Us),
    base,
    formatRatio(p50),
    formatRatio(p99),
    String(s.errors),
  ];
  const table = renderTable(
    ['pattern', 'runs', 'p50', 'p99', 'vs', 'p50 ratio', 'p99 ratio', 'errors'],
    [
      line('handoff: message -> first chunk from target', h.transition, 'direct', h.vsDirect.p50, h.vsDirect.p99),
      line('direct: message -> first chunk (addressed)', h.direct, 'direct', 1, 1),
      line("floor: the handoff's legs and guarantees alone", h.floor, 'direct', h.floor.p50Us / h.direct.p50Us, h.floor.p99Us / h.direct.p99Us),
      line('peer: OpenAI Agents SDK handoff, in process', h.peer, 'direct', h.peer.p50Us / h.direct.p50Us, h.peer.p99Us / h.direct.p99Us),
      line(`fan-out to 3 agents (${Object.values(r.config.agentDelaysMs).join('/')} ms), parallel`, o.fanOut, 'slowest', o.overhead.p50, o.overhead.p99),
      line(`slowest agent alone (${r.config.agentDelaysMs[SLOWEST]} ms)`, o.slowestAlone, 'slowest', 1, 1),
    ],
    ['left', 'right', 'right', 'right', 'left', 'right', 'right', 'right'],
  );
  const errors = [
    ['handoff', h.transition],
    ['direct', h.direct],
    ['handoff floor', h.floor],
    ['OpenAI Agents handoff', h.peer],
    ['fan-out', o.fanOut],
    ['slowest alone', o.slowestAlone],
  ].flatMap(([name, s]) => ((s as PatternRow).firstError ? [`  ${name as string}: ${(s as PatternRow).firstError}`] : []));
  return [
    `patterns (tenant ${r.config.tenant}, queue-group ingress): one run at a time, a new thread per run, after ${r.config.handoffWarmupRuns} warm-up runs ` +
      `of each handoff row and ${r.config.warmupRuns} of each orchestration row; fan-out agents: ${delays}`,
    '',
    table,
    '',
    `handoff transition: ${formatUs(h.transition.p50Us)} p50 / ${formatUs(h.transition.p99Us)} p99 from the user message to the target's first chunk ` +
      `(${formatRatio(h.vsDirect.p50)} the direct first chunk, ${formatDeltaUs(h.transition.p50Us - h.direct.p50Us)} at p50: the source agent's hop and the handoff)`,
    `handoff before its warm-up ends (the warm-up's runs 11-${10 + r.config.handoffRuns}, the figure the bench gave up to session 24): ${formatUs(h.warmUp.transition.first.p50Us)} p50 / ` +
      `${formatUs(h.warmUp.transition.first.p99Us)} p99; direct ${formatUs(h.warmUp.direct.first.p50Us)} / ${formatUs(h.warmUp.direct.first.p99Us)}; ` +
      `floor ${formatUs(h.warmUp.floor.first.p50Us)} / ${formatUs(h.warmUp.floor.first.p99Us)}`,
    `orchestration overhead: fan-out p50 / slowest-alone p50 = ${formatRatio(o.overhead.p50)} ` +
      `(${formatDeltaUs(o.fanOut.p50Us - o.slowestAlone.p50Us)}; p99 ${formatRatio(o.overhead.p99)}); full turns via TroupeClient.send`,
    ...(errors.length ? ['', 'first errors:', ...errors] : []),
  ].join('\n');
}
