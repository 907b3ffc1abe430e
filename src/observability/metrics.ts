/**
 * Prometheus metrics (prom-client), one registry per process. Hosts record into the instruments below
 * as they work (a counter increment or a histogram observation: no allocation worth measuring); what
 * is a level rather than an event (live threads, partitions owned, inbound lag) is read from its
 * owner when Prometheus scrapes, through `gauges` sources a host registers while it runs.
 *
 * Every name starts with `troupe_`; docs/observability.md says what each one tells an operator.
 * Label values are bounded: agent ids (validated, a registry is bounded), error codes (one table),
 * outcomes (a fixed set), model names (from configuration).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Readiness } from './probes.js';

/** Latency buckets in seconds: a turn or an agent call ranges from a millisecond to minutes (LLM agents). */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export const registry = new Registry();

export const metrics = {
  turns: new Counter({
    name: 'troupe_turns_total',
    help: 'Turns ended (a user message answered), by outcome: the task state the turn ended in, or "error" when it ended with a Troupe error',
    labelNames: ['outcome'] as const,
    registers: [registry],
  }),
  turnSeconds: new Histogram({
    name: 'troupe_turn_duration_seconds',
    help: 'From a user message reaching its thread to its final answer, by outcome',
    labelNames: ['outcome'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  }),
  hops: new Counter({
    name: 'troupe_hops_total',
    help: 'Agent-to-agent forwards (each costs one hop of the thread budget)',
    registers: [registry],
  }),
  hopSeconds: new Histogram({
    name: 'troupe_hop_duration_seconds',
    help: 'Time of one step of a turn: from the turn start (or the previous forward) to the next forward or the answer',
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  }),
  agentCallSeconds: new Histogram({
    name: 'troupe_agent_call_duration_seconds',
    help: 'One call (attempt) from a thread to an agent, by agent and outcome (ok, or the error code)',
    labelNames: ['agent', 'outcome'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  }),
  agentCallErrors: new Counter({
    name: 'troupe_agent_call_errors_total',
    help: 'Agent calls that failed (timeout, no responders, an error reply), by agent and Troupe error code',
    labelNames: ['agent', 'code'] as const,
    registers: [registry],
  }),
  kvWrites: new Counter({
    name: 'troupe_kv_writes_total',
    help: 'Thread state writes to the store (compare-and-set), by result: ok, conflict, error',
    labelNames: ['result'] as const,
    registers: [registry],
  }),
  checkpoints: new Counter({
    name: 'troupe_checkpoints_total',
    help: 'Thread checkpoints stored after a turn (time travel), by result: ok, error',
    labelNames: ['result'] as const,
    registers: [registry],
  }),
  kvConflicts: new Counter({
    name: 'troupe_kv_conflicts_total',
    help: 'Thread writes that lost a compare-and-set: another node wrote the thread (a takeover)',
    registers: [registry],
  }),
  redeliveredAnswers: new Counter({
    name: 'troupe_redelivered_answers_total',
    help: "A thread's latest message given again to a node that did not answer it (a takeover): not published again because its published-answer marker (marker) or the node that answered (node) said it went out, or published (published: nobody could say)",
    labelNames: ['decision'] as const,
    registers: [registry],
  }),
  inboundDuplicates: new Counter({
    name: 'troupe_inbound_duplicates_total',
    help: 'Second stored copies of a message under the same Nats-Msg-Id within the duplicate window (the stream missed the duplicate, e.g. across a leader change): acknowledged, not answered again',
    registers: [registry],
  }),
  agentRequests: new Counter({
    name: 'troupe_agent_requests_total',
    help: 'Requests an agent process handled, by agent and outcome (ok, or the error code it answered with)',
    labelNames: ['agent', 'outcome'] as const,
    registers: [registry],
  }),
  agentRequestSeconds: new Histogram({
    name: 'troupe_agent_request_duration_seconds',
    help: 'Time an agent process took to answer one request, by agent',
    labelNames: ['agent'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  }),
  turnTokens: new Counter({
    name: 'troupe_turn_tokens_total',
    help: "Model tokens of the turns a node answered, by the agent that used them and kind (input, output): every agent of a turn, from its replies' troupe/usage",
    labelNames: ['agent', 'kind'] as const,
    registers: [registry],
  }),
  modelTokens: new Counter({
    name: 'troupe_model_tokens_total',
    help: 'Model tokens used by LLM agents, by model and kind (input, output)',
    labelNames: ['model', 'kind'] as const,
    registers: [registry],
  }),
  modelCalls: new Counter({
    name: 'troupe_model_calls_total',
    help: 'Model calls made by LLM agents, by model and outcome (ok, error)',
    labelNames: ['model', 'outcome'] as const,
    registers: [registry],
  }),
  leasesTaken: new Counter({
    name: 'troupe_partition_leases_taken_total',
    help: 'Partition leases this node took, by how: created (the partition was free) or reclaimed (its own, after it had let it lapse)',
    labelNames: ['how'] as const,
    registers: [registry],
  }),
  leasesLost: new Counter({
    name: 'troupe_partition_leases_lost_total',
    help: 'Partition leases this node stopped holding, by reason: released (given back: a rebalance or a stop), expired (not renewed in time), conflict (another node wrote it)',
    labelNames: ['reason'] as const,
    registers: [registry],
  }),
  gatewayTurns: new Counter({
    name: 'troupe_gateway_turns_total',
    help: 'Turns the gateway ran for A2A clients (message/send and message/stream), by outcome: the final task state, or the error code',
    labelNames: ['outcome'] as const,
    registers: [registry],
  }),
  gatewayAuthRefused: new Counter({
    name: 'troupe_gateway_auth_refused_total',
    help: 'Requests the gateway refused before any work, by reason: unknown_token, expired, claim, signature, algorithm, malformed, user, tenant, keys_unavailable',
    labelNames: ['reason'] as const,
    registers: [registry],
  }),
  gatewayTurnSeconds: new Histogram({
    name: 'troupe_gateway_turn_duration_seconds',
    help: 'From an A2A request reaching the gateway to its final answer (what the A2A client waits)',
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  }),
};

// Every value from the start: a dashboard sees zeros, not gaps, and a rate over a first loss works.
for (const how of ['created', 'reclaimed']) metrics.leasesTaken.inc({ how }, 0);
for (const reason of ['released', 'expired', 'conflict']) metrics.leasesLost.inc({ reason }, 0);

/** What a running node reports when scraped. */
export interface NodeGaugeSource {
  liveThreads(): number;
  /** Passivated threads, dormant ones included. */
  passivatedThreads(): number;
  /** Passivated threads whose committed records the node keeps in memory. */
  dormantThreads(): number;
  /** Partitions this node owns (durable ingress), else undefined. */
  partitionsOwned(): number | undefined;
  /** Messages in this node's partitions not yet acknowledged (consumer pending + ack pending). */
  inboundPending(): Promise<number | undefined>;
}

const nodeSources = new Set<NodeGaugeSource>();

/** Reports a node's levels while it runs; the returned function stops that. */
export function registerNodeGauges(source: NodeGaugeSource): () => void {
  nodeSources.add(source);
  return () => nodeSources.delete(source);
}

new Gauge({
  name: 'troupe_threads',
  help: 'Threads this process holds, by state: live (an actor in memory), dormant (at rest: no actor, its committed record kept in memory) and passivated (stored only, rehydrated on their next message)',
  labelNames: ['state'] as const,
  registers: [registry],
  collect() {
    let live = 0;
    let dormant = 0;
    let passivated = 0;
    for (const s of nodeSources) {
      live += s.liveThreads();
      const d = s.dormantThreads();
      dormant += d;
      passivated += s.passivatedThreads() - d;
    }
    this.set({ state: 'live' }, live);
    this.set({ state: 'dormant' }, dormant);
    this.set({ state: 'passivated' }, passivated);
  },
});

new Gauge({
  name: 'troupe_partitions_owned',
  help: 'Inbound partitions this node owns (leases held); the sum over nodes is the partition count',
  registers: [registry],
  collect() {
    let owned = 0;
    for (const s of nodeSources) owned += s.partitionsOwned() ?? 0;
    this.set(owned);
  },
});

new Gauge({
  name: 'troupe_inbound_pending_messages',
  help: 'Inbound lag: messages in the partitions this node owns that are not acknowledged yet (waiting or in a turn)',
  registers: [registry],
  async collect() {
    let pending = 0;
    for (const s of nodeSources) pending += (await s.inboundPending().catch(() => undefined)) ?? 0;
    this.set(pending);
  },
});

let defaultsCollected = false;

/** Error codes and outcomes as label values: anything unexpected is bucketed, so labels stay bounded. */
export function outcomeLabel(value: string | undefined): string {
  if (!value) return 'unknown';
  return /^[A-Za-z_-]{1,40}$/.test(value) ? value : 'other';
}

export interface MetricsServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

/**
 * Serves `GET /metrics` (Prometheus text) on `port` (0: any free port). Process metrics (CPU, memory,
 * event loop lag) come along, with the same prefix (`troupe_process_*`, `troupe_nodejs_*`). With a
 * `readiness`, the process's probes too: `GET /healthz` and `GET /readyz` (src/observability/probes.ts).
 */
export async function serveMetrics(port: number, host = '0.0.0.0', readiness?: Readiness): Promise<MetricsServer> {
  if (!defaultsCollected) {
    collectDefaultMetrics({ register: registry, prefix: 'troupe_' });
    defaultsCollected = true;
  }
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && readiness && (path === '/healthz' || path === '/readyz')) {
      const body = path === '/healthz' ? { status: 'ok' } : readiness.report();
      const ok = !('ready' in body) || body.ready;
      res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(`${JSON.stringify(body)}\n`);
      return;
    }
    if (req.method !== 'GET' || (path !== '/metrics' && path !== '/')) {
      res
        .writeHead(404, { 'content-type': 'text/plain' })
        .end(`not found: metrics are at GET /metrics${readiness ? ', probes at GET /healthz and GET /readyz' : ''}\n`);
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (err: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`could not collect metrics: ${(err as Error).message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const actual = (server.address() as AddressInfo).port;
  const shown = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
  return {
    url: `http://${shown}:${actual}/metrics`,
    port: actual,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
