/**
 * Where a handoff's time goes: the pattern bench's handoff mesh (bench/patterns.ts: a node, the desk agent
 * that hands every conversation to the specialist, the specialist that streams a chunk at once, a client;
 * each on its own connection, all in this process) on a fresh nats-server, one run at a time, a new
 * thread per run; then the handoff's floor (bench/handoff-floor.ts) for as many runs. For each it prints
 * p50 / p99 / max of the message -> first chunk time, this process's CPU per run and the slowest runs
 * with their index (a slow run early is the JIT warming; spread through the series, GC or the machine):
 *
 *   node --conditions=source --import tsx bench/profile-handoff.ts
 *   PROFILE_ONLY=troupe PROFILE_CPU_DIR=.tmp/prof-handoff node --conditions=source --import tsx bench/profile-handoff.ts
 *   node bench/profile-summary.mjs .tmp/prof-handoff/<the newest>.cpuprofile
 *
 * PROFILE_RUNS (default 1,000) runs after PROFILE_WARMUP (default 1,000, as the bench) warm-up runs;
 * PROFILE_ONLY=troupe, direct or floor runs one of the three; PROFILE_TRACE_GC=1 counts the GC pauses
 * inside runs; PROFILE_ALLOC=1 prints what a run allocates, in all and by function (the top
 * PROFILE_ALLOC_TOP, default 25), which compares two versions of the code where a latency cannot:
 *
 *   PROFILE_ONLY=troupe PROFILE_ALLOC=1 PROFILE_RUNS=600 node --conditions=source --import tsx bench/profile-handoff.ts
 *
 * PROFILE_ALLOC=survivors counts only what outlived a scavenge, PROFILE_ALLOC=live only what is alive when
 * the runs end (bench/profiler.ts `allocationWindow`).
 *
 * PROFILE_WINDOWS=N measures N windows of PROFILE_RUNS in a row and prints, for each, p50 / p99 and the CPU
 * per run of this process's main thread apart from its other threads (V8's compiler and GC helpers, from
 * /proc): how long V8 takes to finish compiling the handoff's code, which is what the bench's warm-up waits
 * out (bench/PROFILE.md, session 25):
 *
 *   PROFILE_ONLY=troupe PROFILE_WARMUP=10 PROFILE_RUNS=250 PROFILE_WINDOWS=10 node --conditions=source --import tsx bench/profile-handoff.ts
 */
import { readdirSync } from 'node:fs';
import { PerformanceObserver } from 'node:perf_hooks';
import { CLIENT_ROUTING_URI } from '../src/protocol/index.js';
import { userMessage } from '../src/sdk/client.js';
import { startNatsServer } from '../test/helpers/nats-server.js';
import { connectHandoffFloor } from './handoff-floor.js';
import { summarize } from './measure.js';
import { SOURCE, TARGET, desk, specialist, startMesh, timeToFirstChunk } from './patterns.js';
import { allocationWindow, printAllocation, procCpuUs, profileWindow } from './profiler.js';

const RUNS = Number(process.env.PROFILE_RUNS ?? 1_000);
const WARMUP = Number(process.env.PROFILE_WARMUP ?? 1_000);
const only = process.env.PROFILE_ONLY;
const WINDOWS = Number(process.env.PROFILE_WINDOWS ?? 1);
const TENANT = 'patterns';
const TIMEOUT_MS = 10_000;

/** GC pauses (ms) seen while a window runs. */
const gcPauses: number[] = [];

/** PROFILE_ALLOC: `1` or `all`, `survivors` or `live` (bench/profiler.ts `allocationWindow`). */
function allocationKeep(value: string): 'all' | 'survivors' | 'live' {
  if (value === 'survivors' || value === 'live') return value;
  if (value === '1' || value === 'all') return 'all';
  throw new Error(`PROFILE_ALLOC=${value}: say 1, all, survivors or live`);
}
const gc = new PerformanceObserver((list) => {
  for (const e of list.getEntries()) gcPauses.push(e.duration);
});
if (process.env.PROFILE_TRACE_GC) gc.observe({ entryTypes: ['gc'] });

/** CPU time (µs) of this process's main thread and of all its other threads, from /proc (Linux). */
function threadCpuUs(): { main: number; others: number } {
  let main = 0;
  let others = 0;
  for (const tid of readdirSync('/proc/self/task')) {
    let us: number;
    try {
      us = procCpuUs(`/proc/self/task/${tid}/stat`);
    } catch {
      continue; // a thread that ended meanwhile
    }
    if (Number(tid) === process.pid) main += us;
    else others += us;
  }
  return { main, others };
}

async function measure(what: string, sample: () => Promise<number>): Promise<void> {
  for (let i = 0; i < WARMUP; i++) await sample().catch(() => undefined);
  for (let w = 1; w < WINDOWS; w++) {
    const before = threadCpuUs();
    const samples: number[] = [];
    for (let i = 0; i < RUNS; i++) samples.push(await sample());
    const after = threadCpuUs();
    const s = summarize(samples);
    console.log(
      `${what}, window ${w} (runs ${WARMUP + (w - 1) * RUNS + 1}-${WARMUP + w * RUNS}): p50 ${(s.p50Us / 1000).toFixed(2)} ms, p99 ${(s.p99Us / 1000).toFixed(2)} ms; ` +
        `CPU per run: main thread ${Math.round((after.main - before.main) / RUNS)} µs, other threads ${Math.round((after.others - before.others) / RUNS)} µs`,
    );
  }
  gcPauses.length = 0;
  const threads0 = threadCpuUs();
  const stop = await profileWindow(what);
  const stopAllocation = process.env.PROFILE_ALLOC ? await allocationWindow({ keep: allocationKeep(process.env.PROFILE_ALLOC) }) : undefined;
  const cpu0 = process.cpuUsage();
  const samples: number[] = [];
  for (let i = 0; i < RUNS; i++) samples.push(await sample());
  const cpu = process.cpuUsage(cpu0);
  const threads = threadCpuUs();
  const allocation = await stopAllocation?.();
  await stop();
  const s = summarize(samples);
  const slowest = samples
    .map((us, i) => [us, i] as const)
    .sort((a, b) => b[0] - a[0])
    .slice(0, 8)
    .map(([us, i]) => `${(us / 1000).toFixed(1)} ms @${i}`)
    .join(', ');
  const gcLine = process.env.PROFILE_TRACE_GC
    ? `; GC ${gcPauses.length} pauses, ${gcPauses.reduce((a, b) => a + b, 0).toFixed(0)} ms, longest ${Math.max(0, ...gcPauses).toFixed(1)} ms`
    : '';
  console.log(
    `${what}: p50 ${(s.p50Us / 1000).toFixed(2)} ms, p99 ${(s.p99Us / 1000).toFixed(2)} ms, max ${(s.maxUs / 1000).toFixed(2)} ms; ` +
      `CPU ${Math.round((cpu.user + cpu.system) / RUNS)} µs per run (main thread ${Math.round((threads.main - threads0.main) / RUNS)} µs, ` +
      `other threads ${Math.round((threads.others - threads0.others) / RUNS)} µs)${gcLine}\n  slowest: ${slowest}`,
  );
  if (allocation) printAllocation(allocation, RUNS, `${what} run`, Number(process.env.PROFILE_ALLOC_TOP ?? 25));
}

const server = await startNatsServer();
const opts = { url: server.url, asNode: server.asNode, tenant: TENANT };
try {
  if (!only || only === 'troupe') {
    const mesh = await startMesh(opts, 'handoff', [desk, specialist], { entryAgent: SOURCE, agentTimeoutMs: TIMEOUT_MS, retries: 0 });
    try {
      await measure('troupe handoff', () =>
        timeToFirstChunk(mesh, TENANT, userMessage('I need the specialist'), TARGET, `user>${SOURCE},${SOURCE}>${TARGET}`, TIMEOUT_MS),
      );
    } finally {
      await mesh.stop();
    }
  }
  if (!only || only === 'direct') {
    const mesh = await startMesh(opts, 'handoff-direct', [desk, specialist], { entryAgent: SOURCE, agentTimeoutMs: TIMEOUT_MS, retries: 0 });
    try {
      const message = () => userMessage('I need the specialist', { metadata: { [CLIENT_ROUTING_URI]: { recipient: TARGET } } });
      await measure('troupe direct', () => timeToFirstChunk(mesh, TENANT, message(), TARGET, `user>${TARGET}`, TIMEOUT_MS));
    } finally {
      await mesh.stop();
    }
  }
  if (!only || only === 'floor') {
    const rig = await connectHandoffFloor(server.asNode, 'profile-handoff-floor', TIMEOUT_MS);
    try {
      await measure('floor', rig.sample);
    } finally {
      await rig.stop();
    }
  }
} finally {
  gc.disconnect();
  await server.stop();
}
