/**
 * What a turn allocates, in bytes (collected objects included): V8's sampling heap profiler over the
 * embedded mesh (bench/profile.ts's: the echo agent, 64 threads with a turn in flight each) for
 * PROFILE_TURNS turns after a warm-up, then bytes per turn in all and by the function that allocated.
 * Allocation counts do not depend on how busy the machine is, so this compares two versions of the code
 * on a noisy machine where a rate does not:
 *
 *   node --conditions=source --import tsx bench/profile-alloc.ts
 *   PROFILE_ALLOC_TOP=40 PROFILE_TURNS=20000 node --conditions=source --import tsx bench/profile-alloc.ts
 *
 * The profiler samples one allocation per PROFILE_ALLOC_INTERVAL bytes (default 4,096) on average, so
 * the figures are estimates; two runs of the same code agree within a few per cent at 10,000 turns.
 */
import { Session } from 'node:inspector/promises';
import { startEmbedded } from '../src/actors/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { defineAgent, reply } from '../src/sdk/agent.js';

process.stdout.on('error', () => undefined); // a closed pipe (| head) is not an error here
const TURNS = Number(process.env.PROFILE_TURNS ?? 10_000);
const TOP = Number(process.env.PROFILE_ALLOC_TOP ?? 25);
const INTERVAL = Number(process.env.PROFILE_ALLOC_INTERVAL ?? 4_096);
const WORKERS = 64;

interface SamplingNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  id: number;
  children: SamplingNode[];
}

const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }) });
const mesh = await startEmbedded({ name: 'profile-alloc', agents: [echo], config: { entryAgent: 'echo' } }, silentLogger());

async function turns(n: number, prefix: string): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, w) => {
      while (next < n) {
        next++;
        await mesh.client.send(`hello ${next}`, { threadId: `${prefix}${w}`, recheckMs: 0 });
      }
    }),
  );
}

await turns(2_000, 'warm-');
const session = new Session();
session.connect();
await session.post('HeapProfiler.enable');
await session.post('HeapProfiler.startSampling', { samplingInterval: INTERVAL, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
await turns(TURNS, 'w-');
const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: SamplingNode } };
session.disconnect();
await mesh.stop();

const byFunction = new Map<string, number>();
let total = 0;
const nameOf = (node: SamplingNode): string => {
  const { functionName, url, lineNumber } = node.callFrame;
  const where = url.replace(/^.*\/(node_modules\/|src\/|bench\/)/, '$1');
  return where ? `${functionName || '(anonymous)'}  ${where}:${lineNumber + 1}` : functionName || '(native)';
};
// A native allocation (`new Set`, `Object.entries`, a string) is named with the function that made it.
const walk = (node: SamplingNode, caller: string): void => {
  const native = !node.callFrame.url;
  const name = nameOf(node);
  if (node.selfSize > 0) {
    const key = native ? `${name} <- ${caller}` : name;
    byFunction.set(key, (byFunction.get(key) ?? 0) + node.selfSize);
    total += node.selfSize;
  }
  for (const child of node.children) walk(child, native ? caller : name);
};
walk(profile.head, '(root)');
const perTurn = (bytes: number) => `${(bytes / TURNS / 1024).toFixed(1).padStart(6)} KiB`;
console.log(`${TURNS} embedded turns: ${perTurn(total)} allocated per turn\n\nby function (per turn):`);
for (const [k, v] of [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, TOP)) console.log(`${perTurn(v)}  ${k}`);
