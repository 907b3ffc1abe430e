/**
 * The orchestration machine with its real `agentCall` children: only the wire request of each call is
 * scripted. Model-based coverage (every state and transition, on real actors), then behaviour: the
 * strategies, limits, first_success cancellation, timeouts and retries (the agent call's), time from
 * ticks, restore, the fan-out flag, and aggregation.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  createActor,
  fromPromise,
  getInitialMicrosteps,
  getMicrosteps,
  toPromise,
  type AnyMachineSnapshot,
  type AnyStateMachine,
  type EventObject,
} from 'xstate';
import { getAdjacencyMap, getShortestPaths, type StatePath } from 'xstate/graph';
import { CoverageRecorder, activeStateIds, definedStates, missing } from './helpers/machine-coverage.js';
import type { Message } from '../src/protocol/a2a.js';
import { TroupeError } from '../src/protocol/errors.js';
import { META } from '../src/protocol/metadata.js';
import type { RouterDecision } from '../src/protocol/routing.js';
import type { AgentReply } from '../src/protocol/wire.js';
import { agentCallMachine, type AgentCallOutput, type AgentRequestInput, type AgentRequestOutput } from '../src/machines/agent-call.js';
import {
  aggregate,
  callActorId,
  callResultOf,
  describeFailures,
  orchestrationAgents,
  orchestrationMachine,
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
/** What the aggregate holds of an agent's answer: the answer, marked with the agent. */
function answerOf(agentId: string, message: Message): Message {
  return { ...message, metadata: { ...message.metadata, [META.agent]: agentId } };
}
function decision(agentId: string, ...additionalAgents: string[]): RouterDecision {
  return { agentId, confidence: 0.9, reasoning: 'test', additionalAgents };
}

type Request = { input: AgentRequestInput; signal: AbortSignal; resolve: (r: AgentReply) => void; reject: (e: unknown) => void };

/** The wire, scripted by the test: every request of every agent call waits until the test settles it. */
function wire() {
  const requests: Request[] = [];
  const request = fromPromise<AgentRequestOutput, AgentRequestInput>(
    ({ input, signal }) => new Promise<AgentReply>((resolve, reject) => requests.push({ input, signal, resolve, reject })),
  );
  /** The request in flight for an agent (the latest one: a restore runs it again). */
  const inFlight = (agentId: string) => [...requests].reverse().find((r) => r.input.agentId === agentId && !r.signal.aborted);
  return { requests, request, inFlight };
}

/** A wire whose answers are functions of the request, per agent (an unknown agent: no responders). */
function scripted(script: Record<string, (input: AgentRequestInput, signal: AbortSignal) => Promise<AgentReply>>) {
  const log: Array<{ input: AgentRequestInput; signal: AbortSignal }> = [];
  const request = fromPromise<AgentRequestOutput, AgentRequestInput>(({ input, signal }) => {
    log.push({ input, signal });
    const fn = script[input.agentId];
    if (!fn) return Promise.reject(Object.assign(new Error('no responders'), { code: 'TRANSPORT_ERROR', reason: 'NO_RESPONDERS' }));
    return fn(input, signal);
  });
  return { log, request };
}

/**
 * The agent call, as a host provides it. `crashOn`: a request rejected with this message makes the call's
 * own actor fail (a fault put into its retry guard), the one way an agentCall child can crash.
 */
function agentCallWith(request: ReturnType<typeof wire>['request'], crashOn = 'CRASH') {
  return agentCallMachine.provide({
    actors: { request },
    guards: {
      canRetry: ({ context, event }) => {
        const error = (event as { error?: unknown }).error;
        if (error instanceof Error && error.message === crashOn) throw new Error('the agent call crashed');
        return context.attempt < context.retries;
      },
    },
  });
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
/** How long a scripted agent works before it answers (a real one thinks): the quick one still finishes first. */
const AGENT_WORK_MS = { quick: 5, fast: 10, slow: 20 } as const;
const flush = () => new Promise<void>((r) => setImmediate(r));

afterEach(() => {
  vi.useRealTimers();
});

/* ---------------------------------------------------------------------------------------------- */
/* model-based coverage                                                                             */
/* ---------------------------------------------------------------------------------------------- */

const eventsOf = <E extends EventObject>(path: StatePath<AnyMachineSnapshot, E>): E[] => path.steps.map((s) => s.event).filter((e) => e.type !== 'xstate.init');

const MODEL_AGENTS = ['alpha', 'beta'] as const;
function modelInput(strategy: OrchestrationStrategy): OrchestrationInput {
  return {
    decision: decision('alpha', 'beta', 'alpha'),
    message: userMsg('compare the plans'),
    strategy,
    // Retries are the agent call's own (covered by its model); here each call is one attempt, and no
    // timer fires during a replay.
    retries: 0,
    agentTimeoutMs: 600_000,
    startedAt: T0,
  };
}

/** How XState reports the fault put into the agent call's retry guard (agentCallWith): its error, wrapped. */
const CRASH_REPORT =
  "Unable to evaluate guard 'canRetry' in transition for event 'xstate.error.actor.request' in state node 'agentCall.calling':\nthe agent call crashed";

/** How the test makes a real agentCall child end the way the model says. */
type Realize = { agentId: string; settle: (r: Request) => void };

const ok = (agentId: string, r: AgentReply): AgentCallOutput => ({ ok: true, agentId, reply: r, attempts: 1 });
const failed = (agentId: string, code: 'AGENT_ERROR', message: string): AgentCallOutput => ({ ok: false, agentId, error: { code, message }, attempts: 1 });

/** Sample events: each agent's call answers, fails, answers with an error reply, or crashes; a tick and a restore. */
const MODEL: Array<{ event: OrchestrationEvent; realize?: Realize }> = [
  ...MODEL_AGENTS.flatMap((agentId) => {
    const answer = reply(`${agentId}-1`, `${agentId} answer`);
    const errorReply: AgentReply = { kind: 'error', error: { code: 'INVALID_MESSAGE', message: `${agentId} refused` } };
    return [
      {
        event: { type: `xstate.done.actor.${callActorId(agentId)}` as const, output: ok(agentId, answer) },
        realize: { agentId, settle: (r: Request) => r.resolve(answer) },
      },
      {
        event: { type: `xstate.done.actor.${callActorId(agentId)}` as const, output: failed(agentId, 'AGENT_ERROR', `${agentId} broke`) },
        realize: { agentId, settle: (r: Request) => r.reject(new TroupeError('AGENT_ERROR', `${agentId} broke`)) },
      },
      {
        event: { type: `xstate.done.actor.${callActorId(agentId)}` as const, output: ok(agentId, errorReply) },
        realize: { agentId, settle: (r: Request) => r.resolve(errorReply) },
      },
      {
        event: { type: `xstate.error.actor.${callActorId(agentId)}` as const, error: new Error(CRASH_REPORT) },
        realize: { agentId, settle: (r: Request) => r.reject(new Error('CRASH')) },
      },
    ];
  }),
  { event: { type: 'troupe.orchestration.tick', now: T0 + 1_000 } },
  { event: { type: 'troupe.orchestration.restored', now: T0 + 2_000 } },
];
const realizationOf = new Map(MODEL.map((m) => [JSON.stringify(m.event), m.realize]));

interface ReplayResult {
  final: OrchestrationSnapshot;
  requests: Request[];
  /** Agents whose request was in flight (neither settled nor aborted) when the path ended, before the actor stopped. */
  open: string[];
}

/** Replays a model path on a real orchestration with real agentCall children; the test settles their requests. */
async function replay(
  input: OrchestrationInput,
  events: OrchestrationEvent[],
  expected: AnyMachineSnapshot[],
  recorder: CoverageRecorder,
): Promise<ReplayResult> {
  const w = wire();
  const actor = createActor(orchestrationMachine.provide({ actors: { agentCall: agentCallWith(w.request) } }), { input, inspect: recorder.inspect });
  actor.start();
  await flush();
  for (const [i, event] of events.entries()) {
    const realize = realizationOf.get(JSON.stringify(event));
    if (realize) {
      const request = w.inFlight(realize.agentId);
      expect(request, `the model settles ${realize.agentId}'s call but no request of it is in flight`).toBeDefined();
      realize.settle(request!);
    } else {
      actor.send(event);
    }
    await flush();
    const snap = actor.getSnapshot();
    expect({ value: snap.value, context: snap.context }).toEqual({ value: expected[i]!.value, context: expected[i]!.context });
  }
  const final = actor.getSnapshot();
  const settled = new Set(final.context.calls.filter((c) => c.status === 'succeeded' || c.status === 'failed').map((c) => c.agentId));
  const open = w.requests.filter((q) => !q.signal.aborted && !settled.has(q.input.agentId)).map((q) => q.input.agentId);
  actor.stop();
  return { final, requests: w.requests, open };
}

describe('orchestration machine: model-based, with real agent calls', () => {
  it('every state is reached and every transition fires; outputs agree with the calls', { timeout: 120_000 }, async () => {
    const machine = orchestrationMachine as unknown as AnyStateMachine;
    const graphStates = new Set<string>();
    const recorder = new CoverageRecorder();
    let finals = 0;

    for (const strategy of ['parallel', 'sequential', 'first_success'] as const) {
      const input = modelInput(strategy);
      // A finished actor takes no more events (the pure transition function would still apply root-level ones).
      const traversal = { input, events: MODEL.map((m) => m.event), filterEvents: (snap: OrchestrationSnapshot) => snap.status === 'active' };
      const shortest = getShortestPaths(orchestrationMachine, traversal);
      const adjacency = getAdjacencyMap(orchestrationMachine, traversal);
      const toSource = new Map(shortest.map((p) => [JSON.stringify({ value: p.state.value, context: p.state.context }), p]));

      // One run per handled edge: the shortest path to its source, then the edge.
      const runs: Array<{ events: OrchestrationEvent[]; states: AnyMachineSnapshot[] }> = [];
      for (const p of shortest) for (const id of activeStateIds(machine, p.state.value)) graphStates.add(id);
      for (const [key, vertex] of Object.entries(adjacency)) {
        const head = toSource.get(key)!;
        expect(head, `no path to ${key}`).toBeDefined();
        for (const { event, state } of Object.values(vertex.transitions) as Array<{ event: OrchestrationEvent; state: OrchestrationSnapshot }>) {
          if (machine.getTransitionData(vertex.state as never, event as never).length === 0) continue;
          for (const [micro] of getMicrosteps(machine, vertex.state as never, event as never)) {
            for (const id of activeStateIds(machine, (micro as AnyMachineSnapshot).value)) graphStates.add(id);
          }
          runs.push({ events: [...eventsOf(head), event], states: [...head.steps.slice(1).map((s) => s.state), state as AnyMachineSnapshot] });
        }
      }
      // The initial dispatch happens before any event: its microsteps show the transient `dispatching`.
      for (const [micro] of getInitialMicrosteps(machine, input))
        for (const id of activeStateIds(machine, (micro as AnyMachineSnapshot).value)) graphStates.add(id);

      for (const run of runs) {
        const r = await replay(input, run.events, run.states, recorder);
        // Every request is a fan-out call of the original message, from the user, at hop 0.
        for (const q of r.requests) expect(q.input).toMatchObject({ message: input.message, fanOut: true, sender: 'user', hop: 0, attempt: 0 });
        // Requests in flight (neither settled nor aborted) are exactly those of the running calls:
        // cancelled calls were stopped (their request's AbortSignal fired); sequential has at most one.
        const running = r.final.context.calls.filter((c) => c.status === 'running').map((c) => c.agentId);
        const { open } = r;
        expect(open.sort()).toEqual(r.final.status === 'done' ? [] : running.sort());
        if (strategy === 'sequential') expect(open.length).toBeLessThanOrEqual(1);
        if (r.final.status === 'done') {
          finals += 1;
          const out = r.final.output as OrchestrationOutput;
          const used = out.metadata.agentsUsed;
          expect(out.message.role).toBe('agent');
          expect(out.message.messageId).toBe('q-1-orchestrated');
          expect(out.metadata.strategy).toBe(strategy);
          expect(out.metadata.taskState).toBe(used.length ? 'completed' : 'failed');
          expect(used).toEqual(MODEL_AGENTS.filter((a) => used.includes(a))); // agent order
          expect(out.metadata.executionTimeMs).toBe(r.final.context.now - T0);
          if (strategy === 'first_success') expect(used.length).toBeLessThanOrEqual(1);
          const failedIds = out.metadata.failures.map((f) => f.agentId);
          expect([...used, ...failedIds, ...out.metadata.cancelled].sort()).toEqual([...MODEL_AGENTS].sort());
          const text = out.message.parts.map((p) => (p.kind === 'text' ? p.text : '')).join('');
          for (const id of failedIds) expect(text.includes(id) || strategy === 'first_success').toBe(true);
          if (used.length === 2) expect(text).toBe('**alpha**: alpha answer\n\n**beta**: beta answer');
        }
      }
    }
    expect(finals).toBeGreaterThan(0);
    expect(missing(definedStates(machine), graphStates)).toEqual([]);
    expect(recorder.missingOf(machine)).toEqual({ states: [], transitions: [] });
    // The children are the real agent call: it answered, failed and was cancelled along the way.
    expect([...recorder.of('agentCall').states]).toEqual(expect.arrayContaining(['agentCall.calling', 'agentCall.succeeded', 'agentCall.failed']));
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
    expect(Object.keys(impl.delays)).toEqual([]); // timeouts and retry delays are the agent call's
    expect(Object.keys(impl.actors)).toEqual(['agentCall']);
  });
});

/* ---------------------------------------------------------------------------------------------- */
/* behaviour                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

function run(input: Partial<OrchestrationInput> & Pick<OrchestrationInput, 'decision' | 'strategy'>, request: ReturnType<typeof scripted>['request']) {
  const actor = createActor(orchestrationMachine.provide({ actors: { agentCall: agentCallWith(request) } }), {
    input: { message: userMsg('what should I do?'), startedAt: T0, ...input },
  });
  actor.start();
  return actor;
}

describe('orchestration machine: behaviour', () => {
  it('parallel with one agent failing: partial-failure message and metadata', async () => {
    const { log, request } = scripted({
      researcher: async () => reply('r1', 'The research says yes.'),
      writer: async () => {
        throw new TroupeError('AGENT_ERROR', 'the writer crashed');
      },
      critic: async () => reply('c1', 'Looks fine.'),
    });
    const actor = run({ decision: decision('researcher', 'writer', 'critic', 'writer'), strategy: 'parallel', retries: 0 }, request);
    actor.send({ type: 'troupe.orchestration.tick', now: T0 + 1_234 });
    const out = await toPromise(actor);
    expect(log.map((c) => c.input.agentId)).toEqual(['researcher', 'writer', 'critic']); // deduplicated, all at once
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
      agentsUsed: ['researcher', 'critic'],
      executionTimeMs: 1_234,
      taskState: 'completed',
      strategy: 'parallel',
      failures: [{ agentId: 'writer', code: 'AGENT_ERROR', message: 'the writer crashed' }],
      cancelled: [],
      skipped: [],
      // Each call ran from T0 to the tick at T0 + 1234 (the machine's clock moves only with events).
      results: [
        { agentId: 'researcher', success: true, content: 'The research says yes.', latencyMs: 1_234, executionTimeMs: 1_234 },
        {
          agentId: 'writer',
          success: false,
          content: '',
          latencyMs: 1_234,
          executionTimeMs: 1_234,
          error: { code: 'AGENT_ERROR', message: 'the writer crashed' },
          errorMessage: 'the writer crashed',
        },
        { agentId: 'critic', success: true, content: 'Looks fine.', latencyMs: 1_234, executionTimeMs: 1_234 },
      ],
      latencyMs: { researcher: 1_234, writer: 1_234, critic: 1_234 },
    });
  });

  it('sequential: each agent has its own latency, from its call to its answer, on the machine clock', async () => {
    let openA!: () => void;
    let openB!: () => void;
    const gateA = new Promise<void>((r) => (openA = r));
    const gateB = new Promise<void>((r) => (openB = r));
    const { request } = scripted({ a: async () => (await gateA, reply('a')), b: async () => (await gateB, reply('b')) });
    const actor = run({ decision: decision('a', 'b'), strategy: 'sequential', retries: 0 }, request);
    const flush = () => new Promise<void>((r) => setImmediate(r));
    actor.send({ type: 'troupe.orchestration.tick', now: T0 + 100 });
    openA();
    await flush();
    actor.send({ type: 'troupe.orchestration.tick', now: T0 + 350 });
    openB();
    const out = await toPromise(actor);
    expect(out.metadata.results).toEqual([
      { agentId: 'a', success: true, content: 'a', latencyMs: 100, executionTimeMs: 100 },
      { agentId: 'b', success: true, content: 'b', latencyMs: 250, executionTimeMs: 250 },
    ]);
    expect(out.metadata.latencyMs).toEqual({ a: 100, b: 250 });
    expect(out.metadata.executionTimeMs).toBe(350);
    expect(out.answers).toEqual([
      { agentId: 'a', text: 'a' },
      { agentId: 'b', text: 'b' },
    ]);
  });

  it('every call is a fan-out call: the request carries fanOut (the sanitiser path), from the user at hop 0', async () => {
    const { log, request } = scripted({ a: async () => reply('a'), b: async () => reply('b') });
    const message = userMsg('both of you');
    await toPromise(run({ decision: decision('a', 'b'), strategy: 'parallel', message }, request));
    expect(log.map((c) => c.input)).toEqual([
      { agentId: 'a', message, sender: 'user', hop: 0, attempt: 0, timeoutMs: 30_000, fanOut: true },
      { agentId: 'b', message, sender: 'user', hop: 0, attempt: 0, timeoutMs: 30_000, fanOut: true },
    ]);
  });

  it('parallel is limited to maxParallelAgents (the rest are reported as skipped)', async () => {
    const { log, request } = scripted({ a: async () => reply('a'), b: async () => reply('b'), c: async () => reply('c') });
    const out = await toPromise(run({ decision: decision('a', 'b', 'c'), strategy: 'parallel', maxParallelAgents: 2 }, request));
    expect(log.map((c) => c.input.agentId)).toEqual(['a', 'b']);
    expect(out.metadata.agentsUsed).toEqual(['a', 'b']);
    expect(out.metadata.skipped).toEqual(['c']);
  });

  it('sequential calls one agent after another, each with the original message, and collects all', async () => {
    const events: string[] = [];
    const { log, request } = scripted({
      first: async () => {
        events.push('first:start');
        await sleep(AGENT_WORK_MS.slow);
        events.push('first:end');
        return reply('f', 'one');
      },
      second: async () => {
        events.push('second:start');
        await sleep(AGENT_WORK_MS.quick);
        events.push('second:end');
        return { kind: 'task', id: 't', contextId: 'c', status: { state: 'completed', message: reply('s', 'two') } };
      },
      third: async () => {
        events.push('third:start');
        return reply('t', 'three');
      },
    });
    const message = userMsg('plan my trip');
    const out = await toPromise(run({ decision: decision('first', 'second', 'third'), strategy: 'sequential', message, maxParallelAgents: 1 }, request));
    expect(events).toEqual(['first:start', 'first:end', 'second:start', 'second:end', 'third:start']);
    for (const c of log) expect(c.input.message).toBe(message);
    expect(out.metadata.agentsUsed).toEqual(['first', 'second', 'third']); // sequential ignores maxParallelAgents
    expect(out.message.parts).toEqual([{ kind: 'text', text: '**first**: one\n\n**second**: two\n\n**third**: three' }]);
  });

  it('first_success returns the fastest success and stops the slower calls (their request is aborted)', async () => {
    const { log, request } = scripted({
      broken: async () => {
        throw new Error('nope');
      },
      fast: async () => {
        await sleep(AGENT_WORK_MS.fast);
        return {
          kind: 'message',
          role: 'agent',
          messageId: 'fast-1',
          parts: [
            { kind: 'text', text: 'fast answer' },
            { kind: 'data', data: { n: 1 } },
          ],
        };
      },
      slow: (_input, signal) =>
        new Promise<AgentReply>((resolve, reject) => {
          const t = setTimeout(() => resolve(reply('slow-1', 'slow answer')), 5_000);
          signal.addEventListener('abort', () => {
            clearTimeout(t);
            reject(new Error('aborted'));
          });
        }),
    });
    const out = await toPromise(run({ decision: decision('slow', 'broken', 'fast'), strategy: 'first_success', retries: 0 }, request));
    // the winner's own content, parts included
    expect(out.message.parts).toEqual([
      { kind: 'text', text: 'fast answer' },
      { kind: 'data', data: { n: 1 } },
    ]);
    expect(out.metadata).toMatchObject({
      agentsUsed: ['fast'],
      taskState: 'completed',
      strategy: 'first_success',
      cancelled: ['slow'],
      failures: [{ agentId: 'broken', code: 'AGENT_ERROR', message: 'nope' }],
    });
    expect(log.find((c) => c.input.agentId === 'slow')!.signal.aborted).toBe(true);
    expect(log.find((c) => c.input.agentId === 'fast')!.signal.aborted).toBe(false);
  });

  it('all agents failing gives the fallback message (configurable); error replies and failed tasks count as failures', async () => {
    const { request } = scripted({
      a: async () => {
        throw new Error('down');
      },
      refusing: async () => ({ kind: 'error', error: { code: 'INVALID_MESSAGE', message: 'not for me' } }),
      quitter: async () => ({ kind: 'task', id: 't', contextId: 'c', status: { state: 'failed', message: reply('x', 'gave up') } }),
    });
    const out = await toPromise(
      run({ decision: decision('a', 'ghost', 'refusing', 'quitter'), strategy: 'parallel', retries: 0, maxParallelAgents: 4 }, request),
    );
    expect(out.metadata).toMatchObject({
      agentsUsed: [],
      taskState: 'failed',
      failures: [
        { agentId: 'a', code: 'AGENT_ERROR', message: 'down' },
        { agentId: 'ghost', code: 'AGENT_NOT_FOUND', message: 'agent "ghost" is not on the mesh' },
        { agentId: 'refusing', code: 'INVALID_MESSAGE', message: 'not for me' },
        { agentId: 'quitter', code: 'AGENT_ERROR', message: 'gave up' },
      ],
    });
    expect(out.message.parts).toEqual([
      {
        kind: 'text',
        text: 'Sorry, I couldn\'t get an answer from any of the agents: a failed (down); ghost failed (agent "ghost" is not on the mesh); refusing failed (not for me); quitter failed (gave up). Please try again in a moment.',
      },
    ]);

    const custom = await toPromise(
      run({ decision: decision('a'), strategy: 'first_success', retries: 0, fallbackMessage: 'Nobody is home ({failureMessage})' }, request),
    );
    expect(custom.message.parts).toEqual([{ kind: 'text', text: 'Nobody is home (a failed (down).)' }]);
    expect(custom.metadata.taskState).toBe('failed');
  });

  it('an agent that does not answer in time fails with AGENT_TIMEOUT (the agent call times out) and its request is aborted', async () => {
    vi.useFakeTimers();
    const { log, request } = scripted({
      quick: async () => reply('q', 'quick'),
      stuck: () => new Promise<AgentReply>(() => {}),
    });
    const actor = run({ decision: decision('quick', 'stuck'), strategy: 'parallel', agentTimeoutMs: 1_000, retries: 0 }, request);
    await vi.advanceTimersByTimeAsync(999);
    expect(actor.getSnapshot().status).toBe('active');
    await vi.advanceTimersByTimeAsync(1);
    const snap = actor.getSnapshot();
    expect(snap.status).toBe('done');
    const out = snap.output!;
    expect(out.metadata.failures).toEqual([
      { agentId: 'stuck', code: 'AGENT_TIMEOUT', message: 'agent "stuck" did not answer within 1000 ms (attempt 1 of 1)' },
    ]);
    expect(out.message.parts).toEqual([{ kind: 'text', text: 'quick However, stuck did not answer in time.' }]);
    expect(log.find((c) => c.input.agentId === 'stuck')!.signal.aborted).toBe(true);
  });

  it('retries failures and timeouts the configured number of times, after the retry delay (the agent call does)', async () => {
    vi.useFakeTimers();
    let flakyCalls = 0;
    const { log, request } = scripted({
      flaky: async () => {
        flakyCalls += 1;
        if (flakyCalls < 3) throw new Error(`flaky ${flakyCalls}`);
        return reply('ok', 'third time lucky');
      },
      dead: async () => {
        throw new Error('always down');
      },
      sleepy: () => new Promise<AgentReply>(() => {}),
    });
    const actor = run({ decision: decision('flaky', 'dead', 'sleepy'), strategy: 'parallel', retries: 2, retryDelayMs: 500, agentTimeoutMs: 2_000 }, request);
    const attempts = () => log.map((c) => `${c.input.agentId}#${c.input.attempt}`);
    await vi.advanceTimersByTimeAsync(0);
    expect(attempts()).toEqual(['flaky#0', 'dead#0', 'sleepy#0']);
    await vi.advanceTimersByTimeAsync(499);
    expect(log).toHaveLength(3); // still waiting out the retry delay
    await vi.advanceTimersByTimeAsync(1);
    expect(attempts()).toEqual(['flaky#0', 'dead#0', 'sleepy#0', 'flaky#1', 'dead#1']);
    await vi.advanceTimersByTimeAsync(10_000);
    const out = actor.getSnapshot().output!;
    const of = (id: string) => log.filter((c) => c.input.agentId === id).map((c) => c.input.attempt);
    expect(of('flaky')).toEqual([0, 1, 2]);
    expect(of('dead')).toEqual([0, 1, 2]); // 1 + retries
    expect(of('sleepy')).toEqual([0, 1, 2]);
    expect(log.filter((c) => c.input.agentId === 'sleepy').every((c) => c.signal.aborted)).toBe(true);
    expect(out.metadata.agentsUsed).toEqual(['flaky']);
    expect(out.metadata.failures).toEqual([
      { agentId: 'dead', code: 'AGENT_ERROR', message: 'always down' },
      { agentId: 'sleepy', code: 'AGENT_TIMEOUT', message: 'agent "sleepy" did not answer within 2000 ms (attempt 3 of 3)' },
    ]);
    expect(actor.getSnapshot().context.calls.map((c) => [c.agentId, c.attempts])).toEqual([
      ['flaky', 3],
      ['dead', 3],
      ['sleepy', 3],
    ]);
    expect(out.message.parts[0]).toEqual({ kind: 'text', text: 'third time lucky However, dead failed (always down); sleepy did not answer in time.' });
  });

  it('executionTimeMs comes from injected time: ticks before a call settles count', async () => {
    let host: ReturnType<typeof createActor<typeof orchestrationMachine>> | undefined;
    let fakeNow = T0;
    const request = fromPromise<AgentRequestOutput, AgentRequestInput>(async ({ input }) => {
      await sleep(input.agentId === 'a' ? AGENT_WORK_MS.quick : AGENT_WORK_MS.slow);
      fakeNow += input.agentId === 'a' ? 300 : 400;
      host!.send({ type: 'troupe.orchestration.tick', now: fakeNow }); // processed before the call's done event
      return reply(input.agentId);
    });
    host = createActor(orchestrationMachine.provide({ actors: { agentCall: agentCallWith(request) } }), {
      input: { decision: decision('a', 'b'), message: userMsg('x'), strategy: 'parallel', startedAt: T0 },
    });
    host.start();
    const out = await toPromise(host);
    expect(out.metadata.executionTimeMs).toBe(700);
    expect(host.getSnapshot().context.calls.map((c) => c.finishedAt)).toEqual([T0 + 300, T0 + 700]);
  });

  it('a restored orchestration runs its in-flight calls again and they re-arm their timeouts', async () => {
    vi.useFakeTimers();
    const first = scripted({ a: () => new Promise<AgentReply>(() => {}), b: () => new Promise<AgentReply>(() => {}) });
    const input: OrchestrationInput = {
      decision: decision('a', 'b'),
      message: userMsg('x'),
      strategy: 'parallel',
      startedAt: T0,
      agentTimeoutMs: 1_000,
      retries: 0,
    };
    const actor = createActor(orchestrationMachine.provide({ actors: { agentCall: agentCallWith(first.request) } }), { input });
    actor.start();
    await vi.advanceTimersByTimeAsync(600);
    const persisted = JSON.parse(JSON.stringify(actor.getPersistedSnapshot()));
    actor.stop(); // the node dies; its timers die with it
    expect(first.log.every((c) => c.signal.aborted)).toBe(true);

    const second = scripted({ a: async () => reply('a2', 'from a'), b: () => new Promise<AgentReply>(() => {}) });
    const restored = createActor(orchestrationMachine.provide({ actors: { agentCall: agentCallWith(second.request) } }), { snapshot: persisted, input });
    restored.start();
    restored.send({ type: 'troupe.orchestration.restored', now: T0 + 600 });
    await vi.advanceTimersByTimeAsync(0);
    // The same attempts (same idempotency key: the messageId) run again.
    const latest = (id: string) => second.log.filter((c) => c.input.agentId === id).at(-1)!;
    expect(['a', 'b'].map((id) => [id, latest(id).input.attempt, latest(id).input.message.messageId])).toEqual([
      ['a', 0, 'q-1'],
      ['b', 0, 'q-1'],
    ]);
    // b's call re-armed a full timeout when it was told of the restore.
    await vi.advanceTimersByTimeAsync(999);
    expect(restored.getSnapshot().status).toBe('active');
    await vi.advanceTimersByTimeAsync(1);
    const out = restored.getSnapshot().output!;
    expect(out.metadata.agentsUsed).toEqual(['a']);
    expect(out.metadata.failures.map((f) => f.code)).toEqual(['AGENT_TIMEOUT']);
    expect(out.metadata.executionTimeMs).toBe(600);
  });

  it('a call whose actor crashes is reported as failed and the others go on', async () => {
    const { request } = scripted({
      a: async () => reply('a', 'fine'),
      b: async () => {
        throw new Error('CRASH');
      },
    });
    const out = await toPromise(run({ decision: decision('a', 'b'), strategy: 'parallel', retries: 1 }, request));
    expect(out.metadata.agentsUsed).toEqual(['a']);
    expect(out.metadata.failures).toEqual([{ agentId: 'b', code: 'AGENT_ERROR', message: CRASH_REPORT }]);
  });
});

/* ---------------------------------------------------------------------------------------------- */
/* aggregation and helpers                                                                          */
/* ---------------------------------------------------------------------------------------------- */

describe('aggregate()', () => {
  const okResult = (agentId: string, text: string) => ({ agentId, status: 'succeeded' as const, reply: reply(`${agentId}-r`, text) });
  const failedResult = (agentId: string, code: 'AGENT_TIMEOUT' | 'AGENT_ERROR', message: string) => ({
    agentId,
    status: 'failed' as const,
    error: { code, message },
  });

  it('one success: its content', () => {
    const a = aggregate([okResult('a', 'hello')]);
    expect(a).toEqual({ text: 'hello', parts: [{ kind: 'text', text: 'hello' }], agentsUsed: ['a'], failures: [], cancelled: [], taskState: 'completed' });
  });

  it('several: attributed blocks in the given (agent) order', () => {
    expect(aggregate([okResult('b', 'B!'), okResult('a', 'A!')]).text).toBe('**b**: B!\n\n**a**: A!');
  });

  it('partial failure: the template names the failed agents and why', () => {
    const a = aggregate([okResult('a', 'Answer.'), failedResult('b', 'AGENT_TIMEOUT', 'x'), failedResult('c', 'AGENT_ERROR', 'disk full')]);
    expect(a.text).toBe('Answer. However, b did not answer in time; c failed (disk full).');
    expect(a.taskState).toBe('completed');
    expect(aggregate([okResult('a', 'A')], {}).text).toBe('A');
    expect(
      aggregate([okResult('a', 'A'), failedResult('b', 'AGENT_ERROR', 'e')], { partialFailureTemplate: '{successMessage}\n\n_{failureMessage}_' }).text,
    ).toBe('A\n\n_b failed (e)._');
  });

  it('all failed: the fallback', () => {
    const a = aggregate([failedResult('a', 'AGENT_ERROR', 'e')], { fallbackMessage: 'Try later.' });
    expect(a).toMatchObject({ text: 'Try later.', agentsUsed: [], taskState: 'failed' });
    expect(aggregate([]).taskState).toBe('failed');
  });

  it('helpers', () => {
    expect(orchestrationAgents(decision('a', 'b', 'a', '', 'c'))).toEqual(['a', 'b', 'c']);
    expect(orchestrationAgents({ agentId: 'solo', confidence: 1, reasoning: '' })).toEqual(['solo']);
    expect(describeFailures([])).toBe('');
    const answer = reply('m', 'hi');
    expect(callResultOf(ok('x', answer))).toEqual({ reply: answerOf('x', answer) });
    expect(callResultOf(ok('x', { kind: 'task', id: 't', contextId: 'c', status: { state: 'completed' } }))).toEqual({
      error: { code: 'AGENT_ERROR', message: 'agent "x" returned a task without a message' },
    });
    expect(callResultOf(ok('x', { kind: 'task', id: 't', contextId: 'c', status: { state: 'rejected' } }))).toEqual({
      error: { code: 'AGENT_ERROR', message: 'agent "x" rejected the task' },
    });
    expect(callResultOf(failed('x', 'AGENT_ERROR', 'boom'))).toEqual({ error: { code: 'AGENT_ERROR', message: 'boom' } });
  });
});
