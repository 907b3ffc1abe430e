/**
 * The inspection stream on the embedded mesh: off by default (nothing published), switched at run time
 * by `ctl.inspection` for the whole mesh or one thread, snapshots AFTER each event, every actor of a
 * thread registered with its definition before its first snapshot, agents switched through hello and
 * through the per-call header, and records that validate against the wire schema.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assign, createActor, setup } from 'xstate';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import demoTeam from '../src/bin/demo/team.js';
import { InspectionPublisher, InspectionSwitch, inspectable } from '../src/inspection/inspection.js';
import { applyContext, InspectionRecordSchema, type InspectionRecord } from '../src/protocol/inspection.js';
import { encodeJson } from '../src/protocol/codec.js';
import { MemoryBus, MemoryTransport } from '../src/transport/memory.js';
import { subjects } from '../src/transport/subjects.js';
import { controlInspection, stateLabel } from '../src/studio/stream.js';
import { waitUntil } from './helpers/wait.js';
import { OpenAIScriptedServer } from './helpers/model-servers.js';
import { AgentConfigSchema } from '../src/config/agent.js';
import { createLlmAgent } from '../src/llm/agent.js';

let mesh: Awaited<ReturnType<typeof startEmbedded>>;
let operator: MemoryTransport;
const records: InspectionRecord[] = [];
const invalid: string[] = [];

beforeAll(async () => {
  mesh = await startEmbedded(demoTeam, silentLogger());
  operator = new MemoryTransport({ bus: mesh.bus });
  operator.subscribe(subjects.inspectAll('demo'), (msg) => {
    const parsed = InspectionRecordSchema.safeParse(JSON.parse(new TextDecoder().decode(msg.data)));
    if (parsed.success) records.push(parsed.data);
    else invalid.push(parsed.error.message);
  });
});
afterAll(async () => {
  await operator.close();
  await mesh.stop();
});

const ofThread = (threadId: string) => records.filter((r) => r.threadId === threadId || r.rootId === threadId);

describe('inspection stream', () => {
  it('is off by default: a whole conversation publishes nothing', async () => {
    const turn = await mesh.client.send('Write about otters');
    expect(turn.final.status.state).toBe('input-required');
    await operator.flush();
    expect(records).toEqual([]);
    const states = await controlInspection(operator, 'demo', {});
    expect(states).toEqual([{ kind: 'inspection', node: mesh.node.nodeId, all: false, threads: [] }]);
  });

  it('switched on by ctl: every actor of the thread is defined before its first snapshot, and snapshots are the state AFTER the event', async () => {
    const states = await controlInspection(operator, 'demo', { on: true });
    expect(states[0]).toMatchObject({ all: true });
    const turn = await mesh.client.send('Write about kelp');
    await waitUntil(
      () => ofThread(turn.threadId).some((r) => r.actorId === turn.threadId && r.kind === 'snapshot' && r.value === 'input-required'),
      'the thread to reach input-required',
    );
    const mine = ofThread(turn.threadId);
    expect(invalid).toEqual([]);
    // Definitions first, for every actor.
    const registered = new Set<string>();
    for (const r of mine) {
      if (r.kind === 'actor') registered.add(r.actorId);
      else expect(registered.has(r.actorId), `${r.actorId} snapshot before its definition`).toBe(true);
    }
    const actorIds = [...registered];
    expect(actorIds).toEqual(expect.arrayContaining([turn.threadId, `${turn.threadId}/agentCall`]));
    // The demo team routes without a policy: its decisions are the thread's own steps, not router actors.
    expect(actorIds).not.toContain(`${turn.threadId}/router`);
    const thread = mine.find((r) => r.kind === 'actor' && r.actorId === turn.threadId);
    expect(thread).toMatchObject({ machineId: 'thread', definition: expect.objectContaining({ id: 'thread' }) });
    const call = mine.find((r) => r.kind === 'actor' && r.actorId === `${turn.threadId}/agentCall`);
    expect(call).toMatchObject({ machineId: 'agentCall', parentId: turn.threadId, rootId: turn.threadId });
    // The thread's transitions, in order: the last one goes from working.* to input-required.
    const threadSteps = mine
      .filter((r) => r.kind === 'snapshot' && r.actorId === turn.threadId)
      .map((r) => r.kind === 'snapshot' && `${stateLabel(r.from)} → ${stateLabel(r.value)} (${r.event.type})`);
    const last = threadSteps.at(-1)!;
    expect(last).toMatch(/^working\.\w+ → input-required \(/);
    expect(threadSteps.some((s) => s && s.startsWith('submitted → working.calling (troupe.user.message)'))).toBe(true);
    // Agents were told through hello: their actors go busy and idle again for this turn's calls.
    const agentSteps = records.filter((r) => r.machineId === 'agent' && r.kind === 'snapshot').map((r) => stateLabel(r.value));
    expect(agentSteps).toEqual(expect.arrayContaining(['ready.busy', 'ready.idle']));
    const agentActor = records.find((r) => r.kind === 'actor' && r.machineId === 'agent');
    expect(agentActor?.kind === 'actor' && agentActor.meta).toMatchObject({ card: expect.objectContaining({ id: expect.any(String) }) });
    // Contexts are redacted and bounded.
    const ctx = mine.filter((r) => r.actorId === turn.threadId && r.context !== undefined).at(-1)?.context as { threadId: string; history: unknown[] };
    expect(ctx.threadId).toBe(turn.threadId);
    // Snapshots carry context changes; folded in order they give the thread's context now.
    let folded: unknown;
    for (const r of mine.filter((x) => x.actorId === turn.threadId)) folded = applyContext(folded, r);
    const live = mesh.node.threads.inspect(turn.threadId)!.context as { turns: number; history: Array<{ messageId: string }> };
    const now = folded as { turns: number; history: Array<{ messageId: string }> };
    expect(now.turns).toBe(live.turns);
    expect(now.history.map((m) => m.messageId)).toEqual(live.history.map((m) => m.messageId));
    // Most snapshots carry only what changed, not the whole context again.
    expect(mine.filter((r) => r.kind === 'snapshot' && r.context !== undefined)).toEqual([]);
  });

  it('switching on again announces every live actor (a consumer that joins late learns the definitions)', async () => {
    const turn = await mesh.client.send('Is the sea cold?');
    records.length = 0;
    await controlInspection(operator, 'demo', { on: true });
    await operator.flush();
    const announced = records.filter((r) => r.kind === 'actor').map((r) => r.actorId);
    expect(announced).toContain(turn.threadId);
    expect(records.filter((r) => r.kind === 'actor' && r.machineId === 'agent').length).toBe(3);
  });

  it('off again stops the stream; on for one thread publishes only that thread, with the agents it calls', async () => {
    await controlInspection(operator, 'demo', { on: false });
    const quiet = await mesh.client.send('Write about reefs');
    records.length = 0;
    const other = await mesh.client.send('Write about whales');
    await operator.flush();
    expect(records).toEqual([]);
    const states = await controlInspection(operator, 'demo', { on: true, threadId: quiet.threadId });
    expect(states[0]).toMatchObject({ all: false, threads: [quiet.threadId] });
    records.length = 0;
    await mesh.client.send('And sharks', { threadId: other.threadId });
    await mesh.client.send('And dolphins', { threadId: quiet.threadId });
    await waitUntil(() => records.some((r) => r.actorId === quiet.threadId && r.value === 'input-required'), 'the inspected thread to answer');
    expect(records.filter((r) => r.threadId === other.threadId || r.rootId === other.threadId)).toEqual([]);
    // The agents it called published their actor while the call ran (header Troupe-Inspect).
    expect(records.some((r) => r.machineId === 'agent' && r.kind === 'snapshot' && stateLabel(r.value) === 'ready.busy')).toBe(true);
    await controlInspection(operator, 'demo', { on: false, threadId: quiet.threadId });
  });

  it('refuses a bad control request with a typed error', async () => {
    const reply = await operator.request(subjects.ctl('demo', 'inspection'), encodeJson({ on: 'yes', threadId: 'a b' }), { timeoutMs: 1000 });
    expect(JSON.parse(new TextDecoder().decode(reply.data))).toMatchObject({ kind: 'error', error: { code: 'INVALID_MESSAGE' } });
  });
});

describe('InspectionPublisher', () => {
  const kid = setup({}).createMachine({ id: 'kid', initial: 'a', states: { a: { on: { next: 'b' } }, b: { type: 'final' } } });
  const parent = setup({ actors: { kid } }).createMachine({
    id: 'parent',
    initial: 'idle',
    states: {
      idle: { on: { go: 'running' } },
      running: {
        invoke: { id: 'kid', src: 'kid', onDone: 'done' },
        on: {
          poke: { actions: ({ self }) => (self.getSnapshot().children as Record<string, { send(e: { type: string }): void }>).kid?.send({ type: 'next' }) },
        },
      },
      done: {},
    },
  });

  it('publishes nothing when off and follows a tree when on, with parents and before/after states', async () => {
    const bus = new MemoryBus();
    const out: InspectionRecord[] = [];
    const t = new MemoryTransport({ bus });
    t.subscribe('x.>', (m) => {
      out.push(InspectionRecordSchema.parse(JSON.parse(new TextDecoder().decode(m.data))));
    });
    const sw = new InspectionSwitch(false);
    const publisher = new InspectionPublisher({ transport: new MemoryTransport({ bus }), process: 'p1', switch: sw });
    const actor = createActor(parent, { id: 'root', inspect: publisher.observe({ subject: 'x.root', rootId: 'R' }) }).start();
    actor.send({ type: 'go' });
    await t.flush();
    expect(out).toEqual([]);
    expect(publisher.liveRoots).toBe(1);
    sw.set(true);
    expect(publisher.announce()).toBe(1);
    actor.send({ type: 'poke' });
    await waitUntil(() => out.length >= 5, 'five records');
    const summary = out.map((r) =>
      r.kind === 'actor' ? `+${r.actorId}<${r.parentId ?? ''}>` : `${r.actorId}: ${stateLabel(r.from)}→${stateLabel(r.value)} (${r.event.type})`,
    );
    expect(summary).toEqual(['+R<>', '+R/kid<R>', 'R/kid: a→b (next)', 'R: running→running (poke)', 'R: running→done (xstate.done.actor.kid)']);
    expect(out.map((r) => r.seq)).toEqual([...out.map((r) => r.seq)].sort((a, b) => a - b));
    actor.stop();
    expect(publisher.liveRoots).toBe(0);
  });

  it('redacts and cuts contexts in records, and sends only the parts that changed', async () => {
    const bus = new MemoryBus();
    const out: InspectionRecord[] = [];
    const t = new MemoryTransport({ bus });
    t.subscribe('y.>', (m) => {
      out.push(InspectionRecordSchema.parse(JSON.parse(new TextDecoder().decode(m.data))));
    });
    const secretive = setup({ types: { context: {} as { apiKey: string; profile: { note: string; auth: { token: string } }; log: string[] } } }).createMachine({
      id: 'secretive',
      context: {
        apiKey: 'plain-looking',
        profile: { note: 'mail me at a@b.com', auth: { token: 'zzz' } },
        log: Array.from({ length: 30 }, (_, i) => `line ${i}`),
      },
      initial: 'a',
      states: { a: { on: { add: { actions: assign({ log: ({ context }) => [...context.log, 'more'] }) } } } },
    });
    const publisher = new InspectionPublisher({ transport: new MemoryTransport({ bus }), process: 'p2', switch: new InspectionSwitch(true) });
    const actor = createActor(secretive, { inspect: publisher.observe({ subject: 'y.root', rootId: 'S' }) }).start();
    actor.send({ type: 'add' });
    await waitUntil(() => out.length >= 3, 'three records');
    const ctx = out[0]!.context as { apiKey: string; profile: { note: string; auth: unknown }; log: string[] };
    expect(ctx.apiKey).toBe('[redacted]');
    expect(ctx.profile.note).toBe('mail me at [redacted]');
    expect(ctx.profile.auth).toBe('[redacted]'); // a secret-looking key hides its whole value
    expect(ctx.log).toHaveLength(21);
    expect(ctx.log[0]).toBe('… 10 earlier');
    const added = out[2]!;
    expect(added.kind === 'snapshot' && Object.keys(added.contextChanged ?? {})).toEqual(['log']);
    actor.stop();
  });

  it('inspectable() redacts secrets and bounds size', () => {
    const long = 'x'.repeat(5000);
    const value = inspectable({
      apiKey: 'sk-abcdefghijklmnop',
      note: 'mail me at a@b.com',
      items: Array.from({ length: 30 }, (_, i) => i),
      long,
      fn: () => 1,
    }) as Record<string, unknown>;
    expect(value.apiKey).toBe('[redacted]');
    expect(value.note).toBe('mail me at [redacted]');
    expect((value.items as unknown[]).length).toBe(21);
    expect((value.long as string).length).toBeLessThan(2100);
    expect('fn' in value).toBe(false);
  });
});

describe('an LLM agent loop on the stream', () => {
  const model = new OpenAIScriptedServer();
  let llmMesh: Awaited<ReturnType<typeof startEmbedded>>;
  let op: MemoryTransport;
  const seen: InspectionRecord[] = [];

  beforeAll(async () => {
    await model.start();
    model.respondWith(() => ({ chunks: ['otters ', 'float'] }));
    const agent = await createLlmAgent(
      {
        config: AgentConfigSchema.parse({
          name: 'solo',
          model: { provider: 'openai', name: 'm', base_url: model.baseURL },
          instructions: { inline: 'Answer.' },
        }),
        file: 'inline',
        dir: process.cwd(),
      },
      { env: {} },
    );
    llmMesh = await startEmbedded({ name: 'solo', agents: [agent], config: { entryAgent: 'solo' } }, silentLogger());
    op = new MemoryTransport({ bus: llmMesh.bus });
    op.subscribe(subjects.inspectAll('demo'), (msg) => {
      seen.push(InspectionRecordSchema.parse(JSON.parse(new TextDecoder().decode(msg.data))));
    });
  });
  afterAll(async () => {
    await op?.close();
    await llmMesh?.stop();
    await model.stop();
  });

  it('a thread inspected on its own brings the model loop the agent runs for it, under the thread', async () => {
    await controlInspection(op, 'demo', { on: true, threadId: 'llm-thread' });
    const turn = await llmMesh.client.send('Do otters float?', { threadId: 'llm-thread' });
    expect(turn.text).toBe('otters float');
    await waitUntil(
      () => seen.some((r) => r.machineId === 'llmAgent' && r.status === 'done'),
      `the loop to finish on the stream; seen ${[...new Set(seen.map((r) => `${r.machineId}:${r.actorId}:${r.status}`))].join(' ')}`,
    );
    const loop = seen.filter((r) => r.machineId === 'llmAgent');
    expect(loop[0]).toMatchObject({ kind: 'actor', threadId: 'llm-thread', parentId: 'llm-thread' });
    expect(loop.at(-1)).toMatchObject({ kind: 'snapshot', status: 'done' });
    expect(seen.filter((r) => r.threadId === 'llm-thread').map((r) => r.machineId)).toEqual(expect.arrayContaining(['thread', 'agentCall', 'llmAgent']));
    // The agent's own actor went busy for the call (the call carried Troupe-Inspect).
    expect(seen.some((r) => r.machineId === 'agent' && r.kind === 'snapshot' && stateLabel(r.value) === 'ready.busy')).toBe(true);
  });
});
