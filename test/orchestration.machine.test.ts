import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  createActor,
  fromPromise,
  getInitialMicrosteps,
  getMicrosteps,
  toPromise,
  type AnyMachineSnapshot,
  type AnyStateMachine,
  type AnyTransitionDefinition,
  type EventObject,
} from 'xstate';
import { getAdjacencyMap, getShortestPaths, type StatePath } from 'xstate/graph';
import { definedStates, definedTransitions, missing, transitionKey } from './helpers/machine-coverage.js';
import type { Message } from '../src/protocol/a2a.js';
import { TroupeError } from '../src/protocol/errors.js';
import type { RouterDecision } from '../src/protocol/routing.js';
import {
  aggregate,
  callActorId,
  describeFailures,
  orchestrationAgents,
  orchestrationMachine,
  toCallFailure,
  type CallAgentInput,
  type OrchestrationEvent,
  type OrchestrationInput,
  type OrchestrationOutput,
  type OrchestrationSnapshot,
  type OrchestrationStrategy,
} from '../src/machines/orchestration.js';

const T0 = 1_000_000;

function userMsg(text: string, id = 'q-1'): Message {
  return { kind: 'message', role: 'user', messageId: id, contextId: 'ctx-1', taskId: 'task-1', parts: [{ kind: 'text', text }] };
}
function reply(id: string, text = id): Message {
  return { kind: 'message', role: 'agent', messageId: id, parts: [{ kind: 'text', text }] };
}
function decision(agentId: string, ...additionalAgents: string[]): RouterDecision {
  return { agentId, confidence: 0.9, reasoning: 'test', additionalAgents };
}

/** A controllable fake agent mesh: each attempt is a promise the test settles; signals are kept. */
function fakeMesh() {
  const calls: Array<{ agentId: string; attempt: number; message: Message; signal: AbortSignal; at: number }> = [];
  const pending = new Map<string, { resolve: (v: Message) => void; reject: (e: unknown) => void; signal: AbortSignal }>();
  const callAgent = fromPromise<Message, CallAgentInput>(
    ({ input, signal }) =>
      new Promise<Message>((resolve, reject) => {
        calls.push({ ...input, signal, at: Date.now() });
        pending.set(callActorId(input.agentId, input.attempt), { resolve, reject, signal });
      }),
  );
  return { calls, pending, callAgent };
}

/** A host-style agent: plain `fromPromise<Message, CallAgentInput>` with scripted behaviour per agent. */
function scripted(script: Record<string, (input: CallAgentInput, signal: AbortSignal) => Promise<Message>>) {
  const log: Array<{ agentId: string; attempt: number; signal: AbortSignal; message: Message }> = [];
  const callAgent = fromPromise<Message, CallAgentInput>(({ input, signal }) => {
    log.push({ agentId: input.agentId, attempt: input.attempt, signal, message: input.message });
    const fn = script[input.agentId];
    if (!fn) return Promise.reject(new TroupeError('AGENT_NOT_FOUND', `no agent ${input.agentId}`));
    return fn(input, signal);
  });
  return { log, callAgent };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const flush = () => new Promise<void>((r) => setImmediate(r));

afterEach(() => {
  vi.useRealTimers();
});

/* ---------------------------------------------------------------------------------------------- */
/* model-based coverage                                                                             */
/* ---------------------------------------------------------------------------------------------- */

const eventsOf = <E extends EventObject>(path: StatePath<AnyMachineSnapshot, E>): E[] =>
  path.steps.map((s) => s.event).filter((e) => e.type !== 'xstate.init');

const MODEL_AGENTS = ['alpha', 'beta'] as const;
function modelInput(strategy: OrchestrationStrategy): OrchestrationInput {
  return {
    decision: decision('alpha', 'beta', 'alpha'),
    message: userMsg('compare the plans'),
    strategy,
    retries: 1,
    // Long enough that no real timer fires during a replay: the model's timeouts and retries are
    // replayed by sending the very events the timers would raise.
    agentTimeoutMs: 600_000,
    retryDelayMs: 600_000,
    startedAt: T0,
  };
}

/** Sample events: done / error / timeout per agent and attempt, retries, a tick and a restore. */
const MODEL_EVENTS: OrchestrationEvent[] = [
  ...MODEL_AGENTS.flatMap((agentId) =>
    [1, 2].flatMap((attempt): OrchestrationEvent[] => [
      { type: `xstate.done.actor.${callActorId(agentId, attempt)}` as const, output: reply(`${agentId}-${attempt}`, `${agentId} answer ${attempt}`) },
      { type: `xstate.error.actor.${callActorId(agentId, attempt)}` as const, error: { code: 'AGENT_ERROR', message: `${agentId} broke on attempt ${attempt}` } },
      { type: 'troupe.orchestration.callTimeout', agentId, attempt },
      ...(attempt > 1 ? [{ type: 'troupe.orchestration.retry' as const, agentId, attempt }] : []),
    ]),
  ),
  { type: 'troupe.orchestration.tick', now: T0 + 1_000 },
  { type: 'troupe.orchestration.restored', now: T0 + 2_000 },
];

interface ReplayResult {
  states: Set<string>;
  transitions: Set<string>;
  final: AnyMachineSnapshot;
  mesh: ReturnType<typeof fakeMesh>;
  /** Attempts the test resolved or rejected. */
  settled: Set<string>;
  /** Attempts neither settled nor aborted when the path ended (before the actor was stopped). */
  inFlight: ReturnType<typeof fakeMesh>['calls'];
}

/** Replays a model path on a real actor whose callAgent attempts the test settles itself. */
async function replay(input: OrchestrationInput, events: OrchestrationEvent[], expected: AnyMachineSnapshot[]): Promise<ReplayResult> {
  const mesh = fakeMesh();
  const states = new Set<string>();
  const transitions = new Set<string>();
  const settled = new Set<string>();
  const actor = createActor(orchestrationMachine.provide({ actors: { callAgent: mesh.callAgent } }), {
    input,
    inspect: (ev) => {
      if ((ev.actorRef as { _parent?: unknown })._parent !== undefined) return; // root actor only
      if (ev.type === '@xstate.microstep') {
        for (const t of (ev as unknown as { _transitions: AnyTransitionDefinition[] })._transitions) {
          transitions.add(transitionKey(t));
          states.add(t.source.id); // a state a transition leaves was active (shows transient states)
        }
      }
      if (ev.type === '@xstate.microstep' || ev.type === '@xstate.snapshot') {
        for (const n of (ev.snapshot as AnyMachineSnapshot)._nodes) states.add(n.id);
      }
    },
  });
  actor.start();
  await flush();
  for (const [i, event] of events.entries()) {
    const done = /^xstate\.(done|error)\.actor\.(.+)$/.exec(event.type);
    if (done) {
      const call = mesh.pending.get(done[2]!);
      expect(call, `the model settles ${done[2]} but no such call is in flight`).toBeDefined();
      expect(call!.signal.aborted).toBe(false);
      settled.add(done[2]!);
      if (done[1] === 'done') call!.resolve((event as unknown as { output: Message }).output);
      else call!.reject((event as unknown as { error: unknown }).error);
    } else {
      actor.send(event as OrchestrationEvent);
    }
    await flush();
    const snap = actor.getSnapshot();
    expect({ value: snap.value, context: snap.context }).toEqual({ value: expected[i]!.value, context: expected[i]!.context });
  }
  const final = actor.getSnapshot();
  const inFlight = mesh.calls.filter((c) => !settled.has(callActorId(c.agentId, c.attempt)) && !c.signal.aborted);
  actor.stop();
  return { states, transitions, final, mesh, settled, inFlight };
}

describe('orchestration machine: model-based', () => {
  it('every state is reached and every transition fires on real actors; outputs are consistent', { timeout: 120_000 }, async () => {
    const machine = orchestrationMachine as unknown as AnyStateMachine;
    const states = definedStates(machine);
    const transitions = definedTransitions(machine);
    const graphStates = new Set<string>();
    const covered = { states: new Set<string>(), transitions: new Set<string>() };
    let finals = 0;

    for (const strategy of ['parallel', 'sequential', 'first_success'] as const) {
      const input = modelInput(strategy);
      // A finished actor takes no more events (the pure transition function would still apply root-level ones).
      const traversal = { input, events: MODEL_EVENTS, filterEvents: (snap: OrchestrationSnapshot) => snap.status === 'active' };
      const shortest = getShortestPaths(orchestrationMachine, traversal);
      const adjacency = getAdjacencyMap(orchestrationMachine, traversal);
      const toSource = new Map(shortest.map((p) => [JSON.stringify({ value: p.state.value, context: p.state.context }), p]));

      // One run per handled edge: the shortest path to its source, then the edge.
      const runs: Array<{ events: OrchestrationEvent[]; states: AnyMachineSnapshot[] }> = [];
      for (const p of shortest) for (const n of (p.state as AnyMachineSnapshot)._nodes) graphStates.add(n.id);
      for (const [key, vertex] of Object.entries(adjacency)) {
        const head = toSource.get(key)!;
        expect(head, `no path to ${key}`).toBeDefined();
        for (const { event, state } of Object.values(vertex.transitions) as Array<{ event: OrchestrationEvent; state: OrchestrationSnapshot }>) {
          if (machine.getTransitionData(vertex.state as never, event as never).length === 0) continue;
          for (const [micro] of getMicrosteps(machine, vertex.state as never, event as never)) {
            for (const n of (micro as AnyMachineSnapshot)._nodes) graphStates.add(n.id);
          }
          runs.push({ events: [...eventsOf(head), event], states: [...head.steps.slice(1).map((s) => s.state), state as AnyMachineSnapshot] });
        }
      }
      // The initial dispatch happens before any event: its microsteps show the transient `dispatching`.
      for (const [micro] of getInitialMicrosteps(machine, input)) for (const n of (micro as AnyMachineSnapshot)._nodes) graphStates.add(n.id);

      for (const run of runs) {
        const r = await replay(input, run.events, run.states);
        r.states.forEach((s) => covered.states.add(s));
        r.transitions.forEach((t) => covered.transitions.add(t));

        // Every attempt got the original message; no agent got more than 1 + retries attempts.
        for (const c of r.mesh.calls) expect(c.message).toBe(input.message);
        for (const a of MODEL_AGENTS) expect(r.mesh.calls.filter((c) => c.agentId === a).length).toBeLessThanOrEqual(2);
        // Attempts in flight (neither settled by the test nor aborted) are exactly the running calls:
        // timed-out and cancelled attempts were stopped (their AbortSignal fired); sequential has at most one.
        const { inFlight } = r;
        const running = (r.final.context.calls as Array<{ agentId: string; status: string; attempts: number }>).filter((c) => c.status === 'running');
        expect(inFlight.map((c) => callActorId(c.agentId, c.attempt)).sort()).toEqual(
          r.final.status === 'done' ? [] : running.map((c) => callActorId(c.agentId, c.attempts)).sort(),
        );
        if (strategy === 'sequential') expect(inFlight.length).toBeLessThanOrEqual(1);
        if (r.final.status === 'done') {
          finals += 1;
          const out = r.final.output as OrchestrationOutput;
          const used = out.metadata.agents_used;
          expect(out.message.role).toBe('agent');
          expect(out.message.messageId).toBe('q-1-orchestrated');
          expect(out.metadata.strategy).toBe(strategy);
          expect(out.metadata.task_state).toBe(used.length ? 'completed' : 'failed');
          expect(used).toEqual(MODEL_AGENTS.filter((a) => used.includes(a))); // agent order
          expect(out.metadata.execution_time_ms).toBe(r.final.context.now - T0);
          if (strategy === 'first_success') expect(used.length).toBeLessThanOrEqual(1);
          const failedIds = out.metadata.failures.map((f) => f.agentId);
          expect([...used, ...failedIds, ...out.metadata.cancelled].sort()).toEqual([...MODEL_AGENTS].sort());
          const text = out.message.parts.map((p) => (p.kind === 'text' ? p.text : '')).join('');
          for (const id of failedIds) expect(text.includes(id) || strategy === 'first_success').toBe(true);
          if (used.length === 2) expect(text).toMatch(/^\*\*alpha\*\*: alpha answer \d\n\n\*\*beta\*\*: beta answer \d/);
        }
      }
    }
    expect(finals).toBeGreaterThan(0);
    expect(missing(states, graphStates)).toEqual([]);
    expect(missing(states, covered.states)).toEqual([]);
    expect(missing(transitions, covered.transitions)).toEqual([]);
  });

  it('is fully named: the config holds only string references to setup (plus context and output)', () => {
    const fnKeys: string[] = [];
    const visit = (o: unknown, path: string) => {
      if (typeof o === 'function') fnKeys.push(path);
      else if (o && typeof o === 'object') for (const [k, v] of Object.entries(o)) visit(v, `${path}.${k}`);
    };
    visit(orchestrationMachine.config, 'config');
    expect(fnKeys.sort()).toEqual(['config.context', 'config.output']);
    const impl = orchestrationMachine.implementations;
    expect(Object.keys(impl.delays).sort()).toEqual(['agentTimeout', 'retryDelay']);
    expect(Object.keys(impl.actors)).toEqual(['callAgent']);
  });
});

/* ---------------------------------------------------------------------------------------------- */
/* behaviour                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

function run(input: Partial<OrchestrationInput> & Pick<OrchestrationInput, 'decision' | 'strategy'>, callAgent: ReturnType<typeof scripted>['callAgent']) {
  const actor = createActor(orchestrationMachine.provide({ actors: { callAgent } }), {
    input: { message: userMsg('what should I do?'), startedAt: T0, ...input },
  });
  actor.start();
  return actor;
}

describe('orchestration machine: behaviour', () => {
  it('parallel with one agent failing: partial-failure message and metadata', async () => {
    const { log, callAgent } = scripted({
      researcher: async () => reply('r1', 'The research says yes.'),
      writer: async () => {
        throw new TroupeError('AGENT_ERROR', 'the writer crashed');
      },
      critic: async () => reply('c1', 'Looks fine.'),
    });
    const actor = run({ decision: decision('researcher', 'writer', 'critic', 'writer'), strategy: 'parallel', retries: 0 }, callAgent);
    actor.send({ type: 'troupe.orchestration.tick', now: T0 + 1_234 });
    const out = await toPromise(actor);
    expect(log.map((c) => c.agentId)).toEqual(['researcher', 'writer', 'critic']); // deduplicated, all at once
    expect(out.message).toEqual({
      kind: 'message',
      role: 'agent',
      messageId: 'q-1-orchestrated',
      contextId: 'ctx-1',
      taskId: 'task-1',
      parts: [
        {
          kind: 'text',
          text: '**researcher**: The research says yes.\n\n**critic**: Looks fine. However, writer failed (the writer crashed).',
        },
      ],
    });
    expect(out.metadata).toEqual({
      agents_used: ['researcher', 'critic'],
      execution_time_ms: 1_234,
      task_state: 'completed',
      strategy: 'parallel',
      failures: [{ agentId: 'writer', code: 'AGENT_ERROR', message: 'the writer crashed' }],
      cancelled: [],
      skipped: [],
    });
  });

  it('parallel is limited to maxParallelAgents (the rest are reported as skipped)', async () => {
    const { log, callAgent } = scripted({ a: async () => reply('a'), b: async () => reply('b'), c: async () => reply('c') });
    const out = await toPromise(run({ decision: decision('a', 'b', 'c'), strategy: 'parallel', maxParallelAgents: 2 }, callAgent));
    expect(log.map((c) => c.agentId)).toEqual(['a', 'b']);
    expect(out.metadata.agents_used).toEqual(['a', 'b']);
    expect(out.metadata.skipped).toEqual(['c']);
  });

  it('sequential calls one agent after another, each with the original message, and collects all', async () => {
    const events: string[] = [];
    const { log, callAgent } = scripted({
      first: async () => {
        events.push('first:start');
        await sleep(20);
        events.push('first:end');
        return reply('f', 'one');
      },
      second: async () => {
        events.push('second:start');
        await sleep(5);
        events.push('second:end');
        return { kind: 'message', role: 'agent', messageId: 's', parts: [{ kind: 'text', text: 'two' }] };
      },
      third: async () => {
        events.push('third:start');
        return reply('t', 'three');
      },
    });
    const message = userMsg('plan my trip');
    const out = await toPromise(run({ decision: decision('first', 'second', 'third'), strategy: 'sequential', message, maxParallelAgents: 1 }, callAgent));
    expect(events).toEqual(['first:start', 'first:end', 'second:start', 'second:end', 'third:start']);
    for (const c of log) expect(c.message).toBe(message);
    expect(out.metadata.agents_used).toEqual(['first', 'second', 'third']); // sequential ignores maxParallelAgents
    expect(out.message.parts).toEqual([{ kind: 'text', text: '**first**: one\n\n**second**: two\n\n**third**: three' }]);
  });

  it('first_success returns the fastest success and stops the slower calls (their AbortSignal fires)', async () => {
    const { log, callAgent } = scripted({
      broken: async () => {
        throw new Error('nope');
      },
      fast: async () => {
        await sleep(10);
        return { kind: 'message', role: 'agent', messageId: 'fast-1', parts: [{ kind: 'text', text: 'fast answer' }, { kind: 'data', data: { n: 1 } }] };
      },
      slow: (_input, signal) =>
        new Promise<Message>((resolve, reject) => {
          const t = setTimeout(() => resolve(reply('slow-1', 'slow answer')), 5_000);
          signal.addEventListener('abort', () => {
            clearTimeout(t);
            reject(new Error('aborted'));
          });
        }),
    });
    const out = await toPromise(run({ decision: decision('slow', 'broken', 'fast'), strategy: 'first_success', retries: 0 }, callAgent));
    // the winner's own content, parts included
    expect(out.message.parts).toEqual([{ kind: 'text', text: 'fast answer' }, { kind: 'data', data: { n: 1 } }]);
    expect(out.metadata).toMatchObject({
      agents_used: ['fast'],
      task_state: 'completed',
      strategy: 'first_success',
      cancelled: ['slow'],
      failures: [{ agentId: 'broken', code: 'AGENT_ERROR', message: 'nope' }],
    });
    const slow = log.find((c) => c.agentId === 'slow')!;
    expect(slow.signal.aborted).toBe(true);
    expect(log.find((c) => c.agentId === 'fast')!.signal.aborted).toBe(false);
  });

  it('all agents failing gives the fallback message (configurable)', async () => {
    const { callAgent } = scripted({
      a: async () => {
        throw new Error('down');
      },
    });
    const out = await toPromise(run({ decision: decision('a', 'ghost'), strategy: 'parallel', retries: 0 }, callAgent));
    expect(out.metadata).toMatchObject({
      agents_used: [],
      task_state: 'failed',
      failures: [
        { agentId: 'a', code: 'AGENT_ERROR', message: 'down' },
        { agentId: 'ghost', code: 'AGENT_NOT_FOUND', message: 'no agent ghost' },
      ],
    });
    expect(out.message.parts).toEqual([
      {
        kind: 'text',
        text: "Sorry, I couldn't get an answer from any of the agents: a failed (down); ghost failed (no agent ghost). Please try again in a moment.",
      },
    ]);

    const custom = await toPromise(
      run({ decision: decision('a'), strategy: 'first_success', retries: 0, fallbackMessage: 'Nobody is home ({failureMessage})' }, callAgent),
    );
    expect(custom.message.parts).toEqual([{ kind: 'text', text: 'Nobody is home (a failed (down).)' }]);
    expect(custom.metadata.task_state).toBe('failed');
  });

  it('an agent that does not answer in time fails with AGENT_TIMEOUT and its call is aborted', async () => {
    vi.useFakeTimers();
    const { log, callAgent } = scripted({
      quick: async () => reply('q', 'quick'),
      stuck: () => new Promise<Message>(() => {}),
    });
    const actor = run({ decision: decision('quick', 'stuck'), strategy: 'parallel', agentTimeoutMs: 1_000, retries: 0 }, callAgent);
    await vi.advanceTimersByTimeAsync(999);
    expect(actor.getSnapshot().status).toBe('active');
    await vi.advanceTimersByTimeAsync(1);
    const snap = actor.getSnapshot();
    expect(snap.status).toBe('done');
    const out = snap.output!;
    expect(out.metadata.failures).toEqual([{ agentId: 'stuck', code: 'AGENT_TIMEOUT', message: 'agent "stuck" did not answer within 1000 ms' }]);
    expect(out.message.parts).toEqual([{ kind: 'text', text: 'quick However, stuck did not answer in time.' }]);
    expect(log.find((c) => c.agentId === 'stuck')!.signal.aborted).toBe(true);
  });

  it('retries failures and timeouts the configured number of times, after the retry delay', async () => {
    vi.useFakeTimers();
    let flakyCalls = 0;
    const { log, callAgent } = scripted({
      flaky: async () => {
        flakyCalls += 1;
        if (flakyCalls < 3) throw new Error(`flaky ${flakyCalls}`);
        return reply('ok', 'third time lucky');
      },
      dead: async () => {
        throw new Error('always down');
      },
      sleepy: () => new Promise<Message>(() => {}),
    });
    const actor = run(
      { decision: decision('flaky', 'dead', 'sleepy'), strategy: 'parallel', retries: 2, retryDelayMs: 500, agentTimeoutMs: 2_000 },
      callAgent,
    );
    await vi.advanceTimersByTimeAsync(0);
    expect(log.map((c) => `${c.agentId}#${c.attempt}`)).toEqual(['flaky#1', 'dead#1', 'sleepy#1']);
    await vi.advanceTimersByTimeAsync(499);
    expect(log).toHaveLength(3); // still waiting out the retry delay
    await vi.advanceTimersByTimeAsync(1);
    expect(log.map((c) => `${c.agentId}#${c.attempt}`)).toEqual(['flaky#1', 'dead#1', 'sleepy#1', 'flaky#2', 'dead#2']);
    await vi.advanceTimersByTimeAsync(10_000);
    const out = actor.getSnapshot().output!;
    const attempts = (id: string) => log.filter((c) => c.agentId === id).map((c) => c.attempt);
    expect(attempts('flaky')).toEqual([1, 2, 3]);
    expect(attempts('dead')).toEqual([1, 2, 3]); // 1 + retries
    expect(attempts('sleepy')).toEqual([1, 2, 3]);
    expect(log.filter((c) => c.agentId === 'sleepy').every((c) => c.signal.aborted)).toBe(true);
    expect(out.metadata.agents_used).toEqual(['flaky']);
    expect(out.metadata.failures).toEqual([
      { agentId: 'dead', code: 'AGENT_ERROR', message: 'always down' },
      { agentId: 'sleepy', code: 'AGENT_TIMEOUT', message: 'agent "sleepy" did not answer within 2000 ms' },
    ]);
    expect(out.message.parts[0]).toEqual({
      kind: 'text',
      text: 'third time lucky However, dead failed (always down); sleepy did not answer in time.',
    });
  });

  it('execution_time_ms comes from injected time: the host ticks from its callAgent before it settles', async () => {
    let host: ReturnType<typeof createActor<typeof orchestrationMachine>> | undefined;
    let fakeNow = T0;
    const callAgent = fromPromise<Message, CallAgentInput>(async ({ input }) => {
      await sleep(input.agentId === 'a' ? 5 : 15);
      fakeNow += input.agentId === 'a' ? 300 : 400;
      host!.send({ type: 'troupe.orchestration.tick', now: fakeNow }); // processed before the done event
      return reply(input.agentId);
    });
    host = createActor(orchestrationMachine.provide({ actors: { callAgent } }), {
      input: { decision: decision('a', 'b'), message: userMsg('x'), strategy: 'parallel', startedAt: T0 },
    });
    host.start();
    const out = await toPromise(host);
    expect(out.metadata.execution_time_ms).toBe(700);
    expect(host.getSnapshot().context.calls.map((c) => c.finishedAt)).toEqual([T0 + 300, T0 + 700]);
  });

  it('a restored orchestration re-runs its in-flight calls and re-arms their timeouts', async () => {
    vi.useFakeTimers();
    const first = scripted({ a: () => new Promise<Message>(() => {}), b: () => new Promise<Message>(() => {}) });
    const input: OrchestrationInput = { decision: decision('a', 'b'), message: userMsg('x'), strategy: 'parallel', startedAt: T0, agentTimeoutMs: 1_000, retries: 0 };
    const actor = createActor(orchestrationMachine.provide({ actors: { callAgent: first.callAgent } }), { input });
    actor.start();
    await vi.advanceTimersByTimeAsync(600);
    const persisted = JSON.parse(JSON.stringify(actor.getPersistedSnapshot()));
    actor.stop();
    expect(first.log.every((c) => c.signal.aborted)).toBe(true);

    const second = scripted({ a: async () => reply('a2', 'from a'), b: () => new Promise<Message>(() => {}) });
    const restored = createActor(orchestrationMachine.provide({ actors: { callAgent: second.callAgent } }), { snapshot: persisted, input });
    restored.start();
    restored.send({ type: 'troupe.orchestration.restored', now: T0 + 600 });
    await vi.advanceTimersByTimeAsync(0);
    // the same attempts (same idempotency key: messageId + agent) run again
    expect(second.log.map((c) => [c.agentId, c.attempt, c.message.messageId])).toEqual([
      ['a', 1, 'q-1'],
      ['b', 1, 'q-1'],
    ]);
    await vi.advanceTimersByTimeAsync(999);
    expect(restored.getSnapshot().status).toBe('active');
    await vi.advanceTimersByTimeAsync(1);
    const out = restored.getSnapshot().output!;
    expect(out.metadata.agents_used).toEqual(['a']);
    expect(out.metadata.failures.map((f) => f.code)).toEqual(['AGENT_TIMEOUT']);
    expect(out.metadata.execution_time_ms).toBe(600);
  });
});

/* ---------------------------------------------------------------------------------------------- */
/* aggregation and helpers                                                                          */
/* ---------------------------------------------------------------------------------------------- */

describe('aggregate()', () => {
  const ok = (agentId: string, text: string) => ({ agentId, status: 'succeeded' as const, reply: reply(`${agentId}-r`, text) });
  const failed = (agentId: string, code: 'AGENT_TIMEOUT' | 'AGENT_ERROR', message: string) => ({ agentId, status: 'failed' as const, error: { code, message } });

  it('one success: its content', () => {
    const a = aggregate([ok('a', 'hello')]);
    expect(a).toEqual({ text: 'hello', parts: [{ kind: 'text', text: 'hello' }], agentsUsed: ['a'], failures: [], cancelled: [], taskState: 'completed' });
  });

  it('several: attributed blocks in the given (agent) order', () => {
    expect(aggregate([ok('b', 'B!'), ok('a', 'A!')]).text).toBe('**b**: B!\n\n**a**: A!');
  });

  it('partial failure: the template names the failed agents and why', () => {
    const a = aggregate([ok('a', 'Answer.'), failed('b', 'AGENT_TIMEOUT', 'x'), failed('c', 'AGENT_ERROR', 'disk full')]);
    expect(a.text).toBe('Answer. However, b did not answer in time; c failed (disk full).');
    expect(a.taskState).toBe('completed');
    expect(aggregate([ok('a', 'A')], {}).text).toBe('A');
    expect(aggregate([ok('a', 'A'), failed('b', 'AGENT_ERROR', 'e')], { partialFailureTemplate: '{successMessage}\n\n_{failureMessage}_' }).text).toBe('A\n\n_b failed (e)._');
  });

  it('all failed: the fallback', () => {
    const a = aggregate([failed('a', 'AGENT_ERROR', 'e')], { fallbackMessage: 'Try later.' });
    expect(a).toMatchObject({ text: 'Try later.', agentsUsed: [], taskState: 'failed' });
    expect(aggregate([]).taskState).toBe('failed');
  });

  it('helpers', () => {
    expect(orchestrationAgents(decision('a', 'b', 'a', '', 'c'))).toEqual(['a', 'b', 'c']);
    expect(orchestrationAgents({ agentId: 'solo', confidence: 1, reasoning: '' })).toEqual(['solo']);
    expect(describeFailures([])).toBe('');
    expect(toCallFailure(new TroupeError('AGENT_NOT_FOUND', 'gone'), 'x')).toEqual({ code: 'AGENT_NOT_FOUND', message: 'gone' });
    expect(toCallFailure({ code: 'TIMEOUT', message: 'nats timeout' }, 'x')).toEqual({ code: 'AGENT_TIMEOUT', message: 'agent "x" did not answer in time' });
    expect(toCallFailure({ code: 'NO_RESPONDERS' }, 'x').code).toBe('AGENT_NOT_FOUND');
    expect(toCallFailure('weird', 'x')).toEqual({ code: 'AGENT_ERROR', message: 'weird' });
  });
});
