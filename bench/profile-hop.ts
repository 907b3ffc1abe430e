/**
 * Where an agent hop's CPU goes: a fresh nats-server, the echo agent (AgentHost over NatsTransport) and
 * 64 requests in flight from a "thread" connection in this process, for PROFILE_SECONDS, against the same
 * run of raw request-reply (an nc.subscribe echo) for comparison. Run it under the V8 profiler:
 *
 *   node --conditions=source --cpu-prof --cpu-prof-dir=.tmp/prof-hop --import tsx bench/profile-hop.ts
 *   node bench/profile-summary.mjs .tmp/prof-hop/<the newest>.cpuprofile
 *   PROFILE_ONLY=hop PROFILE_SECONDS=3 PROFILE_WINDOWS=5 node --conditions=source --import tsx bench/profile-hop.ts
 */
import { randomUUID } from 'node:crypto';
import { AgentHost } from '../src/actors/agent-host.js';
import { HEADERS, encodeJson, type Message } from '../src/protocol/index.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { startNatsServer } from '../test/helpers/nats-server.js';

const SECONDS = Number(process.env.PROFILE_SECONDS ?? 6);
const WORKERS = 64;
const TEXT = 'Hello Troupe, please echo this benchmark message back to me.';

const server = await startNatsServer();
// PROFILE_AGENT_USER=node connects the agent without its role's limits (to see what the broker's response permissions cost).
const agentT = await NatsTransport.connect({ ...server.as(process.env.PROFILE_AGENT_USER ?? 'echo'), name: 'hop-agent' });
const nodeT = await NatsTransport.connect({ ...server.as('node'), name: 'hop-node' });
const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(ctx.text, { to: 'user' }) });
const host = await new AgentHost({ transport: agentT, agent: echo }).start();
const raw = nodeT.connection.subscribe('bench.raw', {
  callback: (_e, m) => {
    m.respond(m.data);
  },
});
/** PROFILE_ONLY=hop (or raw) runs one of the two, so a profile shows one alone. */
const only = process.env.PROFILE_ONLY;
/**
 * PROFILE_WINDOWS=N measures each row N times in a row (PROFILE_SECONDS each), printing each window: a
 * rate that falls window after window means state growing per request somewhere (bench/PROFILE.md).
 */
const WINDOWS = Number(process.env.PROFILE_WINDOWS ?? 1);

async function run(what: string, op: (w: number, i: number) => Promise<void>): Promise<void> {
  for (let window = 1; window <= WINDOWS; window++) await measure(WINDOWS > 1 ? `${what}, window ${window}` : what, op, window);
}

async function measure(what: string, op: (w: number, i: number) => Promise<void>, window: number): Promise<void> {
  let n = 0;
  const until = performance.now() + SECONDS * 1000;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: WORKERS }, async (_, w) => {
    for (let i = 0; performance.now() < until; i++) {
      await op(w, window * 1e9 + i);
      n++;
    }
  }));
  const cpu = process.cpuUsage(cpu0);
  const s = (performance.now() - t0) / 1000;
  console.log(JSON.stringify({ what, perSecond: Math.round(n / s), cpuUsPerOp: Math.round((cpu.user + cpu.system) / n) }));
}

const body = (threadId: string): Uint8Array => {
  const message: Message = { kind: 'message', role: 'user', messageId: randomUUID(), contextId: threadId, taskId: threadId, parts: [{ kind: 'text', text: TEXT }] };
  return encodeJson(message);
};
const rawBody = body('t-raw');
if (only !== 'hop') await run('raw request-reply', async () => {
  await nodeT.connection.request('bench.raw', rawBody, { timeout: 10_000 });
});
if (only !== 'raw') await run('agent hop', async (w, i) => {
  const threadId = `hop-${w}`;
  await nodeT.request(subjects.agentInbox('demo', 'echo'), body(threadId), {
    timeoutMs: 10_000,
    headers: { [HEADERS.threadId]: threadId, [HEADERS.tenant]: 'demo', [HEADERS.hop]: '0', [HEADERS.sender]: 'user', [HEADERS.callId]: `${threadId}/${i}` },
  });
});
raw.unsubscribe();
await host.stop();
await agentT.close();
await nodeT.close();
await server.stop();
