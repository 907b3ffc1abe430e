/**
 * Memory per idle thread, live and passivated, on an in-process embedded mesh (MemoryBus transport,
 * MemoryThreadStore; no NATS). Runs in its own process so the heap holds nothing but this mesh and gc()
 * can be called:
 *
 *   node --expose-gc --import tsx bench/memory.ts            # prints a table
 *   node --expose-gc --import tsx bench/memory.ts --json     # one JSON line (bench/run.ts uses this)
 *   BENCH_MEM_THREADS=5000 node --expose-gc --import tsx bench/memory.ts
 *   BENCH_MEM_TURNS=25 BENCH_MEM_THREADS=400 node --expose-gc --import tsx bench/memory.ts   # at the history limit
 *   BENCH_MEM_HANDOFF=1 node --expose-gc --import tsx bench/memory.ts   # threads in an open handoff
 *
 * BENCH_MEM_TURNS (default 1) is the number of turns each thread completes before it is measured: 25 turns
 * are 50 messages, the default history limit, so the thread's history (live, in its context) and its record
 * are as large as they get.
 *
 * Steps: warm up (500 threads, then passivated and deleted), gc, baseline; N threads with one completed
 * turn each (64 in flight), gc, measure ("live"); make every thread dormant (ThreadHost.sleepThreads: actor
 * stopped, committed record kept as JSON, what `dormantMs` does after 30 s at rest), gc, measure
 * ("dormant"); passivate every thread (ThreadHost.releaseThreads, the
 * path a node takes when it gives up a partition; liveCount() must reach 0), gc, measure ("passivated":
 * the node's residue plus the memory store's records, which in embedded mode live in this process);
 * measure the encoded record sizes; delete every record from the store, gc, measure ("store emptied": what
 * the host itself keeps per passivated thread); then the floor of a live thread, a bare XState root actor
 * (`bareActorBytes`), and the same actor holding a copy of a measured thread's history in its context
 * (`historyActorBytes`: what a live thread that keeps its history as objects cannot go below). The memory store keeps records as Uint8Array, whose bytes
 * are off the V8 heap (`arrayBuffers`), so both heapUsed and arrayBuffers are reported.
 *
 * With durable nodes the store is JetStream KV, in nats-server: a node's cost per live thread is then
 * the live cost minus the store's footprint, and a passivated thread costs it only the residue.
 *
 * With BENCH_MEM_HANDOFF=1 every thread's first turn is handed off (a desk agent to an expert that takes it
 * and never returns), so the threads measured hold an open handoff: its actor while live, its deadline
 * (the wake) while dormant.
 *
 * The echo agent runs in this process too; its idempotency cache is sized 1 so it does not grow with N
 * (in production it lives in the agent's process, capped at 1000 replies).
 */
import { randomUUID } from 'node:crypto';
import { createActor, createMachine } from 'xstate';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeClient } from '../src/sdk/client.js';
import { TroupeNode } from '../src/actors/node.js';
import { encodeRecord } from '../src/store/codec.js';
import { MemoryThreadStore } from '../src/store/memory.js';
import { MemoryBus, MemoryTransport } from '../src/transport/memory.js';
import { concurrent } from './measure.js';
import { renderMemoryReport, type MemoryResults, type MemorySample } from './durability.js';

const TENANT = 'demo';
const AGENT_ID = 'echo';
const TEXT = 'Hello Troupe, please echo this benchmark message back to me.';
const WARMUP_THREADS = 500;
const CONCURRENCY = 64;

function envInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer, not "${raw}"`);
  return n;
}

const gc = (globalThis as { gc?: () => void }).gc;

async function settle(): Promise<MemorySample> {
  if (!gc) throw new Error('run with node --expose-gc (gc() is not available)');
  // Several rounds with turns of the event loop in between, so finalizers and weak callbacks run.
  for (let i = 0; i < 6; i++) {
    gc();
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 10));
  }
  const m = process.memoryUsage();
  return { heapUsed: m.heapUsed, arrayBuffers: m.arrayBuffers, external: m.external, rss: m.rss };
}

/**
 * The floor of a live thread: heap per started XState v5 root actor of a one-state machine with no
 * context (its actor system, scheduler, snapshot and observers), measured on `n` of them.
 */
async function bareActorBytes(n: number, historyJson?: string): Promise<number> {
  const machine = createMachine({ id: 'bare', initial: 'idle', states: { idle: {} } });
  // With a history: each actor's context holds its own copy of it, as a live thread's does.
  const start = () =>
    createActor(
      machine,
      historyJson === undefined ? {} : { snapshot: machine.resolveState({ value: 'idle', context: { history: JSON.parse(historyJson) as unknown } }) },
    ).start();
  const warm = Array.from({ length: 200 }, start);
  for (const a of warm) a.stop();
  const before = await settle();
  const actors = Array.from({ length: n }, start);
  const after = await settle();
  for (const a of actors) a.stop();
  return (after.heapUsed + after.arrayBuffers - before.heapUsed - before.arrayBuffers) / actors.length;
}

async function main(): Promise<MemoryResults> {
  const threads = envInt('BENCH_MEM_THREADS', 2_000);
  const turnsPerThread = envInt('BENCH_MEM_TURNS', 1);
  const log = (s: string) => process.stderr.write(s);
  const bus = new MemoryBus();
  const store = new MemoryThreadStore();
  const handoff = Boolean(process.env.BENCH_MEM_HANDOFF);
  const echo = defineAgent({
    card: { id: AGENT_ID, name: 'Echo', description: 'Repeats what it is told' },
    handle: (_message, ctx) =>
      handoff
        ? reply(ctx.text, { handoff: { targetAgentId: 'expert', contextSummary: `The user said: ${ctx.text}`, handoffReason: 'bench' } })
        : reply(ctx.text, { to: 'user' }),
  });
  const expert = defineAgent({
    card: { id: 'expert', name: 'Expert', description: 'Takes handed-off conversations' },
    handle: (_message, ctx) => reply(ctx.text),
  });
  // idleMs and dormantMs 0: no passivator, threads stay live until made dormant and passivated below.
  const node = await new TroupeNode({
    transport: new MemoryTransport({ bus }),
    tenant: TENANT,
    store,
    idleMs: 0,
    dormantMs: 0,
    config: { entryAgent: AGENT_ID },
  }).start();
  const hosts = await Promise.all(
    (handoff ? [echo, expert] : [echo]).map((agent) =>
      new AgentHost({ transport: new MemoryTransport({ bus }), agent, tenant: TENANT, idempotencyCacheSize: 1 }).start(),
    ),
  );
  await node.registry.waitFor(handoff ? [AGENT_ID, 'expert'] : [AGENT_ID]);
  const client = new TroupeClient(new MemoryTransport({ bus }), TENANT);

  let errors = 0;
  let firstError: string | undefined;
  const turn = async (threadId: string) => {
    const res = await client.send(TEXT, { threadId, timeoutMs: 10_000 });
    if (res.error) throw new Error(`turn failed: ${res.error.code}: ${res.error.message}`);
    if (res.text !== TEXT && !(handoff && res.final.status.state === 'input-required'))
      throw new Error(`turn answered "${res.text}" (state ${res.final.status.state})`);
  };
  /** `turns` turns on each of `ids` (one after the other on a thread), CONCURRENCY threads in flight. */
  const turnsEach = async (ids: string[], turns: number) => {
    let next = 0;
    const r = await concurrent(
      async () => {
        const id = ids[next++];
        if (id !== undefined) for (let t = 0; t < turns; t++) await turn(id);
      },
      { concurrency: Math.min(CONCURRENCY, ids.length), seconds: 1_200, maxOps: ids.length },
    );
    errors += r.errors;
    firstError ??= r.firstError;
  };
  const dropAll = async (ids: string[]) => {
    await node.threads.releaseThreads(() => true);
    for (const id of ids) await store.delete(TENANT, id);
  };

  try {
    log(`  memory (embedded mesh, ${threads} threads): warm-up…`);
    const warm = Array.from({ length: WARMUP_THREADS }, (_, i) => `mem-warm-${i}`);
    await turnsEach(warm, 1);
    await dropAll(warm);
    const baseline = await settle();

    log(` ${threads} threads × ${turnsPerThread} turn${turnsPerThread === 1 ? '' : 's'}…`);
    const ids = Array.from({ length: threads }, () => `mem-${randomUUID()}`);
    const created = Date.now();
    await turnsEach(ids, turnsPerThread);
    const createMs = Date.now() - created;
    const liveCount = node.threads.liveCount();
    const live = await settle();

    log(' dormant…');
    const dormantCount = await node.threads.sleepThreads();
    if (dormantCount !== threads || node.threads.liveCount() !== 0)
      throw new Error(`${dormantCount} of ${threads} threads dormant, ${node.threads.liveCount()} live`);
    const dormant = await settle();

    log(' passivate…');
    await node.threads.releaseThreads(() => true);
    const liveAfterPassivate = node.threads.liveCount();
    if (liveAfterPassivate !== 0) throw new Error(`${liveAfterPassivate} threads still live after passivating all`);
    const passivated = await settle();

    // Store bytes: the encoded record of each thread, exactly what the memory store (and KV) holds.
    let recordBytes = 0;
    let records = 0;
    let historyTotal = 0;
    let historyJson: string | undefined;
    const states = new Map<string, number>();
    for (const id of ids) {
      const stored = await store.get(TENANT, id);
      if (!stored) continue;
      records++;
      recordBytes += encodeRecord(stored.record).data.byteLength;
      historyTotal += stored.record.task.history?.length ?? 0;
      historyJson ??= JSON.stringify(stored.record.task.history ?? []);
      const state = stored.record.task.status.state;
      states.set(state, (states.get(state) ?? 0) + 1);
    }
    const historyMessages = records ? historyTotal / records : 0;
    log(' empty the store…');
    for (const id of ids) await store.delete(TENANT, id);
    const storeEmptied = await settle();
    log(' bare actors…');
    const bare = await bareActorBytes(Math.max(threads, 1_000));
    const withHistory = await bareActorBytes(Math.max(threads, 1_000), historyJson ?? '[]');
    log(' done\n');

    return {
      mesh: 'embedded (MemoryBus transport, MemoryThreadStore), one process',
      threads,
      turnsPerThread,
      historyMessages,
      liveCount,
      liveAfterPassivate,
      records,
      recordStates: Object.fromEntries(states),
      recordBytesPerThread: records ? recordBytes / records : Number.NaN,
      createMs,
      errors,
      ...(firstError ? { firstError } : {}),
      dormantCount,
      samples: { baseline, live, dormant, passivated, storeEmptied },
      bareActorBytes: bare,
      historyActorBytes: withHistory,
    };
  } finally {
    for (const host of hosts) await host.stop().catch(() => undefined);
    await node.stop().catch(() => undefined);
  }
}

main().then(
  (r) => {
    if (process.argv.includes('--json')) process.stdout.write(`${JSON.stringify(r)}\n`);
    else process.stdout.write(`\n${renderMemoryReport(r)}\n`);
  },
  (err: unknown) => {
    console.error(err);
    process.exitCode = 1;
  },
);
