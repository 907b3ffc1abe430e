/**
 * Troupe vs raw NATS, on one freshly started nats-server (the repo's nats.conf, real users per role):
 *
 *   1. raw NATS request-reply against an echo responder (`nc.subscribe` callback, `msg.respond`);
 *   2. one agent hop: an A2A message with a thread's headers, sent straight to an echo agent's inbox
 *      (AgentHost over NatsTransport), as a thread does;
 *   3. a full turn: TroupeClient.send -> thread (TroupeNode, memory store) -> echo agent -> user, in a
 *      thread per worker that lives on across turns, and again with a new thread for every turn.
 *
 * Each is measured sequentially (latency p50/p99) and with BENCH_CONCURRENCY operations in flight
 * (throughput), after a warm-up. Prints a table and writes bench/results.json.
 *
 *   npm run bench                        # defaults: BENCH_N=2000 BENCH_SECONDS=3 BENCH_CONCURRENCY=64
 *   BENCH_N=500 BENCH_SECONDS=1 npm run bench
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { availableParallelism, cpus } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import { defineAgent, reply } from '../src/actors/agent.js';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeClient, textOfMessage } from '../src/actors/client.js';
import { TroupeNode } from '../src/actors/node.js';
import { AgentReplySchema, HEADERS, decode, encodeJson, withRoutingRequest, type Message } from '../src/protocol/index.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { startNatsServer, type NatsServerHandle } from '../test/helpers/nats-server.js';
import { concurrent, sequential, type ConcurrentResult, type Op, type SequentialResult } from './measure.js';
import { formatRate, formatRatio, formatUs, renderTable } from './table.js';

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
const SECONDS = envNumber('BENCH_SECONDS', 3);
const CONCURRENCY = envNumber('BENCH_CONCURRENCY', 64, { integer: true });
const WARMUP_N = Math.max(100, Math.round(N / 10));
const WARMUP_SECONDS = Math.min(1, SECONDS / 3);
const TIMEOUT_MS = 10_000;
const TENANT = 'demo';
const AGENT_ID = 'echo';
const RAW_SUBJECT = 'bench.raw.echo';
const TEXT = 'Hello Troupe, please echo this benchmark message back to me.';
const RESULTS_FILE = join(import.meta.dirname, 'results.json');

// ---------------------------------------------------------------------------------------------------
// Scenarios

interface Scenario {
  key: 'raw' | 'agentHop' | 'fullTurn' | 'fullTurnNewThread';
  name: string;
  description: string;
  op: Op;
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
  return {
    data: encodeJson(withRouting),
    headers: {
      [HEADERS.threadId]: threadId,
      [HEADERS.tenant]: TENANT,
      [HEADERS.hop]: '0',
      [HEADERS.sender]: 'user',
      [HEADERS.msgId]: message.messageId,
      [HEADERS.taskId]: threadId,
      [HEADERS.contextId]: threadId,
      [HEADERS.streamTo]: subjects.threadOut(TENANT, threadId),
    },
  };
}

async function runScenario(s: Scenario): Promise<ScenarioResult> {
  process.stderr.write(`  ${s.name}: warm-up…`);
  await sequential(s.op, WARMUP_N);
  await concurrent(s.op, { concurrency: CONCURRENCY, seconds: WARMUP_SECONDS });
  process.stderr.write(` sequential ×${N}…`);
  const seq = await sequential(s.op, N);
  process.stderr.write(` ${CONCURRENCY} in flight for ${SECONDS} s…`);
  const conc = await concurrent(s.op, { concurrency: CONCURRENCY, seconds: SECONDS });
  process.stderr.write(' done\n');
  return { key: s.key, name: s.name, description: s.description, sequential: seq, concurrent: conc };
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
    `sequential: ${N} requests after ${WARMUP_N} warm-up; concurrent: ${CONCURRENCY} in flight for ${SECONDS} s after ${WARMUP_SECONDS.toFixed(2)} s warm-up; ` +
      `agent request ${String(meta.agentRequestBytes)} B (raw echo sends the same bytes)`,
    '',
    table,
    `p50, p99: one request at a time; @${CONCURRENCY}: ${CONCURRENCY} in flight. p50/raw, p99/raw: latency ÷ raw latency; ` +
      'tput/raw: req/s ÷ raw req/s; slowdown: raw req/s ÷ req/s.',
    '',
    'vs raw NATS request-reply:',
    ...summary,
    ...(errors.length ? ['', 'first errors:', ...errors] : []),
    '',
    `results: ${RESULTS_FILE}`,
  ].join('\n');
}

// ---------------------------------------------------------------------------------------------------
// Main

async function main(): Promise<void> {
  const server: NatsServerHandle = await startNatsServer();
  const transports: NatsTransport[] = [];
  const connect = async (name: string, creds?: { user: string; pass: string }) => {
    const t = await NatsTransport.connect({ servers: server.url, name, ...(creds ?? {}) });
    transports.push(t);
    return t;
  };
  let host: AgentHost | undefined;
  let node: TroupeNode | undefined;
  let rawSub: Subscription | undefined;
  try {
    // One connection per role, each as the nats.conf user that role runs as in production.
    const rawResponder = await connect('bench-raw-responder', server.creds.node);
    const rawRequester = await connect('bench-raw-requester', server.creds.node);
    const agentT = await connect('bench-agent-echo', { user: AGENT_ID, pass: server.creds.agentPassword });
    const nodeT = await connect('bench-node', server.creds.node);
    const clientT = await connect('bench-client', server.creds.client);

    rawSub = rawEchoResponder(rawResponder.connection);
    await rawResponder.flush();

    const echo = defineAgent({
      card: { id: AGENT_ID, name: 'Echo', description: 'Repeats what it is told' },
      handle: (_message, ctx) => reply(ctx.text, { to: 'user' }),
    });
    host = await new AgentHost({ transport: agentT, agent: echo, tenant: TENANT }).start();
    node = await new TroupeNode({ transport: nodeT, tenant: TENANT, config: { entryAgent: AGENT_ID } }).start();
    await node.registry.waitFor([AGENT_ID]);
    const client = new TroupeClient(clientT, TENANT);
    const troupeNode = node;

    const rawPayload = agentCall(troupeNode, 'bench-hop').data;
    const header =
      `Troupe bench — node ${process.version} · nats-server ${rawRequester.connection.info?.version ?? '?'} · ` +
      `${availableParallelism()} CPUs (${cpus()[0]?.model.trim() ?? 'unknown'}) · ${new Date().toISOString()}`;
    process.stderr.write(`${header}\n`);

    const turn = async (threadId: string) => {
      const res = await client.send(TEXT, { threadId, timeoutMs: TIMEOUT_MS });
      if (res.error) throw new Error(`turn failed: ${res.error.code}: ${res.error.message}`);
      if (res.text !== TEXT) throw new Error(`turn answered "${res.text}" (state ${res.final.status.state})`);
    };

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
        key: 'fullTurn',
        name: 'Troupe full turn',
        description:
          'TroupeClient.send -> thread (TroupeNode, memory store) -> echo agent -> user; each worker keeps one thread ' +
          '(one turn in flight per thread), so its history grows to the 50-message limit',
        op: (w) => turn(`bench-turn-${w}`),
      },
      {
        key: 'fullTurnNewThread',
        name: 'Troupe full turn, new thread',
        description: 'as above, but every turn opens a new thread (creates the thread actor and its store record)',
        op: () => turn(`bench-new-${randomUUID()}`),
      },
    ];

    const results: ScenarioResult[] = [];
    for (const s of scenarios) results.push(await runScenario(s));

    const raw = results[0]!;
    const meta = {
      date: new Date().toISOString(),
      node: process.version,
      natsServer: rawRequester.connection.info?.version ?? null,
      cpus: availableParallelism(),
      cpuModel: cpus()[0]?.model.trim() ?? null,
      platform: `${process.platform}-${process.arch}`,
      config: { n: N, warmupN: WARMUP_N, seconds: SECONDS, warmupSeconds: WARMUP_SECONDS, concurrency: CONCURRENCY, timeoutMs: TIMEOUT_MS },
      agentRequestBytes: rawPayload.length,
    };
    const json = {
      meta,
      units: { latency: 'µs', throughput: 'operations/s' },
      scenarios: results.map((r) => ({ ...r, ...(r.key === 'raw' ? {} : { vsRaw: vsRaw(r, raw) }) })),
    };
    writeFileSync(RESULTS_FILE, `${JSON.stringify(json, null, 2)}\n`);
    process.stdout.write(`\n${report(meta, results, header)}\n`);
  } finally {
    rawSub?.unsubscribe();
    await host?.stop().catch((err: unknown) => console.error('agent host stop failed:', err));
    await node?.stop().catch((err: unknown) => console.error('node stop failed:', err));
    await Promise.all(transports.map((t) => t.drain().catch(() => t.close())));
    await server.stop();
  }
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
