/**
 * Where a durable turn's time goes: a fresh nats-server, a durable TroupeNode (TROUPE_IN, KV store, ack
 * after commit), the echo agent as its own NATS user and 64 threads with one turn in flight each, all
 * in this process, for PROFILE_SECONDS after PROFILE_WARMUP_SECONDS (3) of warm-up; then the raw turn
 * (the same NATS work without Troupe: bench/durability.ts `startRawTurn`) for as long. For each it prints turns per second, this process's CPU per
 * turn and the nats-server's CPU per turn (from /proc), so it tells whether a turn waits on the broker or
 * on Troupe:
 *
 *   node --conditions=source --import tsx bench/profile-turn.ts
 *   PROFILE_CPU_DIR=.tmp/prof-turn node --conditions=source --import tsx bench/profile-turn.ts
 *   node bench/profile-summary.mjs .tmp/prof-turn/<the newest>.cpuprofile
 *
 * With PROFILE_CPU_DIR the V8 profiler runs during each measured window only (not the server's start, the
 * credentials' signing or the warm-up) and writes `<what>-<time>.cpuprofile` there.
 *
 * Then the floor of the durable turn (the raw turn with the durable turn's guarantees: bench/turn-floor.ts).
 * PROFILE_ONLY=troupe (or raw, or floor, or a list: raw,floor) runs those of the three; PROFILE_WORKERS (default 64) sets the threads
 * with a turn in flight (1: one turn at a time, the p50 rows' case). PROFILE_FLOOR_WITHOUT runs the floor
 * with guarantees taken out, to see what each costs:
 *
 *   PROFILE_ONLY=raw,floor PROFILE_FLOOR_WITHOUT=';validation;xstate;record;status;marker;status,marker' node --conditions=source --import tsx bench/profile-turn.ts
 */
import { execFileSync } from 'node:child_process';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { encodeJson } from '../src/protocol/index.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient, userMessage } from '../src/sdk/client.js';
import { KvThreadStore } from '../src/store/kv.js';
import { encodeRecord } from '../src/store/codec.js';
import { NatsTransport } from '../src/transport/nats.js';
import { startNatsServer } from '../test/helpers/nats-server.js';
import { startRawTurn } from './durability.js';
import { floorResponder } from './measure.js';
import { procCpuUs, profileWindow } from './profiler.js';
import { FLOOR_GUARANTEES, durableTurnFloor, type FloorGuarantee } from './turn-floor.js';

const SECONDS = Number(process.env.PROFILE_SECONDS ?? 8);
/**
 * Seconds each row runs before it is measured (and profiled): V8 compiles a durable turn's code over its
 * first ~2,500 turns, and a profile of the first seconds shows the interpreter (bench/PROFILE.md, session 25).
 */
const WARMUP_SECONDS = Number(process.env.PROFILE_WARMUP_SECONDS ?? 3);
const WORKERS = Number(process.env.PROFILE_WORKERS ?? 64);
const TEXT = 'Hello Troupe, please echo this benchmark message back to me.';
const only = process.env.PROFILE_ONLY?.split(',');
/** Whether PROFILE_ONLY (a `,`-separated list; unset: all) includes `what`. */
const runs = (what: 'troupe' | 'raw' | 'floor') => only === undefined || only.includes(what);

/** CPU time (user + system, µs) the process listening on `port` has used so far. */
function serverCpuUs(port: number): () => number {
  const out = execFileSync('ss', ['-ltnpH', `sport = :${port}`], { encoding: 'utf8' });
  const pid = /pid=(\d+)/.exec(out)?.[1];
  if (!pid) throw new Error(`no process listens on ${port}: ${out}`);
  return () => procCpuUs(`/proc/${pid}/stat`);
}

const server = await startNatsServer();
const brokerCpu = serverCpuUs(server.port);
const nodeT = await NatsTransport.connect({ ...server.asNode, name: 'turn-node' });
const agentT = await NatsTransport.connect({ ...server.as('echo'), name: 'turn-agent' });
const clientT = await NatsTransport.connect({ ...server.as('client'), name: 'turn-client' });
const rawT = await NatsTransport.connect({ ...server.asNode, name: 'turn-raw' });
const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(ctx.text, { to: 'user' }) });
const host = await new AgentHost({ transport: agentT, agent: echo }).start();
const store = await KvThreadStore.open(nodeT.jetstreamConnection);
const node = await new TroupeNode({
  transport: nodeT,
  tenant: 'demo',
  store,
  durable: { nc: nodeT.jetstreamConnection, partitions: 8 },
  config: { entryAgent: 'echo' },
}).start();
await node.registry.waitFor(['echo']);
const client = new TroupeClient(clientT, { tenant: 'demo', principal: 'client' });

/**
 * PROFILE_FLOOR_WITHOUT: floors to run, `;`-separated, each a `,`-separated list of guarantees taken out
 * (bench/turn-floor.ts FLOOR_GUARANTEES; empty: all kept), e.g. `;validation;xstate;status,marker`.
 */
function floorVariants(): FloorGuarantee[][] {
  const spec = process.env.PROFILE_FLOOR_WITHOUT;
  if (spec === undefined) return [[]];
  return spec.split(';').map((variant) =>
    variant
      .split(',')
      .map((g) => g.trim())
      .filter((g) => g !== '')
      .map((g) => {
        if (!(FLOOR_GUARANTEES as readonly string[]).includes(g)) throw new Error(`PROFILE_FLOOR_WITHOUT: "${g}" is not one of ${FLOOR_GUARANTEES.join(', ')}`);
        return g as FloorGuarantee;
      }),
  );
}

async function run(what: string, op: (w: number) => Promise<void>): Promise<void> {
  // Warm-up: every worker's thread exists, and V8 has compiled the code.
  const warm = performance.now() + WARMUP_SECONDS * 1000;
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, w) => {
      do await op(w);
      while (performance.now() < warm);
    }),
  );
  let n = 0;
  const stopProfile = await profileWindow(what);
  const until = performance.now() + SECONDS * 1000;
  const cpu0 = process.cpuUsage();
  const broker0 = brokerCpu();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, w) => {
      while (performance.now() < until) {
        await op(w);
        n++;
      }
    }),
  );
  const cpu = process.cpuUsage(cpu0);
  const s = (performance.now() - t0) / 1000;
  await stopProfile();
  console.log(
    JSON.stringify({
      what,
      perSecond: Math.round(n / s),
      processCpuUsPerTurn: Math.round((cpu.user + cpu.system) / n),
      brokerCpuUsPerTurn: Math.round((brokerCpu() - broker0) / n),
      processCpuShare: +((cpu.user + cpu.system) / 1e6 / s).toFixed(2),
      brokerCpuShare: +((brokerCpu() - broker0) / 1e6 / s).toFixed(2),
    }),
  );
}

if (runs('troupe')) {
  await run('durable turn', async (w) => {
    const res = await client.send(TEXT, { threadId: `turn-${w}`, timeoutMs: 10_000 });
    if (res.error) throw new Error(`${res.error.code}: ${res.error.message}`);
  });
}
if (runs('raw') || runs('floor')) {
  // The record of a thread at the history limit sizes the raw turn's value and shapes the floor's records.
  if (!(await store.get('demo', 'turn-0'))) for (let i = 0; i < 30; i++) await client.send(TEXT, { threadId: 'turn-0', timeoutMs: 10_000 });
  const stored = (await store.get('demo', 'turn-0'))!;
  const raw = {
    echoSubject: 'bench.raw.echo',
    request: encodeJson(userMessage(TEXT)),
    valueBytes: encodeRecord(stored.record).data.byteLength,
    messageBytes: encodeJson(userMessage(TEXT)).length,
    workers: WORKERS,
    timeoutMs: 10_000,
  };
  const sub = rawT.connection.subscribe('bench.raw.echo', { callback: (_e, m) => void m.respond(m.data) });
  if (runs('raw')) {
    const rawTurn = await startRawTurn(rawT.connection, raw);
    await run('raw turn', async (w) => void (await rawTurn.op(w, 0)));
    await rawTurn.stop();
  }
  if (runs('floor')) {
    const responderT = await NatsTransport.connect({ ...server.as('pyecho'), name: 'turn-floor-responder' });
    const responder = floorResponder(responderT, 'demo', 'pyecho');
    await responderT.flush();
    for (const without of floorVariants()) {
      const guarantees = await durableTurnFloor({
        transport: rawT,
        tenant: 'demo',
        agentId: 'pyecho',
        text: TEXT,
        record: stored.record,
        timeoutMs: 10_000,
        without,
      });
      const floorTurn = await startRawTurn(rawT.jetstreamConnection, { ...raw, name: `floor${without.length ? `-${without.join('-')}` : ''}`, guarantees });
      await run(`durable turn floor${without.length ? ` without ${without.join(', ')}` : ''}`, async (w) => void (await floorTurn.op(w, 0)));
      await floorTurn.stop();
      guarantees.stop();
    }
    responder.unsubscribe();
    await responderT.close();
  }
  sub.unsubscribe();
}
await node.stop();
await host.stop();
for (const t of [nodeT, agentT, clientT, rawT]) await t.close();
await server.stop();
