/**
 * Where an embedded turn's CPU goes: the embedded mesh (one echo agent as the entry agent), 64 threads
 * with one turn in flight each, for PROFILE_SECONDS. Run it under the V8 profiler and summarise:
 *
 *   node --conditions=source --cpu-prof --cpu-prof-dir=.tmp/prof --import tsx bench/profile.ts
 *   node bench/profile-summary.mjs .tmp/prof/<the newest>.cpuprofile
 *
 * Prints turns per second; bench/PROFILE.md records the before/after of each change.
 */
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { defineAgent, reply } from '../src/sdk/agent.js';

const SECONDS = Number(process.env.PROFILE_SECONDS ?? 8);
const WORKERS = 64;

const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }) });
const mesh = await startEmbedded({ name: 'profile', agents: [echo], config: { entryAgent: 'echo' } }, silentLogger());
let turns = 0;
const until = performance.now() + SECONDS * 1000;
const cpu0 = process.cpuUsage();
const t0 = performance.now();
await Promise.all(
  Array.from({ length: WORKERS }, async (_, w) => {
    for (let i = 0; performance.now() < until; i++) {
      await mesh.client.send(`hello ${i}`, { threadId: `w${w}`, recheckMs: 0 });
      turns++;
    }
  }),
);
const elapsed = (performance.now() - t0) / 1000;
const cpu = process.cpuUsage(cpu0);
console.log(
  JSON.stringify({
    turns,
    turnsPerSecond: Math.round(turns / elapsed),
    cpuMsPerTurn: +((cpu.user + cpu.system) / 1000 / turns).toFixed(3),
    seconds: +elapsed.toFixed(1),
  }),
);
await mesh.stop();
