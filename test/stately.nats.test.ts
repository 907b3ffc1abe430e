/**
 * The mesh's inspection stream on a real nats-server (operator mode: node, agents, client and operator
 * each with their own credentials), followed the way a user would: `troupe watch` (text and JSON lines,
 * and what it says while nothing publishes), `troupe inspect --stately` consumed by @statelyai/inspect's
 * own WebSocket receiver, and `troupe inspect --record` replayed with `troupe replay` into a relay.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createWebSocketReceiver, type StatelyInspectionEvent } from '@statelyai/inspect';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import demoTeam from '../src/bin/demo/team.js';
import { InspectionRecordSchema } from '../src/protocol/inspection.js';
import { TroupeClient } from '../src/sdk/client.js';
import { KvThreadStore } from '../src/store/kv.js';
import { NatsTransport } from '../src/transport/nats.js';
import { freePort, startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup, type ManagedProcess } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

let nats: NatsServerHandle;
let node: TroupeNode;
let store: KvThreadStore;
let client: TroupeClient;
const transports: NatsTransport[] = [];
const hosts: AgentHost[] = [];
const procs = new ProcessGroup();
let dir: string;
let operatorEnv: Record<string, string>;
/** How long a CLI child may take to be ready, and a record to arrive, on a loaded 2-core machine. */
const STARTUP_MS = 60_000;
const ARRIVAL_MS = 30_000;

async function connectAs(user: string): Promise<NatsTransport> {
  const t = await NatsTransport.connect({ ...nats.as(user), name: `stately-${user}` });
  transports.push(t);
  return t;
}

/** Stately events from @statelyai/inspect's receiver, as they arrive. */
function receive(url: string): StatelyInspectionEvent[] {
  const events: StatelyInspectionEvent[] = [];
  createWebSocketReceiver({ server: url.replace(/^http/, 'ws') }).subscribe((e) => events.push(e));
  return events;
}

type Snap = Extract<StatelyInspectionEvent, { type: '@xstate.snapshot' }>;
type ActorEv = Extract<StatelyInspectionEvent, { type: '@xstate.actor' }>;
/** The state value in a Stately snapshot (its type says Snapshot<unknown>; a machine snapshot has a value). */
const valueOf = (e: Snap): unknown => (e.snapshot as { value?: unknown }).value;
const label = (v: unknown): string =>
  typeof v === 'string'
    ? v
    : Object.entries(v as object)
        .map(([k, i]) => `${k}.${label(i)}`)
        .join(',');

/** Every actor's definition arrives before its first snapshot; returns the actors in registration order. */
function checkDefinitionsFirst(events: StatelyInspectionEvent[]): ActorEv[] {
  const registered = new Map<string, ActorEv>();
  for (const e of events) {
    if (e.type === '@xstate.actor') {
      registered.set(e.sessionId, e);
      expect(JSON.parse(e.definition ?? 'null')).toMatchObject({ id: expect.any(String) });
    } else if (e.type === '@xstate.snapshot') expect(registered.has(e.sessionId), `snapshot of ${e.sessionId} before its definition`).toBe(true);
  }
  return [...registered.values()];
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'troupe-stately-'));
  nats = await startNatsServer();
  const nodeT = await connectAs('node');
  store = await KvThreadStore.open(nodeT.connection);
  node = await new TroupeNode({
    transport: nodeT,
    tenant: 'demo',
    store,
    durable: { nc: nodeT.connection },
    ...(demoTeam.config ? { config: demoTeam.config } : {}),
  }).start();
  for (const agent of demoTeam.agents) hosts.push(await new AgentHost({ transport: await connectAs(agent.card.id), agent, tenant: 'demo' }).start());
  await node.registry.waitFor(demoTeam.agents.map((a) => a.card.id));
  await waitUntil(
    () => ((node.ps().actors[0]?.detail?.['partitions'] as number[] | undefined) ?? []).length === 8,
    'the node to own every partition',
    ARRIVAL_MS,
  );
  client = new TroupeClient(await connectAs('client'), { tenant: 'demo', principal: 'client' });
  operatorEnv = { TROUPE_NATS_URL: nats.url, TROUPE_NATS_CREDS: nats.credsFile('operator') };
});

afterAll(async () => {
  await procs.stopAll();
  for (const h of hosts) await h.stop().catch(() => undefined);
  await node?.stop().catch(() => undefined);
  await store?.close().catch(() => undefined);
  for (const t of transports) await t.drain().catch(() => undefined);
  await nats?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('following the mesh', { timeout: 180_000 }, () => {
  let threadId: string;
  let relay: ManagedProcess;
  let relayUrl: string;
  let live: StatelyInspectionEvent[];
  let watcher: ManagedProcess;
  let jsonWatcher: ManagedProcess;
  let recorder: ManagedProcess;
  const recording = () => join(dir, 'thread.jsonl');

  it('troupe watch says that nothing is publishing, and how to turn inspection on', async () => {
    const idle = await procs.spawnTroupe(['watch', '*'], operatorEnv, {
      ready: /nothing is publishing: inspection is off on 1 node\(s\)/,
      readyTimeoutMs: STARTUP_MS,
    });
    expect(idle.stderr).toContain('troupe inspect --on');
    expect(idle.stdout).toBe('');
    await idle.kill();
  });

  it('troupe watch --count stops after that many records (exit 0); --for with --count exits 1 when fewer came', async () => {
    const bounded = `t-bounded-${Date.now()}`;
    const [counted, short] = await Promise.all([
      procs.spawnTroupe(['watch', bounded, '--on', '--count', '2'], operatorEnv, { ready: /inspection is on at/, readyTimeoutMs: STARTUP_MS }),
      procs.spawnTroupe(['watch', `${bounded}-silent`, '--count', '1', '--for', '2000'], operatorEnv, { ready: /watching/, readyTimeoutMs: STARTUP_MS }),
    ]);
    await client.send('Write about otters', { threadId: bounded });
    expect((await counted.exited).code).toBe(0);
    expect((await short.exited).code).toBe(1);
    // A child's last output may be read after its exit event.
    await waitUntil(() => counted.stdout.trim().split('\n').length >= 2, 'the two records watch showed', ARRIVAL_MS);
    expect(counted.stdout.trim().split('\n')).toHaveLength(2);
    await waitUntil(() => short.stderr.includes('0 of 1 records came in 2000 ms'), 'watch --for to say what came', ARRIVAL_MS);
    expect(short.stdout).toBe('');
  });

  it('a conversation reaches the Stately relay: definitions first, then the thread and its children in order', async () => {
    threadId = `t-stately-${Date.now()}`;
    const port = await freePort();
    // Four CLI processes start at once (each takes seconds to load on a busy machine).
    [relay, watcher, jsonWatcher, recorder] = await Promise.all([
      procs.spawnTroupe(['inspect', '--stately', '--port', String(port)], operatorEnv, { ready: /inspection on at 1 node\(s\)/, readyTimeoutMs: STARTUP_MS }),
      procs.spawnTroupe(['watch', threadId, '--on'], operatorEnv, { ready: /inspection is on at/, readyTimeoutMs: STARTUP_MS }),
      procs.spawnTroupe(['watch', threadId, '--json', '--on'], operatorEnv, { ready: /inspection is on at/, readyTimeoutMs: STARTUP_MS }),
      procs.spawnTroupe(['inspect', '--record', recording(), '--thread', threadId], operatorEnv, {
        ready: /inspection on at 1 node/,
        readyTimeoutMs: STARTUP_MS,
      }),
    ]);
    relayUrl = `http://localhost:${port}`;
    expect(relay.stderr).toContain(relayUrl);
    const page = await (await fetch(relayUrl)).text();
    expect(page).toContain('https://stately.ai/inspect');
    expect(page).toContain('@statelyai.connected');
    live = receive(relayUrl);
    // The agents were switched on through hello: each announced its own actor to the relay.
    await waitUntil(
      () => live.filter((e) => e.type === '@xstate.actor' && (e as ActorEv).sessionId.startsWith('agent:')).length === 3,
      'the three agents to be announced',
      ARRIVAL_MS,
    );

    const turn = await client.send('Write about otters', { threadId });
    expect(turn.final.status.state).toBe('input-required');
    const threadSnapshots = () => live.filter((e): e is Snap => e.type === '@xstate.snapshot' && e.sessionId === threadId);
    await waitUntil(() => threadSnapshots().some((e) => valueOf(e) === 'input-required'), 'the relay to see input-required', ARRIVAL_MS);

    const actors = checkDefinitionsFirst(live);
    const thread = actors.find((a) => a.sessionId === threadId)!;
    expect(JSON.parse(thread.definition!)).toMatchObject({
      id: 'thread',
      states: expect.objectContaining({ working: expect.anything(), 'input-required': expect.anything() }),
    });
    expect(actors.find((a) => a.sessionId === `${threadId}/agentCall`)).toMatchObject({ parentId: threadId, rootId: threadId });
    // The demo team routes without a policy: each decision is a step of the thread, not a router actor.
    expect(actors.some((a) => a.sessionId === `${threadId}/router`)).toBe(false);
    // The thread's states in the order they happened: it waits only on its agent calls.
    const states = threadSnapshots().map((e) => label(valueOf(e)));
    expect(states.indexOf('working.calling')).toBeGreaterThanOrEqual(0);
    expect(states.filter((s) => s.startsWith('working.') && s !== 'working.calling')).toEqual([]);
    expect(states.at(-1)).toBe('input-required');
    // Each event comes right before the snapshot it led to.
    const i = live.findIndex((e) => e.type === '@xstate.snapshot' && e.sessionId === threadId);
    expect(live[i - 1]).toMatchObject({ type: '@xstate.event', sessionId: threadId });
    // Its children too: three agent calls (triage, researcher, writer), each ending in its final state.
    // XState reports a child's final snapshot after its parent has taken the child's done event (and the
    // thread may reach input-required in that same step), and the writer goes idle after it has replied:
    // those records may still be on their way when the thread's last one has arrived.
    const ends = (sessionId: string) =>
      live.filter((e): e is Snap => e.type === '@xstate.snapshot' && e.sessionId === sessionId && e.snapshot.status === 'done').map((e) => label(valueOf(e)));
    const agentStates = () =>
      live.filter((e): e is Snap => e.type === '@xstate.snapshot' && e.sessionId.startsWith('agent:writer:')).map((e) => label(valueOf(e)));
    await waitUntil(
      () => ends(`${threadId}/agentCall`).length >= 3 && agentStates().includes('ready.idle'),
      'the last agent call to end and the writer to go idle',
      ARRIVAL_MS,
    );
    expect(ends(`${threadId}/agentCall`)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    // And the agents it called went busy and idle again.
    expect(agentStates()).toEqual(expect.arrayContaining(['ready.busy', 'ready.idle']));
  });

  it('an inspector that connects later gets every actor with its definition, then its latest state', async () => {
    const late = receive(relayUrl);
    await waitUntil(() => late.some((e) => e.type === '@xstate.snapshot' && e.sessionId === threadId), 'the late inspector to get the thread', ARRIVAL_MS);
    const actors = checkDefinitionsFirst(late);
    expect(actors.map((a) => a.sessionId)).toEqual(expect.arrayContaining([threadId, `${threadId}/agentCall`]));
    const last = late.filter((e): e is Snap => e.type === '@xstate.snapshot' && e.sessionId === threadId).at(-1);
    expect(last ? valueOf(last) : undefined).toBe('input-required');
  });

  it('troupe watch prints each transition as from → to (event); --json prints only JSON lines', async () => {
    await waitUntil(() => /→ input-required \(/.test(watcher.stdout), 'the watcher to print input-required', ARRIVAL_MS);
    const lines = watcher.stdout.trim().split('\n');
    expect(lines.some((l) => l.includes(`${threadId}  submitted → working.calling (troupe.user.message)`))).toBe(true);
    expect(lines.some((l) => l.includes(`${threadId}/agentCall  calling → succeeded (xstate.done.actor.request)`))).toBe(true);
    await waitUntil(() => jsonWatcher.stdout.includes('"input-required"'), 'the JSON watcher to see input-required', ARRIVAL_MS);
    const records = jsonWatcher.stdout
      .trim()
      .split('\n')
      .map((l) => InspectionRecordSchema.parse(JSON.parse(l)));
    expect(records.every((r) => r.threadId === threadId)).toBe(true);
    expect(records.some((r) => r.kind === 'actor' && r.actorId === `${threadId}/agentCall`)).toBe(true);
  });

  it('troupe inspect --record writes the thread as JSON lines, and troupe replay sends it to a relay', async () => {
    await waitUntil(
      () => {
        try {
          return readFileSync(recording(), 'utf8').includes('"input-required"');
        } catch {
          return false;
        }
      },
      'the recording to hold the answer',
      ARRIVAL_MS,
    );
    await recorder.kill();
    expect(recorder.stderr).toMatch(/\d+ records written/);
    const recorded = readFileSync(recording(), 'utf8')
      .trim()
      .split('\n')
      .map((l) => InspectionRecordSchema.parse(JSON.parse(l)));
    expect(recorded.every((r) => r.threadId === threadId)).toBe(true);
    const port = await freePort();
    await procs.spawnTroupe(['replay', recording(), '--port', String(port)], {}, { ready: /records replayed/, readyTimeoutMs: STARTUP_MS });
    const replayed = receive(`http://localhost:${port}`);
    await waitUntil(
      () => replayed.some((e) => e.type === '@xstate.snapshot' && e.sessionId === threadId && valueOf(e) === 'input-required'),
      'the replayed thread',
      ARRIVAL_MS,
    );
    checkDefinitionsFirst(replayed);
  });

  it('troupe replay refuses a file that is not a recording, naming the line', async () => {
    const bad = join(dir, 'bad.jsonl');
    const { writeFileSync } = await import('node:fs');
    writeFileSync(bad, `${readFileSync(recording(), 'utf8').split('\n')[0]}\n{"kind":"snapshot"}\n`);
    const proc = await procs.spawnTroupe(['replay', bad, '--port', String(await freePort())], {});
    const exit = await proc.exited;
    expect(exit.code).toBe(1);
    expect(proc.stderr).toMatch(/bad\.jsonl:2: not an inspection record/);
  });
});
