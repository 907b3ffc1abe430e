/**
 * Where an agent hop's CPU goes: a fresh nats-server, the echo agent (AgentHost over NatsTransport) and
 * 64 requests in flight from a "thread" connection in this process, for PROFILE_SECONDS, against the same
 * run of raw request-reply (an nc.subscribe echo) for comparison. Run it under the V8 profiler:
 *
 *   node --conditions=source --cpu-prof --cpu-prof-dir=.tmp/prof-hop --import tsx bench/profile-hop.ts
 *   node bench/profile-summary.mjs .tmp/prof-hop/<the newest>.cpuprofile
 *   PROFILE_ONLY=hop PROFILE_SECONDS=3 PROFILE_WINDOWS=5 node --conditions=source --import tsx bench/profile-hop.ts
 *   PROFILE_ONLY=hop PROFILE_WORKERS=1 PROFILE_CPU_DIR=.tmp/prof-hop node --conditions=source --import tsx bench/profile-hop.ts
 *
 * PROFILE_WORKERS (default 64) sets the requests in flight (1: the p50 rows' one at a time); with
 * PROFILE_CPU_DIR the profiler covers each measured window only (bench/profiler.ts).
 */
import { randomUUID } from 'node:crypto';
import { AgentHost } from '../src/actors/agent-host.js';
import { AgentReplySchema, HEADERS, decode, encodeJson, type Message } from '../src/protocol/index.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { startNatsServer } from '../test/helpers/nats-server.js';
import { floorResponder } from './measure.js';
import { profileWindow } from './profiler.js';

const SECONDS = Number(process.env.PROFILE_SECONDS ?? 6);
/** PROFILE_WORKERS=1 measures one request at a time (the bench's p50 rows). */
const WORKERS = Number(process.env.PROFILE_WORKERS ?? 64);
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
// The floor of a hop's guarantees (bench/measure.ts), on its own agent user (pyecho's, with the same
// permissions as echo's), so it may take only its own inbox.
const floorT = await NatsTransport.connect({ ...server.as(process.env.PROFILE_AGENT_USER ?? 'pyecho'), name: 'hop-floor' });
const floor = floorResponder(floorT, 'demo', 'pyecho');
/** The transport alone: the same request with the thread's headers over Troupe's transport, echoed unread (no validation). */
const bareT = await NatsTransport.connect({ ...server.as(process.env.PROFILE_AGENT_USER ?? 'slowecho'), name: 'hop-bare' });
const bare = bareT.subscribe(
  subjects.agentInbox('demo', 'slowecho'),
  (m) => {
    m.respond(m.data);
  },
  { queue: subjects.agentQueue('slowecho') },
);
/** PROFILE_ONLY=hop (or raw, bare, floor) runs one of them, so a profile shows one alone. */
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
  const times: number[] = [];
  const stopProfile = await profileWindow(what);
  const until = performance.now() + SECONDS * 1000;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, w) => {
      for (let i = 0; performance.now() < until; i++) {
        const t = performance.now();
        await op(w, window * 1e9 + i);
        times.push(performance.now() - t);
        n++;
      }
    }),
  );
  const cpu = process.cpuUsage(cpu0);
  const s = (performance.now() - t0) / 1000;
  await stopProfile();
  times.sort((a, b) => a - b);
  const p50Us = Math.round(1000 * (times[Math.floor(times.length / 2)] ?? 0));
  console.log(JSON.stringify({ what, perSecond: Math.round(n / s), cpuUsPerOp: Math.round((cpu.user + cpu.system) / n), p50Us }));
}

const body = (threadId: string): Uint8Array => {
  const message: Message = {
    kind: 'message',
    role: 'user',
    messageId: randomUUID(),
    contextId: threadId,
    taskId: threadId,
    parts: [{ kind: 'text', text: TEXT }],
  };
  return encodeJson(message);
};
const rawBody = body('t-raw');
if (only === undefined || only === 'raw')
  await run('raw request-reply', async () => {
    await nodeT.connection.request('bench.raw', rawBody, { timeout: 10_000 });
  });
/** A call to an agent's inbox as a thread makes it: the thread's headers, 10 s to answer. */
const callAgent = (agentId: string, data: Uint8Array, w: number, i: number) => {
  const threadId = `hop-${w}`;
  return nodeT.request(subjects.agentInbox('demo', agentId), data, {
    timeoutMs: 10_000,
    headers: { [HEADERS.threadId]: threadId, [HEADERS.tenant]: 'demo', [HEADERS.hop]: '0', [HEADERS.sender]: 'user', [HEADERS.callId]: `${threadId}/${i}` },
  });
};
if (only === undefined || only === 'bare')
  await run("Troupe transport request-reply with the thread's headers, unvalidated", async (w, i) => {
    await callAgent('slowecho', rawBody, w, i);
  });
if (only === undefined || only === 'floor')
  await run("validated request-reply (the floor of a hop's guarantees)", async (w, i) => {
    decode(AgentReplySchema, (await callAgent('pyecho', body(`hop-${w}`), w, i)).data, 'floor reply');
  });
if (only === undefined || only === 'hop')
  await run('agent hop', async (w, i) => {
    decode(AgentReplySchema, (await callAgent('echo', body(`hop-${w}`), w, i)).data, 'echo reply');
  });
raw.unsubscribe();
floor.unsubscribe();
bare.unsubscribe();
await bareT.close();
await floorT.close();
await host.stop();
await agentT.close();
await nodeT.close();
await server.stop();
