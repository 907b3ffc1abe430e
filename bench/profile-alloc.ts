/**
 * What a turn allocates, in bytes (collected objects included): V8's sampling heap profiler over the
 * embedded mesh (bench/profile.ts's: the echo agent, 64 threads with a turn in flight each) for
 * PROFILE_TURNS turns after a warm-up, then bytes per turn in all and by the function that allocated.
 * Allocation counts do not depend on how busy the machine is, so this compares two versions of the code
 * on a noisy machine where a rate does not:
 *
 *   node --conditions=source --import tsx bench/profile-alloc.ts
 *   PROFILE_ALLOC_TOP=40 PROFILE_TURNS=20000 node --conditions=source --import tsx bench/profile-alloc.ts
 *   PROFILE_ALLOC_SURVIVORS=1 node --conditions=source --import tsx bench/profile-alloc.ts   # what outlives a scavenge
 *
 * The profiler samples one allocation per PROFILE_ALLOC_INTERVAL bytes (default 4,096) on average, so
 * the figures are estimates; two runs of the same code agree within a few per cent at 10,000 turns.
 */
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { allocationWindow, printAllocation } from './profiler.js';

process.stdout.on('error', () => undefined); // a closed pipe (| head) is not an error here
const TURNS = Number(process.env.PROFILE_TURNS ?? 10_000);
const TOP = Number(process.env.PROFILE_ALLOC_TOP ?? 25);
const WORKERS = 64;

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
const stop = await allocationWindow({ keep: process.env.PROFILE_ALLOC_SURVIVORS ? 'survivors' : 'all' });
await turns(TURNS, 'w-');
const allocation = await stop();
await mesh.stop();
printAllocation(allocation, TURNS, 'embedded turn', TOP);
