/**
 * The durable turn on a 3-server NATS cluster with replicas 3, against the raw primitives on the same
 * cluster in the same run: what Troupe costs on top of what the cluster itself costs.
 *
 *   durable turn  TroupeClient.send -> TROUPE_IN (R3) -> thread (durable TroupeNode, KV store R3, ack after
 *                 the commit) -> echo agent -> user; the node, agent and client each on their own connection,
 *                 spread over the servers (each connection is given every URL)
 *   raw turn      the durable turn's work with NATS alone (bench/durability.ts startRawTurn): js.publish to a
 *                 scratch work-queue stream (R3), a durable pull consumer, a core request to an echo responder,
 *                 one KV compare-and-set (bucket R3), the ack, the answer published
 *
 *   leader change the first turn on a thread after its partition's consumer changed leader (a stepdown, as a
 *                 rolling restart makes; the turn sent 500 ms after it): how long the partition waits for
 *                 its consumer to pull again
 *
 * `summary.clusterDurableTurnVsRaw` (in bench/results.json via bench/run.ts) is the durable turn's p50 over
 * the raw turn's p50; `summary.clusterTurnAfterLeaderChangeP50Us` the leader change's p50. Run alone:
 *   npx tsx bench/cluster.ts   (BENCH_CLUSTER_N, BENCH_SECONDS, BENCH_CONCURRENCY, BENCH_CLUSTER_STEPDOWNS)
 */
import { pathToFileURL } from 'node:url';
import type { Subscription } from '@nats-io/transport-node';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { decode, encodeJson } from '../src/protocol/index.js';
import { INGRESS_STREAM, partitionOf } from '../src/transport/jetstream/ingress.js';
import type { NatsTransport } from '../src/transport/nats.js';
import { z } from 'zod';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient, userMessage } from '../src/sdk/client.js';
import { KvThreadStore } from '../src/store/kv.js';
import { startNatsCluster } from '../test/helpers/nats-cluster.js';
import { meanRecordBytes, startRawTurn, type RawTurn } from './durability.js';
import { concurrent, connections, elapsedUs, sequential, summarize, type ConcurrentResult, type Op, type SequentialResult } from './measure.js';
import { formatRate, formatRatio, formatUs, renderTable } from './table.js';

const TENANT = 'demo';
const AGENT_ID = 'echo';
const PARTITIONS = 8;
const REPLICAS = 3;
const RAW_SUBJECT = 'bench.cluster.echo';
const TEXT = 'Hello Troupe, please echo this benchmark message back to me.';
/** From a consumer leader's stepdown to the turn sent after it. */
const AFTER_STEPDOWN_MS = 500;

/** What `$JS.API.CONSUMER.LEADER.STEPDOWN` answers. */
const StepdownReplySchema = z.object({ success: z.boolean().optional(), error: z.object({ code: z.number(), description: z.string().optional() }).optional() });

export interface ClusterRow {
  name: string;
  sequential: SequentialResult;
  concurrent: ConcurrentResult;
}

export interface ClusterResults {
  servers: number;
  replicas: number;
  /** Mean thread record after the durable rows: the raw turn's KV value size. */
  recordBytes: number;
  durableTurn: ClusterRow;
  rawTurn: ClusterRow;
  /** durable p50 / raw p50 (how many raw turns one durable turn costs, sequentially). */
  durableVsRawP50: number;
  /** raw throughput / durable throughput, with `concurrency` in flight. */
  durableVsRawThroughput: number;
  /** Turns sent AFTER_STEPDOWN_MS after their partition's consumer changed leader, µs each. */
  afterLeaderChange: { stepdowns: number; samplesUs: number[]; p50Us: number; maxUs: number };
}

export interface ClusterBenchOptions {
  n: number;
  warmupN: number;
  seconds: number;
  concurrency: number;
  timeoutMs: number;
  /** Consumer leader changes measured (a turn after each). */
  stepdowns: number;
  log: (s: string) => void;
}

async function measure(name: string, op: Op, o: ClusterBenchOptions): Promise<ClusterRow> {
  o.log(`  ${name}: warm-up…`);
  await op(0, 0);
  await sequential(op, o.warmupN);
  o.log(` sequential ×${o.n}…`);
  const seq = await sequential(op, o.n);
  o.log(` ${o.concurrency} in flight for ${o.seconds} s…`);
  const conc = await concurrent(op, { concurrency: o.concurrency, seconds: o.seconds });
  o.log(' done\n');
  return { name, sequential: seq, concurrent: conc };
}

export async function runClusterBench(o: ClusterBenchOptions): Promise<ClusterResults> {
  const cluster = await startNatsCluster(3, { partitions: PARTITIONS });
  const { connect, closeAll } = connections((user, tenant) => cluster.as(user, tenant));
  let host: AgentHost | undefined;
  let node: TroupeNode | undefined;
  let store: KvThreadStore | undefined;
  let rawTurn: RawTurn | undefined;
  let rawSub: Subscription | undefined;
  try {
    const nodeT = await connect('bench-cluster-node');
    const agentT = await connect('bench-cluster-agent', AGENT_ID);
    const clientT = await connect('bench-cluster-client', 'client');
    const rawResponder = await connect('bench-cluster-raw-responder');
    const rawRequester = await connect('bench-cluster-raw-requester');
    const echo = defineAgent({
      card: { id: AGENT_ID, name: 'Echo', description: 'Repeats what it is told' },
      handle: (_m, ctx) => reply(ctx.text, { to: 'user' }),
    });
    host = await new AgentHost({ transport: agentT, agent: echo, tenant: TENANT }).start();
    store = await KvThreadStore.open(nodeT.jetstreamConnection, { replicas: REPLICAS });
    node = await new TroupeNode({
      transport: nodeT,
      tenant: TENANT,
      store,
      durable: { nc: nodeT.jetstreamConnection, partitions: PARTITIONS, replicas: REPLICAS },
      config: { entryAgent: AGENT_ID },
    }).start();
    await node.registry.waitFor([AGENT_ID]);
    const deadline = Date.now() + 30_000;
    while (node.ps().actors[0]?.detail?.partitions === undefined || (node.ps().actors[0]!.detail!.partitions as number[]).length < PARTITIONS) {
      if (Date.now() > deadline) throw new Error('the node did not take every partition of the cluster');
      await new Promise((r) => setTimeout(r, 50));
    }
    const client = new TroupeClient(clientT, { tenant: TENANT, principal: 'client' });
    const turnOn = async (threadId: string) => {
      const res = await client.send(TEXT, { threadId, timeoutMs: o.timeoutMs });
      if (res.text !== TEXT) throw new Error(`unexpected answer ${JSON.stringify(res.text)}`);
    };
    const durableOp: Op = (w) => turnOn(`bench-cluster-${w}`);

    const durableTurn = await measure('durable turn, 3 servers, replicas 3', durableOp, o);
    const afterLeaderChange = await turnsAfterLeaderChange(nodeT, turnOn, o);
    // The raw turn writes a value the size of the durable threads' records, as the thread store does.
    const recordBytes = await meanRecordBytes(
      rawRequester.connection,
      TENANT,
      Array.from({ length: o.concurrency }, (_, w) => `bench-cluster-${w}`),
    );

    rawSub = rawResponder.connection.subscribe(RAW_SUBJECT, {
      callback: (err, msg) => {
        if (!err) msg.respond(msg.data);
      },
    });
    await rawResponder.flush();
    const request = encodeJson(userMessage(TEXT));
    rawTurn = await startRawTurn(rawRequester.connection, {
      echoSubject: RAW_SUBJECT,
      request,
      valueBytes: recordBytes,
      messageBytes: request.length,
      workers: o.concurrency,
      timeoutMs: o.timeoutMs,
      replicas: REPLICAS,
    });

    const raw = await measure("raw turn (the durable turn's work, NATS alone), 3 servers, replicas 3", rawTurn.op, o);
    return {
      servers: 3,
      replicas: REPLICAS,
      recordBytes,
      durableTurn,
      rawTurn: raw,
      durableVsRawP50: durableTurn.sequential.p50Us / raw.sequential.p50Us,
      durableVsRawThroughput: raw.concurrent.perSecond / durableTurn.concurrent.perSecond,
      afterLeaderChange,
    };
  } finally {
    rawSub?.unsubscribe();
    await rawTurn?.stop().catch(() => undefined);
    await host?.stop().catch(() => undefined);
    await node?.stop().catch(() => undefined);
    await store?.close().catch(() => undefined);
    await closeAll();
    await cluster.stop();
  }
}

/**
 * `o.stepdowns` times: a turn on a thread, its partition consumer's leader asked to step down (the cluster
 * elects another), and AFTER_STEPDOWN_MS later a turn timed from its send to its answer.
 */
async function turnsAfterLeaderChange(
  nodeT: NatsTransport,
  turnOn: (threadId: string) => Promise<void>,
  o: ClusterBenchOptions,
): Promise<ClusterResults['afterLeaderChange']> {
  const threadId = 'bench-cluster-stepdown';
  const consumer = `p${partitionOf(threadId, PARTITIONS)}`;
  const turn = () => turnOn(threadId);
  o.log(`  a turn after its partition consumer's leader change ×${o.stepdowns}…`);
  const samplesUs: number[] = [];
  for (let i = 0; i < o.stepdowns; i++) {
    await turn();
    const answer = decode(
      StepdownReplySchema,
      (await nodeT.request(`$JS.API.CONSUMER.LEADER.STEPDOWN.${INGRESS_STREAM}.${consumer}`, new Uint8Array(), { timeoutMs: o.timeoutMs })).data,
      'stepdown reply',
    );
    if (!answer.success) throw new Error(`the stepdown of ${consumer} failed: ${JSON.stringify(answer.error ?? answer)}`);
    await new Promise((r) => setTimeout(r, AFTER_STEPDOWN_MS));
    const start = process.hrtime.bigint();
    await turn();
    samplesUs.push(elapsedUs(start));
  }
  o.log(' done\n');
  const s = summarize(samplesUs);
  return { stepdowns: o.stepdowns, samplesUs, p50Us: s.p50Us, maxUs: s.maxUs };
}

export function renderClusterReport(r: ClusterResults): string {
  const row = (x: ClusterRow) => [
    x.name,
    formatUs(x.sequential.p50Us),
    formatUs(x.sequential.p99Us),
    formatRate(x.concurrent.perSecond),
    String(x.sequential.errors + x.concurrent.errors),
  ];
  return [
    `Durable turn on a ${r.servers}-server NATS cluster, replicas ${r.replicas} (TROUPE_IN, thread and lease buckets), vs the raw primitives on the same cluster:`,
    renderTable(['row', 'p50', 'p99', 'ops/s', 'errors'], [row(r.durableTurn), row(r.rawTurn)], ['left', 'right', 'right', 'right', 'right']),
    `raw turn: KV value ${(r.recordBytes / 1024).toFixed(1)} KiB (the mean thread record after the durable rows); the durable turn: one stream message, one KV write, two agent-call messages, the answer.`,
    `clusterDurableTurnVsRaw: ${formatRatio(r.durableVsRawP50)} the raw turn's p50; raw throughput is ${formatRatio(r.durableVsRawThroughput)} the durable turn's`,
    `a turn ${AFTER_STEPDOWN_MS} ms after its partition consumer's leader change (${r.afterLeaderChange.stepdowns} stepdowns): p50 ${formatUs(r.afterLeaderChange.p50Us)}, max ${formatUs(r.afterLeaderChange.maxUs)} (the node pulls again when the new leader is announced; each: ${r.afterLeaderChange.samplesUs.map((us) => formatUs(us)).join(', ')})`,
  ].join('\n');
}

const isMain = process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href;
if (isMain) {
  const num = (name: string, fallback: number) => (process.env[name] ? Number(process.env[name]) : fallback);
  runClusterBench({
    n: num('BENCH_CLUSTER_N', 300),
    warmupN: 50,
    seconds: num('BENCH_SECONDS', 3),
    concurrency: num('BENCH_CONCURRENCY', 64),
    timeoutMs: 10_000,
    stepdowns: num('BENCH_CLUSTER_STEPDOWNS', 8),
    log: (s) => process.stderr.write(s),
  }).then(
    (r) => process.stdout.write(`${renderClusterReport(r)}\n`),
    (err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
