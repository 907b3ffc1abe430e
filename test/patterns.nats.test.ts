/**
 * Handoff and orchestration patterns over a real nats-server. The scenarios of handoff.embedded.test.ts
 * (and the Q&A team's fan-out) with every actor on its own NatsTransport connection: the node, each
 * AgentHost and the client, so every request, reply, streamed chunk and control message crosses the server.
 *
 * One nats-server for the file; each describe block runs its own mesh (one node at a time: nodes share
 * the `troupe-threads` queue group) because the thread config and router policy are per node.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineAgent, reply, type AgentDefinition, type AgentHandler } from '../src/sdk/agent.js';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeClient, textOfMessage, userMessage, type SendResult } from '../src/sdk/client.js';
import { TroupeNode } from '../src/actors/node.js';
import { handoffDeadlineOf } from '../src/actors/threads/record.js';
import type { TeamDefinition } from '../src/team/team.js';
import { handoffTeam } from '../src/bin/demo/handoff-team.js';
import qaTeam, { billing, travel, weather } from '../src/bin/demo/qa-team.js';
import { ScoringPolicy } from '../src/routing/scoring.js';
import { DEFAULT_THREAD_CONFIG, type ThreadConfig } from '../src/machines/thread.js';
import { ThreadEventSchema, decode, type TaskStatusUpdateEvent, type ThreadEvent } from '../src/protocol/index.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import type { Subscription } from '../src/transport/types.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';

/**
 * A tenant the account does not map: it maps `troupe.demo.in.*.*` (and acme's) into the durable
 * TROUPE_IN stream, which only a node started with `durable` consumes. These scenarios are about what
 * happens once a message is in a thread, so they use the plain queue-group ingress; everything else
 * (agent requests, replies, streamed chunks, `.out`, control plane) is the same subjects as any tenant.
 * The anonymous connections act as the DEMO account's `node` user, which may use any subject.
 */
const TENANT = 'patterns';
/** Per turn: far above what any turn here takes, far below the file's budget. */
const TURN_MS = 5_000;
/** Scatter-gather window of `ps` / `inspect` (every node and agent host answers within it). */
const CTL_WINDOW_MS = 300;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const newThreadId = (prefix: string) => `${prefix}-${randomUUID().slice(0, 8)}`;

let nats: NatsServerHandle;

beforeAll(async () => {
  nats = await startNatsServer();
});

afterAll(async () => {
  await nats?.stop();
});

// ---------------------------------------------------------------------------------------------------
// A mesh: node, agents and client, each on its own connection

interface Mesh {
  node: TroupeNode;
  client: TroupeClient;
  stop(): Promise<void>;
}

async function startMesh(team: TeamDefinition, config: Partial<ThreadConfig> = {}): Promise<Mesh> {
  const transports: NatsTransport[] = [];
  const connect = async (name: string) => {
    const t = await NatsTransport.connect({ ...nats.asNode, name });
    transports.push(t);
    return t;
  };
  const hosts: AgentHost[] = [];
  let node: TroupeNode | undefined;
  const stop = async () => {
    await Promise.all(hosts.map((h) => h.stop().catch(() => undefined)));
    await node?.stop().catch(() => undefined);
    await Promise.all(transports.map((t) => t.drain().catch(() => t.close())));
  };
  try {
    const [nodeT, clientT, ...agentTs] = await Promise.all([
      connect('patterns-node'),
      connect('patterns-client'),
      ...team.agents.map((a) => connect(`patterns-agent-${a.card.id}`)),
    ]);
    node = await new TroupeNode({
      transport: nodeT!,
      tenant: TENANT,
      config: { ...team.config, ...config },
      ...(team.policy ? { policy: team.policy } : {}),
      idleMs: 0,
    }).start();
    for (const [i, agent] of team.agents.entries()) {
      hosts.push(await new AgentHost({ transport: agentTs[i]!, agent, tenant: TENANT }).start());
    }
    await node.registry.waitFor(team.agents.map((a) => a.card.id));
    return { node, client: new TroupeClient(clientT!, TENANT), stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Wraps an agent so the test can count how often it was called. */
function counted(agent: AgentDefinition, calls: Record<string, number>): AgentDefinition {
  const id = agent.card.id;
  calls[id] = 0;
  const handle: AgentHandler = (message, ctx) => {
    calls[id] = (calls[id] ?? 0) + 1;
    return agent.handle(message, ctx);
  };
  return { card: agent.card, handle };
}

// ---------------------------------------------------------------------------------------------------
// What the user sees on a thread's `.out`

const isFinal = (e: ThreadEvent): e is TaskStatusUpdateEvent => e.kind === 'status-update' && e.final;
const finalText = (e: ThreadEvent): string | undefined => (isFinal(e) ? textOfMessage(e.status.message) : undefined);

/** Every event on a thread's output from the moment it is opened; waits are event-driven with a deadline. */
class ThreadWatch {
  readonly events: ThreadEvent[] = [];
  private readonly waiters = new Set<() => void>();
  private sub?: Subscription;

  private constructor(readonly threadId: string) {}

  static async open(client: TroupeClient, threadId: string): Promise<ThreadWatch> {
    const w = new ThreadWatch(threadId);
    w.sub = client.transport.subscribe(subjects.threadOut(TENANT, 'local', threadId), (msg) => {
      w.events.push(decode(ThreadEventSchema, msg.data, 'thread event'));
      for (const wake of [...w.waiters]) wake();
    });
    await client.transport.flush();
    return w;
  }

  finalTexts(): string[] {
    return this.events.flatMap((e) => {
      const t = finalText(e);
      return t === undefined ? [] : [t];
    });
  }

  /** The first event (seen or to come) that `match` accepts. */
  waitFor(match: (e: ThreadEvent) => boolean, what: string, timeoutMs = TURN_MS): Promise<ThreadEvent> {
    const found = this.events.find(match);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const wake = () => {
        const e = this.events.find(match);
        if (!e) return;
        this.waiters.delete(wake);
        clearTimeout(timer);
        resolve(e);
      };
      const timer = setTimeout(() => {
        this.waiters.delete(wake);
        reject(new Error(`thread ${this.threadId}: no ${what} within ${timeoutMs} ms; finals so far: ${JSON.stringify(this.finalTexts())}`));
      }, timeoutMs);
      this.waiters.add(wake);
    });
  }

  /** The first final answer whose text contains `fragment`. */
  async final(fragment: string, timeoutMs = TURN_MS): Promise<TaskStatusUpdateEvent> {
    return (await this.waitFor((e) => finalText(e)?.includes(fragment) ?? false, `final answer containing "${fragment}"`, timeoutMs)) as TaskStatusUpdateEvent;
  }

  close(): void {
    this.sub?.unsubscribe();
  }
}

/** The chunks `agent` streamed during a turn; all of them arrived before the turn's final answer. */
function chunksBeforeFinal(r: SendResult, agent: string): string[] {
  const finalIdx = r.events.indexOf(r.final);
  expect(finalIdx).toBeGreaterThan(-1);
  const chunks = r.events.flatMap((e, i) => (e.kind === 'artifact-update' && e.artifact.metadata?.['troupe/agent'] === agent ? [{ i, e }] : []));
  for (const { i } of chunks) expect(i).toBeLessThan(finalIdx);
  return chunks.map(({ e }) => textOfMessage({ kind: 'message', role: 'agent', messageId: 'chunk', parts: e.artifact.parts }));
}

const routeTo = (r: SendResult) => r.route.map((s) => s.to);
const metadataOf = (r: SendResult) => r.final.status.message?.metadata ?? {};

// ---------------------------------------------------------------------------------------------------
// Handoffs

describe('handoffs over NATS (handoff team)', () => {
  let mesh: Mesh;
  beforeAll(async () => {
    mesh = await startMesh(handoffTeam);
  });
  afterAll(async () => {
    await mesh?.stop();
  });

  it('skill creation: main hands off, three turns go straight to the specialist with streamed chunks, it returns and main answers in the same turn', async () => {
    const { client } = mesh;
    const threadId = newThreadId('skill');
    const watch = await ThreadWatch.open(client, threadId);
    try {
      const first = await client.send('I want to create a skill', { threadId, timeoutMs: TURN_MS });
      expect(first.error).toBeUndefined();
      expect(first.text).toContain('Skill builder step 1');
      expect(first.text).toContain('summary: The user said: I want to create a skill');
      expect(first.route.map((s) => `${s.from}>${s.to}`)).toEqual(['user>main', 'main>skills']);
      expect(chunksBeforeFinal(first, 'skills')).toEqual(['Skill ', 'builder ', 'step 1']);

      // `troupe ps` / `troupe inspect` while the handoff is active, through the control plane.
      const ps = await client.ps(CTL_WINDOW_MS);
      const handoff = ps.flatMap((r) => r.actors).find((a) => a.id === `${threadId}/handoff`);
      expect(handoff).toMatchObject({ kind: 'handoff', state: 'active', parent: threadId, node: mesh.node.nodeId });
      const inspected = await client.inspect(`${threadId}/handoff`, CTL_WINDOW_MS);
      expect(inspected).toMatchObject({ found: true, node: mesh.node.nodeId, value: 'active', actor: { id: `${threadId}/handoff`, state: 'active' } });
      expect(inspected?.context).toMatchObject({ request: { sourceAgentId: 'main', targetAgentId: 'skills', threadId } });

      for (const n of [2, 3, 4]) {
        const r = await client.send(`step ${n} details`, { threadId, timeoutMs: TURN_MS });
        expect(r.error).toBeUndefined();
        expect(r.text).toContain(`Skill builder step ${n}: step ${n} details`);
        expect(routeTo(r)).toEqual(['skills']); // straight to the specialist, main is not asked
        expect(chunksBeforeFinal(r, 'skills')).toEqual(['Skill ', 'builder ', `step ${n}`]);
      }

      // Control returns within the turn: the specialist's last answer, then main's with the result summary.
      const done = await client.send("I'm done", { threadId, timeoutMs: TURN_MS });
      expect(chunksBeforeFinal(done, 'skills')).toEqual(['Saving… ']);
      const targetAnswer = done.events.find((e) => e.kind === 'status-update' && !e.final && e.status.message?.metadata?.['troupe/agent'] === 'skills');
      expect(targetAnswer && textOfMessage(targetAnswer.kind === 'status-update' ? targetAnswer.status.message : undefined)).toBe('Skill saved.');
      expect(done.events.indexOf(targetAnswer!)).toBeLessThan(done.events.indexOf(done.final));
      expect(done.text).toContain('welcome back (completed)');
      expect(done.text).toContain('created a skill in 4 steps');
      expect(done.final.status.message?.metadata?.['troupe/agent']).toBe('main');
      expect(done.route.map((s) => `${s.from}>${s.to}`)).toEqual(['user>skills', 'skills>main']);

      const after = await client.send('thanks', { threadId, timeoutMs: TURN_MS });
      expect(after.text).toBe('main: thanks');
      expect(routeTo(after)).toEqual(['main']);
    } finally {
      watch.close();
    }
  });

  // A handoff that ended is stopped: it no longer shows as a live actor nor stays in the snapshot.
  it('after the handoff has ended, ps no longer lists <threadId>/handoff', async () => {
    const { client } = mesh;
    const threadId = newThreadId('ended');
    const watch = await ThreadWatch.open(client, threadId);
    try {
      await client.send('one more skill', { threadId, timeoutMs: TURN_MS });
      expect((await client.send("I'm done", { threadId, timeoutMs: TURN_MS })).text).toContain('welcome back (completed)');
      const ps = await client.ps(CTL_WINDOW_MS);
      const stale = ps.flatMap((r) => r.actors).find((a) => a.id === `${threadId}/handoff`);
      expect(stale, `a handoff that ended is still listed as a live actor: ${JSON.stringify(stale)}`).toBeUndefined();
    } finally {
      watch.close();
    }
  });

  it('cancel during an active handoff gives control back to main', async () => {
    const { client } = mesh;
    const threadId = newThreadId('cancel');
    const watch = await ThreadWatch.open(client, threadId);
    try {
      const first = await client.send('build a skill', { threadId, timeoutMs: TURN_MS });
      expect(first.text).toContain('Skill builder step 1');

      const state = await client.cancel(threadId, 'changed my mind');
      expect(state).not.toBe('canceled'); // the handoff is cancelled, not the thread
      const resumed = await watch.final('welcome back (cancelled)');
      expect(textOfMessage(resumed.status.message)).toContain('changed my mind');
      expect(resumed.status.message?.metadata?.['troupe/agent']).toBe('main');
      // The user was told before main answered.
      const notice = watch.events.findIndex(
        (e) => e.kind === 'status-update' && !e.final && textOfMessage(e.status.message).includes('Handoff to skills cancelled; back to main'),
      );
      expect(notice).toBeGreaterThan(-1);
      expect(notice).toBeLessThan(watch.events.indexOf(resumed));

      const next = await client.send('hello again', { threadId, timeoutMs: TURN_MS });
      expect(next.text).toBe('main: hello again');
      expect(routeTo(next)).toEqual(['main']);
    } finally {
      watch.close();
    }
  });

  it('a specialist that crashes: AGENT_ERROR to the user, then main answers in the same turn', async () => {
    const { client } = mesh;
    const threadId = newThreadId('crash');
    const watch = await ThreadWatch.open(client, threadId);
    try {
      const first = await client.send('please crash', { threadId, timeoutMs: TURN_MS });
      expect(first.text).toBe('crashy: I am on it');
      expect(first.route.map((s) => `${s.from}>${s.to}`)).toEqual(['user>main', 'main>crashy']);

      const failed = await client.send('go on', { threadId, timeoutMs: TURN_MS });
      const failure = failed.events.find((e) => e.kind === 'status-update' && !e.final && e.metadata?.['troupe/error']);
      expect(failure?.metadata?.['troupe/error']).toMatchObject({ code: 'AGENT_ERROR' });
      expect(failed.text).toContain('welcome back (failed)');
      expect(failed.text).toContain('AGENT_ERROR');
      expect(failed.text).toContain('crashy fell over');
      expect(routeTo(failed)).toEqual(['crashy', 'main']);

      const next = await client.send('are you there?', { threadId, timeoutMs: TURN_MS });
      expect(next.text).toBe('main: are you there?');
    } finally {
      watch.close();
    }
  });
});

describe('handoff deadline over NATS (handoffMaxDurationMs: 500)', () => {
  let mesh: Mesh;
  beforeAll(async () => {
    mesh = await startMesh(handoffTeam, { handoffMaxDurationMs: 500 });
  });
  afterAll(async () => {
    await mesh?.stop();
  });

  it('a specialist that never returns: the handoff times out with AGENT_TIMEOUT and control goes back to main', async () => {
    const { client } = mesh;
    const threadId = newThreadId('slow');
    const watch = await ThreadWatch.open(client, threadId);
    try {
      const first = await client.send('slow please', { threadId, timeoutMs: TURN_MS });
      expect(first.text).toBe('sloth: accepted, thinking…');
      expect(first.route.map((s) => `${s.from}>${s.to}`)).toEqual(['user>main', 'main>sloth']);
      const stored = await mesh.node.threads.store.get(TENANT, threadId);
      const deadline = stored ? handoffDeadlineOf(stored.record) : undefined;
      expect(deadline).toEqual(expect.any(Number));

      const resumed = await watch.final('welcome back (failed)', 3_000);
      // Resumed by the deadline: stamped no earlier than the one the handoff stored.
      expect(Date.parse(resumed.status.timestamp ?? '')).toBeGreaterThanOrEqual(deadline!);
      const text = textOfMessage(resumed.status.message);
      expect(text).toContain('AGENT_TIMEOUT');
      expect(text).toContain('did not finish within 500 ms');

      const next = await client.send('hi', { threadId, timeoutMs: TURN_MS });
      expect(next.text).toBe('main: hi');
      expect(routeTo(next)).toEqual(['main']);
    } finally {
      watch.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------------
// Orchestration

describe('Q&A orchestration over NATS (scoring policy, parallel fan-out)', () => {
  const calls: Record<string, number> = {};
  const policy = new ScoringPolicy();
  const team: TeamDefinition = { ...qaTeam, policy, agents: [weather, travel, billing].map((a) => counted(a, calls)) };
  const cards = team.agents.map((a) => a.card);
  let mesh: Mesh;
  beforeAll(async () => {
    mesh = await startMesh(team);
  });
  afterAll(async () => {
    await mesh?.stop();
  });

  it('weather + billing, billing fails: one answer with the weather part and the partial failure', async () => {
    const text = 'What is the weather in Paris tomorrow, and why was I charged twice on my invoice?';
    const decision = await policy.decide({ message: userMessage(text), agents: cards });
    expect([decision.agentId, ...(decision.additionalAgents ?? [])].sort()).toEqual(['billing', 'weather']);

    const r = await mesh.client.send(text, { threadId: newThreadId('qa'), timeoutMs: TURN_MS });
    expect(r.error).toBeUndefined();
    expect(r.final.status.state).toBe('input-required');
    expect(r.text).toContain('Forecast: 21°C and sunny');
    expect(r.text).toContain('However');
    expect([...routeTo(r)].sort()).toEqual(['billing', 'weather']);
    const meta = metadataOf(r);
    expect(meta.agentsUsed).toEqual(['weather']);
    expect(typeof meta.executionTimeMs).toBe('number');
    expect(meta.executionTimeMs as number).toBeGreaterThan(0);
    expect(meta.taskState).toBe('completed');
    expect(meta.strategy).toBe('parallel');
    expect(meta.failures).toEqual([expect.objectContaining({ agentId: 'billing', code: 'AGENT_ERROR' })]);
    expect(calls).toEqual({ weather: 1, travel: 0, billing: 1 });
  });

  it('low confidence: the user is asked to clarify and no agent is called', async () => {
    const text = 'Can you help me with my thing?';
    const decision = await policy.decide({ message: userMessage(text), agents: cards });
    expect(decision.confidence).toBeLessThan(0.7);

    const before = { ...calls };
    const r = await mesh.client.send(text, { threadId: newThreadId('vague'), timeoutMs: TURN_MS });
    expect(r.final.status.state).toBe('input-required');
    expect(r.text).toBe(DEFAULT_THREAD_CONFIG.clarifyText);
    const clarify = metadataOf(r)['troupe/clarify'] as { confidence?: number; reason?: string } | undefined;
    expect(clarify).toBeDefined();
    expect(typeof clarify?.confidence).toBe('number');
    expect(clarify!.confidence!).toBeLessThan(0.7);
    expect(clarify?.reason).toContain('under the threshold');
    expect(calls).toEqual(before);
  });
});

describe('first_success orchestration over NATS', () => {
  const calls: Record<string, number> = { fast: 0, slow: 0 };
  const FAST_MS = 20;
  // The slow agent answers only when the test lets it: the fast answer must come while it is still working.
  let releaseSlow!: () => void;
  const slowGate = new Promise<void>((r) => (releaseSlow = r));
  let slowAnswered = false;
  const fast = defineAgent({
    card: {
      id: 'fast',
      name: 'Quick translator',
      description: 'Translates words and short phrases between languages',
      skills: [
        {
          id: 'translate',
          name: 'Translation',
          description: 'Translates a word or phrase',
          tags: ['translate', 'translation', 'language'],
          examples: ['Translate bonjour into English'],
        },
      ],
    },
    handle: async (_m, ctx) => {
      calls.fast = (calls.fast ?? 0) + 1;
      await sleep(FAST_MS);
      return reply(`fast: "${ctx.text}" -> hello`, { to: 'user' });
    },
  });
  const slow = defineAgent({
    card: {
      id: 'slow',
      name: 'Dictionary',
      description: 'Looks up the meaning of words in a large dictionary',
      skills: [
        {
          id: 'define',
          name: 'Definitions',
          description: 'Gives the definition and meaning of a word',
          tags: ['define', 'definition', 'meaning', 'dictionary'],
          examples: ['Define serendipity'],
        },
      ],
    },
    handle: async (_m, ctx) => {
      calls.slow = (calls.slow ?? 0) + 1;
      await slowGate;
      slowAnswered = true;
      return reply(`slow: "${ctx.text}" means hello`, { to: 'user' });
    },
  });
  const policy = new ScoringPolicy();
  const team: TeamDefinition = {
    name: 'first-success',
    agents: [fast, slow],
    policy,
    config: { entryAgent: 'fast', usePolicy: true, agentTimeoutMs: 5_000, retries: 0, orchestration: { strategy: 'first_success', maxParallelAgents: 3 } },
  };
  let mesh: Mesh;
  beforeAll(async () => {
    mesh = await startMesh(team);
  });
  afterAll(async () => {
    releaseSlow();
    await mesh?.stop();
  });

  it('both agents match: the fast answer wins while the slow one is still working, and the slow call is cancelled', async () => {
    const text = 'What does bonjour mean: translate it and define it';
    const decision = await policy.decide({ message: userMessage(text), agents: [fast.card, slow.card] });
    expect(decision.additionalAgents?.length).toBeGreaterThan(0);
    expect([decision.agentId, ...(decision.additionalAgents ?? [])].sort()).toEqual(['fast', 'slow']);

    const r = await mesh.client.send(text, { threadId: newThreadId('first'), timeoutMs: TURN_MS });
    expect(slowAnswered).toBe(false);
    expect(r.error).toBeUndefined();
    expect(r.text).toContain('fast: ');
    expect(r.text).not.toContain('slow: ');
    const meta = metadataOf(r);
    expect(meta.strategy).toBe('first_success');
    expect(meta.agentsUsed).toEqual(['fast']);
    expect(meta.cancelled).toEqual(['slow']);
    expect(meta.taskState).toBe('completed');
    expect(meta.failures).toEqual([]);
    // Both were really asked: the slow one was called and is still working on it.
    expect(calls).toEqual({ fast: 1, slow: 1 });
  });
});
