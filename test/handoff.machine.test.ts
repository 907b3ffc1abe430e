import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  createActor,
  getMicrosteps,
  type AnyMachineSnapshot,
  type AnyStateMachine,
  type AnyTransitionDefinition,
  type EventObject,
} from 'xstate';
import { getAdjacencyMap, getShortestPaths, type StatePath } from 'xstate/graph';
import { definedStates, definedTransitions, missing, transitionKey } from './helpers/machine-coverage.js';
import type { Message } from '../src/protocol/a2a.js';
import { TroupeError } from '../src/protocol/errors.js';
import {
  HandoffAcceptSchema,
  HandoffDirectiveSchema,
  HandoffRequestSchema,
  HandoffReturnSchema,
  handoffRequestFromDirective,
  readHandoffAccept,
  readHandoffDirective,
  readHandoffRequest,
  readHandoffReturn,
  withHandoffAccept,
  withHandoffDirective,
  withHandoffRequest,
  withHandoffReturn,
  type HandoffRequest,
} from '../src/protocol/handoff.js';
import { CLIENT_ROUTING_URI } from '../src/protocol/routing.js';
import * as protocol from '../src/protocol/index.js';
import {
  assertCanStartHandoff,
  canStartHandoff,
  handoffEventsForTargetReply,
  handoffFailedEvent,
  handoffMachine,
  type HandoffEmitted,
  type HandoffEvent,
  type HandoffInput,
  type HandoffOutput,
  type HandoffSnapshot,
} from '../src/machines/handoff.js';

/* ---------------------------------------------------------------------------------------------- */
/* fixtures                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

const T0 = 1_000_000;

const request: HandoffRequest = HandoffRequestSchema.parse({
  threadId: 'th-1',
  tenantId: 'acme',
  userId: 'u-1',
  sourceAgentId: 'triage',
  targetAgentId: 'billing',
  contextSummary: 'The user wants a refund for order 42.',
  handoffReason: 'billing questions belong to billing',
  recentMessageCount: 3,
});

function userMsg(id: string, text = id): Message {
  return { kind: 'message', role: 'user', messageId: id, parts: [{ kind: 'text', text }] };
}
function agentMsg(id: string, text = id, metadata?: Record<string, unknown>): Message {
  return { kind: 'message', role: 'agent', messageId: id, parts: [{ kind: 'text', text }], ...(metadata ? { metadata } : {}) };
}

function start(input: Partial<HandoffInput> = {}) {
  const emitted: HandoffEmitted[] = [];
  const actor = createActor(handoffMachine, { input: { request, now: T0, maxDurationMs: 60_000, ...input } });
  actor.on('*', (e) => emitted.push(e));
  actor.start();
  return { actor, emitted };
}

afterEach(() => {
  vi.useRealTimers();
});

/* ---------------------------------------------------------------------------------------------- */
/* model-based coverage                                                                             */
/* ---------------------------------------------------------------------------------------------- */

const eventsOf = <E extends EventObject>(path: StatePath<AnyMachineSnapshot, E>): E[] =>
  path.steps.map((s) => s.event).filter((e) => e.type !== 'xstate.init');

const INPUT: HandoffInput = { request, now: T0, maxDurationMs: 60_000 };
const AFTER_PENDING = 'xstate.after.handoffDeadline.handoff.pending';
const AFTER_ACTIVE = 'xstate.after.handoffDeadline.handoff.active';

// The deadline events are what the machine's own `after` timers raise.
const SAMPLE_EVENTS: HandoffEvent[] = [
  { type: 'troupe.handoff.accepted', now: T0 + 100, estimatedDurationSeconds: 30 },
  { type: 'troupe.handoff.rejected', now: T0 + 100, rejectionReason: 'no capacity' },
  { type: 'troupe.handoff.userMessage', message: userMsg('m1'), now: T0 + 200 },
  { type: 'troupe.handoff.userMessage', message: userMsg('m2'), now: T0 + 300 },
  { type: 'troupe.handoff.returned', result: { completionStatus: 'completed', resultSummary: 'refund issued', artifactsCreated: ['refund-42'] }, now: T0 + 400 },
  { type: 'troupe.handoff.cancel', reason: 'user left', now: T0 + 150 },
  { type: 'troupe.handoff.failed', error: { code: 'AGENT_ERROR', message: 'billing crashed' }, now: T0 + 150 },
  { type: 'troupe.handoff.tick', now: T0 + 500 },
  { type: AFTER_PENDING } as unknown as HandoffEvent,
  { type: AFTER_ACTIVE } as unknown as HandoffEvent,
];

const traversal = {
  input: INPUT,
  events: SAMPLE_EVENTS,
  // Bound the state space: at most two forwarded turns.
  // A finished actor takes no more events; at most two forwarded turns.
  filterEvents: (snap: HandoffSnapshot, e: HandoffEvent) =>
    snap.status === 'active' && !(e.type === 'troupe.handoff.userMessage' && snap.context.turns >= 2),
};

interface Replay {
  states: Set<string>;
  transitions: Set<string>;
  emitted: HandoffEmitted[];
  final: HandoffSnapshot;
}

/** Replays a path on a real actor (fake timers fire the deadline) and checks every step against the model. */
function replay(events: EventObject[], expected: AnyMachineSnapshot[]): Replay {
  vi.useFakeTimers();
  const cov: Replay = { states: new Set(), transitions: new Set(), emitted: [], final: undefined as unknown as HandoffSnapshot };
  const actor = createActor(handoffMachine, {
    input: INPUT,
    inspect: (ev) => {
      if ((ev.actorRef as { _parent?: unknown })._parent !== undefined) return; // root actor only
      if (ev.type === '@xstate.microstep') {
        for (const t of (ev as unknown as { _transitions: AnyTransitionDefinition[] })._transitions) {
          cov.transitions.add(transitionKey(t));
          cov.states.add(t.source.id); // a state a transition leaves was active (shows transient states)
        }
      }
      if (ev.type === '@xstate.microstep' || ev.type === '@xstate.snapshot') {
        for (const n of (ev.snapshot as AnyMachineSnapshot)._nodes) cov.states.add(n.id);
      }
    },
  });
  actor.on('*', (e) => cov.emitted.push(e));
  actor.start();
  events.forEach((event, i) => {
    if (event.type.startsWith('xstate.after.')) {
      // Fire the real timer: it was armed for exactly deadline - now.
      const { deadline, now } = actor.getSnapshot().context;
      vi.advanceTimersByTime(Math.max(0, deadline - now));
    } else {
      // Real time and the injected `now` move together.
      const at = (event as { now?: number }).now;
      if (typeof at === 'number') vi.advanceTimersByTime(Math.max(0, at - actor.getSnapshot().context.now));
      actor.send(event as HandoffEvent);
    }
    const snap = actor.getSnapshot();
    expect({ value: snap.value, context: snap.context }).toEqual({ value: expected[i]!.value, context: expected[i]!.context });
  });
  cov.final = actor.getSnapshot();
  actor.stop();
  vi.useRealTimers();
  return cov;
}

describe('handoff machine: model-based', () => {
  it('every state is reached and every transition fires on real actors; outputs match the final state', () => {
    const states = definedStates(handoffMachine);
    const transitions = definedTransitions(handoffMachine);
    // Sanity: the model's own view of itself.
    expect([...states].sort()).toEqual(
      ['handoff', 'handoff.active', 'handoff.cancelled', 'handoff.completed', 'handoff.error', 'handoff.pending', 'handoff.rejected', 'handoff.returning'].sort(),
    );

    // 1. shortest paths to every distinct snapshot
    const shortest = getShortestPaths(handoffMachine, traversal);
    // 2. one path per handled edge of the graph (shortest path to its source + the edge), for transition coverage
    const adjacency = getAdjacencyMap(handoffMachine as unknown as AnyStateMachine, traversal); // (graph typings do not carry `emitted`)
    const toSource = new Map(shortest.map((p) => [JSON.stringify({ value: p.state.value, context: p.state.context }), p]));
    const edgePaths: Array<{ events: EventObject[]; states: AnyMachineSnapshot[] }> = [];
    const graphStates = new Set<string>();
    for (const [key, vertex] of Object.entries(adjacency)) {
      const head = toSource.get(key);
      expect(head, `no path to ${key}`).toBeDefined();
      for (const { event, state } of Object.values(vertex.transitions) as Array<{ event: HandoffEvent; state: HandoffSnapshot }>) {
        if (handoffMachine.getTransitionData(vertex.state as never, event as never).length === 0) continue;
        // transient states (returning) only show in the microsteps
        for (const [micro] of getMicrosteps(handoffMachine, vertex.state as never, event as never)) {
          for (const n of (micro as AnyMachineSnapshot)._nodes) graphStates.add(n.id);
        }
        edgePaths.push({
          events: [...eventsOf(head!), event],
          states: [...head!.steps.slice(1).map((s) => s.state), state as AnyMachineSnapshot],
        });
      }
    }
    for (const p of shortest) for (const n of (p.state as AnyMachineSnapshot)._nodes) graphStates.add(n.id);
    expect(missing(states, graphStates)).toEqual([]);

    const covered = { states: new Set<string>(), transitions: new Set<string>() };
    const runs = [
      ...shortest.map((p) => ({ events: eventsOf(p), states: p.steps.slice(1).map((s) => s.state as AnyMachineSnapshot) })),
      ...edgePaths,
    ];
    for (const run of runs) {
      const r = replay(run.events, run.states);
      r.states.forEach((s) => covered.states.add(s));
      r.transitions.forEach((t) => covered.transitions.add(t));

      // outputs / emitted events agree with where the path ended
      const value = r.final.value as string;
      const forwards = r.emitted.filter((e) => e.type === 'troupe.handoff.forward');
      const resumes = r.emitted.filter((e) => e.type === 'troupe.handoff.resume');
      expect(forwards).toHaveLength(r.final.context.turns);
      for (const f of forwards) {
        expect(f).toMatchObject({ targetAgentId: 'billing', threadId: 'th-1', recentMessageCount: 3, contextSummary: request.contextSummary });
      }
      if (r.final.status === 'done') {
        const out = r.final.output as HandoffOutput;
        expect(out.status).toBe(value);
        expect(canStartHandoff(r.final)).toBe(true);
        if (value === 'completed') {
          expect(resumes).toEqual([
            {
              type: 'troupe.handoff.resume',
              threadId: 'th-1',
              sourceAgentId: 'triage',
              targetAgentId: 'billing',
              returnExpected: true,
              completionStatus: 'completed',
              resultSummary: 'refund issued',
              artifactsCreated: ['refund-42'],
            },
          ]);
          expect(out).toMatchObject({ completionStatus: 'completed', resultSummary: 'refund issued', artifactsCreated: ['refund-42'] });
        } else {
          expect(resumes).toEqual([]);
        }
        if (value === 'rejected') expect(out).toMatchObject({ rejectionReason: 'no capacity', turns: 0 });
        if (value === 'error') expect(['AGENT_TIMEOUT', 'AGENT_ERROR']).toContain(out.error?.code);
      } else {
        expect(canStartHandoff(r.final)).toBe(false);
      }
    }
    expect(missing(states, covered.states)).toEqual([]);
    expect(missing(transitions, covered.transitions)).toEqual([]);
  });

  it('is fully named: every action, guard and delay in the config is a string reference to setup', () => {
    const json = JSON.stringify(handoffMachine.config);
    const impl = handoffMachine.implementations;
    for (const name of ['recordNow', 'recordAcceptance', 'recordRejection', 'recordUserMessage', 'forwardToTarget', 'recordReturn', 'emitResume', 'markCompleted', 'recordCancel', 'recordFailure', 'recordTimeout']) {
      expect(json).toContain(`"${name}"`);
      expect(impl.actions).toHaveProperty(name);
    }
    expect(impl.delays).toHaveProperty('handoffDeadline');
    expect(impl.guards).toHaveProperty('isNewUserMessage');
    // No inline functions survive JSON serialisation except `context` and `output`.
    const fnKeys: string[] = [];
    const visit = (o: unknown, path: string) => {
      if (typeof o === 'function') fnKeys.push(path);
      else if (o && typeof o === 'object') for (const [k, v] of Object.entries(o)) visit(v, `${path}.${k}`);
    };
    visit(handoffMachine.config, 'config');
    expect(fnKeys.sort()).toEqual(['config.context', 'config.output']);
  });
});

/* ---------------------------------------------------------------------------------------------- */
/* behaviour                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

describe('handoff machine: behaviour', () => {
  it('runs a full handoff: accept, forward user messages (once each), return, resume the source', () => {
    const { actor, emitted } = start();
    expect(actor.getSnapshot().value).toBe('pending');
    actor.send({ type: 'troupe.handoff.userMessage', message: userMsg('early') });
    expect(emitted).toEqual([]); // nothing is forwarded before the target accepts

    actor.send({ type: 'troupe.handoff.accepted', now: T0 + 10, estimatedDurationSeconds: 120 });
    expect(actor.getSnapshot().value).toBe('active');
    expect(actor.getSnapshot().context).toMatchObject({ acceptedAt: T0 + 10, estimatedDurationSeconds: 120 });

    actor.send({ type: 'troupe.handoff.userMessage', message: userMsg('m1', 'where is my refund?'), now: T0 + 20 });
    actor.send({ type: 'troupe.handoff.userMessage', message: userMsg('m1', 'where is my refund?'), now: T0 + 21 }); // redelivery
    actor.send({ type: 'troupe.handoff.userMessage', message: userMsg('m2'), now: T0 + 30 });
    expect(emitted.map((e) => e.type)).toEqual(['troupe.handoff.forward', 'troupe.handoff.forward']);
    expect(emitted[0]).toEqual({
      type: 'troupe.handoff.forward',
      threadId: 'th-1',
      targetAgentId: 'billing',
      message: userMsg('m1', 'where is my refund?'),
      recentMessageCount: 3,
      contextSummary: request.contextSummary,
      handoffReason: request.handoffReason,
      turn: 1,
    });
    expect(actor.getSnapshot().context).toMatchObject({ turns: 2, lastMessageId: 'm2', now: T0 + 30 });
    expect(canStartHandoff(actor.getSnapshot())).toBe(false);

    actor.send({ type: 'troupe.handoff.returned', result: { completionStatus: 'completed', resultSummary: 'refund sent', artifactsCreated: [] }, now: T0 + 40 });
    const snap = actor.getSnapshot();
    expect(snap.value).toBe('completed');
    expect(snap.status).toBe('done');
    expect(emitted[2]).toMatchObject({ type: 'troupe.handoff.resume', sourceAgentId: 'triage', resultSummary: 'refund sent', completionStatus: 'completed' });
    expect(snap.output).toEqual({ status: 'completed', completionStatus: 'completed', resultSummary: 'refund sent', artifactsCreated: [], turns: 2 });
  });

  it('a rejected handoff ends in `rejected` and control stays with the source', () => {
    const { actor, emitted } = start();
    // The target's first reply says no.
    const reply = withHandoffAccept(agentMsg('r1', 'I cannot take this'), { accepted: false, rejectionReason: 'out of office' });
    const events = handoffEventsForTargetReply(reply, 'pending', T0 + 5);
    expect(events).toEqual([{ type: 'troupe.handoff.rejected', now: T0 + 5, rejectionReason: 'out of office' }]);
    for (const e of events) actor.send(e);

    const snap = actor.getSnapshot();
    expect(snap.value).toBe('rejected');
    expect(snap.output).toEqual({ status: 'rejected', rejectionReason: 'out of office', artifactsCreated: [], turns: 0 });
    // No message ever went to the target and nobody needs to "resume": the source never lost control.
    expect(snap.can({ type: 'troupe.handoff.userMessage', message: userMsg('after') })).toBe(false);
    expect(emitted).toEqual([]);
    expect(canStartHandoff(snap)).toBe(true);
  });

  it('maps the target reply: no handoffAccept means accepted; a handoffReturn in the same reply returns at once', () => {
    expect(handoffEventsForTargetReply(agentMsg('r'), 'pending', 7)).toEqual([{ type: 'troupe.handoff.accepted', now: 7 }]);
    const oneShot = withHandoffReturn(withHandoffAccept(agentMsg('r'), { accepted: true, estimatedDurationSeconds: 1 }), {
      completionStatus: 'completed',
      resultSummary: 'done',
    });
    const events = handoffEventsForTargetReply(oneShot, 'pending', 8);
    expect(events).toEqual([
      { type: 'troupe.handoff.accepted', now: 8, estimatedDurationSeconds: 1 },
      { type: 'troupe.handoff.returned', now: 8, result: { completionStatus: 'completed', resultSummary: 'done', artifactsCreated: [] } },
    ]);
    const { actor, emitted } = start();
    for (const e of events) actor.send(e);
    expect(actor.getSnapshot().value).toBe('completed');
    expect(emitted.map((e) => e.type)).toEqual(['troupe.handoff.resume']);
    // in `active`, handoffAccept is not looked at
    expect(handoffEventsForTargetReply(agentMsg('x'), 'active', 9)).toEqual([]);
    expect(() => handoffEventsForTargetReply(agentMsg('x', 'x', { [CLIENT_ROUTING_URI]: { handoffReturn: { completionStatus: 'maybe' } } }), 'active', 9)).toThrow(TroupeError);
  });

  it('fails with AGENT_TIMEOUT when the deadline passes while active (the deadline is absolute)', () => {
    vi.useFakeTimers();
    const { actor } = start({ maxDurationMs: 5_000 });
    vi.advanceTimersByTime(1_000);
    actor.send({ type: 'troupe.handoff.accepted', now: T0 + 1_000 });
    // accepting re-arms the timer with the remaining 4 s, not a fresh 5 s
    vi.advanceTimersByTime(3_999);
    expect(actor.getSnapshot().value).toBe('active');
    vi.advanceTimersByTime(1);
    const snap = actor.getSnapshot();
    expect(snap.value).toBe('error');
    expect(snap.output).toEqual({
      status: 'error',
      error: { code: 'AGENT_TIMEOUT', message: 'the handoff to "billing" did not finish within 5000 ms' },
      artifactsCreated: [],
      turns: 0,
    });
    expect(snap.context.now).toBe(T0 + 5_000);
  });

  it('fails with AGENT_TIMEOUT when the target never answers the request', () => {
    vi.useFakeTimers();
    const { actor } = start({ maxDurationMs: 2_000 });
    vi.advanceTimersByTime(2_000);
    expect(actor.getSnapshot().value).toBe('error');
    expect((actor.getSnapshot().output as HandoffOutput).error?.code).toBe('AGENT_TIMEOUT');
  });

  it('cancel and failed end the handoff from pending and active', () => {
    const a = start().actor;
    a.send({ type: 'troupe.handoff.cancel', reason: 'user said stop' });
    expect(a.getSnapshot().output).toMatchObject({ status: 'cancelled' });
    expect(a.getSnapshot().context.cancelReason).toBe('user said stop');

    const b = start().actor;
    b.send({ type: 'troupe.handoff.accepted', now: T0 });
    b.send(handoffFailedEvent({ code: 'AGENT_NOT_FOUND', message: 'billing is gone' }, T0 + 3));
    expect(b.getSnapshot().output).toMatchObject({ status: 'error', error: { code: 'AGENT_NOT_FOUND', message: 'billing is gone' } });

    const c = start().actor;
    c.send(handoffFailedEvent(new Error('socket hang up')));
    expect(c.getSnapshot().output).toMatchObject({ status: 'error', error: { code: 'AGENT_ERROR', message: 'socket hang up' } });
  });

  it('a restored active handoff stays active, keeps its turns and still enforces the remaining deadline', () => {
    vi.useFakeTimers();
    const { actor } = start({ maxDurationMs: 10_000 });
    actor.send({ type: 'troupe.handoff.accepted', now: T0 + 1_000 });
    actor.send({ type: 'troupe.handoff.userMessage', message: userMsg('m1'), now: T0 + 2_000 });
    const persisted = JSON.parse(JSON.stringify(actor.getPersistedSnapshot()));
    actor.stop(); // the node dies; its timers die with it

    // 3 s later another node rehydrates the thread.
    vi.advanceTimersByTime(3_000);
    const emitted: HandoffEmitted[] = [];
    const restored = createActor(handoffMachine, { snapshot: persisted, input: { request, now: 0, maxDurationMs: 1 } });
    restored.on('*', (e) => emitted.push(e));
    restored.start();
    expect(restored.getSnapshot().value).toBe('active');
    expect(restored.getSnapshot().context).toMatchObject({ turns: 1, lastMessageId: 'm1', deadline: T0 + 10_000 });
    expect(canStartHandoff(restored.getSnapshot())).toBe(false);

    // The host tells it the time: the timer is re-armed for the remaining 5 s (deadline T0+10s, now T0+5s).
    restored.send({ type: 'troupe.handoff.tick', now: T0 + 5_000 });
    // A redelivered message is not forwarded twice; a new one is.
    restored.send({ type: 'troupe.handoff.userMessage', message: userMsg('m1') });
    restored.send({ type: 'troupe.handoff.userMessage', message: userMsg('m2') });
    expect(emitted.map((e) => (e.type === 'troupe.handoff.forward' ? e.message.messageId : e.type))).toEqual(['m2']);

    vi.advanceTimersByTime(4_999);
    expect(restored.getSnapshot().value).toBe('active');
    vi.advanceTimersByTime(1);
    expect(restored.getSnapshot().value).toBe('error');
    expect((restored.getSnapshot().output as HandoffOutput).error?.code).toBe('AGENT_TIMEOUT');
  });

  it('a restored handoff whose deadline already passed fails on the first tick', () => {
    vi.useFakeTimers();
    const { actor } = start({ maxDurationMs: 1_000 });
    actor.send({ type: 'troupe.handoff.accepted', now: T0 + 100 });
    const persisted = actor.getPersistedSnapshot();
    actor.stop();
    const restored = createActor(handoffMachine, { snapshot: persisted, input: INPUT });
    restored.start();
    restored.send({ type: 'troupe.handoff.tick', now: T0 + 5_000 });
    vi.advanceTimersByTime(0);
    expect(restored.getSnapshot().value).toBe('error');
  });

  it('canStartHandoff / assertCanStartHandoff: one active handoff per thread (HANDOFF_CONFLICT)', () => {
    expect(canStartHandoff(undefined)).toBe(true);
    expect(canStartHandoff(null)).toBe(true);
    expect(canStartHandoff('pending')).toBe(false);
    expect(canStartHandoff('active')).toBe(false);
    expect(canStartHandoff('returning')).toBe(false);
    for (const v of ['completed', 'rejected', 'cancelled', 'error']) expect(canStartHandoff(v)).toBe(true);

    const { actor } = start();
    expect(canStartHandoff(actor.getSnapshot())).toBe(false);
    // what a thread keeps in its store: the persisted snapshot
    expect(canStartHandoff(actor.getPersistedSnapshot())).toBe(false);
    expect(canStartHandoff(JSON.parse(JSON.stringify(actor.getPersistedSnapshot())))).toBe(false);
    let err: unknown;
    try {
      assertCanStartHandoff(actor.getSnapshot(), 'th-1');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TroupeError);
    expect((err as TroupeError).code).toBe('HANDOFF_CONFLICT');
    expect((err as TroupeError).details).toEqual({ threadId: 'th-1' });

    actor.send({ type: 'troupe.handoff.cancel' });
    expect(() => assertCanStartHandoff(actor.getSnapshot())).not.toThrow();
    expect(canStartHandoff(actor.getPersistedSnapshot())).toBe(true);
    // a passivated (stopped) actor whose handoff is still open still blocks
    const open = start().actor;
    open.stop();
    expect(open.getSnapshot().status).toBe('stopped');
    expect(canStartHandoff(open.getSnapshot())).toBe(false);
    expect(canStartHandoff({ pending: 'x' })).toBe(false);
  });
});

/* ---------------------------------------------------------------------------------------------- */
/* wire schemas                                                                                     */
/* ---------------------------------------------------------------------------------------------- */

describe('handoff wire schemas', () => {
  it('HandoffRequest applies defaults and enforces limits', () => {
    const r = HandoffRequestSchema.parse({
      threadId: 't',
      tenantId: 'acme',
      userId: 'u',
      sourceAgentId: 'a',
      targetAgentId: 'b',
      contextSummary: 'c',
      handoffReason: 'r',
    });
    expect(r).toMatchObject({ recentMessageCount: 5, preserveState: true, returnExpected: true });
    const base = { threadId: 't', tenantId: 'acme', userId: 'u', sourceAgentId: 'a', targetAgentId: 'b', contextSummary: 'c', handoffReason: 'r' };
    expect(HandoffRequestSchema.safeParse({ ...base, contextSummary: '' }).success).toBe(false);
    expect(HandoffRequestSchema.safeParse({ ...base, contextSummary: 'x'.repeat(2001) }).success).toBe(false);
    expect(HandoffRequestSchema.safeParse({ ...base, handoffReason: 'x'.repeat(501) }).success).toBe(false);
    expect(HandoffRequestSchema.safeParse({ ...base, recentMessageCount: 21 }).success).toBe(false);
    expect(HandoffRequestSchema.safeParse({ ...base, recentMessageCount: 1.5 }).success).toBe(false);
    expect(HandoffRequestSchema.safeParse({ ...base, targetAgentId: 'a' }).success).toBe(false); // to itself
    expect(HandoffRequestSchema.safeParse({ ...base, metadata: { k: 1 } }).success).toBe(true);
    expect(HandoffAcceptSchema.parse({ accepted: false, rejectionReason: 'busy' })).toEqual({ accepted: false, rejectionReason: 'busy' });
    expect(HandoffReturnSchema.parse({ completionStatus: 'cancelled' })).toEqual({ completionStatus: 'cancelled', artifactsCreated: [] });
    expect(HandoffReturnSchema.safeParse({ completionStatus: 'done' }).success).toBe(false);
    // exported from the protocol barrel
    expect(protocol.HandoffRequestSchema).toBe(HandoffRequestSchema);
    expect(protocol.readHandoffDirective).toBe(readHandoffDirective);
  });

  it('readHandoffDirective: undefined, the parsed directive, or EXTENSION_PARSE_ERROR', () => {
    expect(readHandoffDirective(agentMsg('a'))).toBeUndefined();
    expect(readHandoffDirective(agentMsg('a', 'a', { [CLIENT_ROUTING_URI]: { recipient: 'user' } }))).toBeUndefined();

    const directive = { targetAgentId: 'billing', contextSummary: 'refund for order 42', handoffReason: 'billing topic', returnExpected: false };
    const reply = withHandoffDirective(agentMsg('a', 'passing you to billing', { [CLIENT_ROUTING_URI]: { recipient: 'user', reason: 'x' } }), directive);
    expect(reply.extensions).toContain(CLIENT_ROUTING_URI);
    expect(reply.metadata?.[CLIENT_ROUTING_URI]).toEqual({ recipient: 'user', reason: 'x', handoff: directive });
    expect(readHandoffDirective(reply)).toEqual(directive);
    expect(HandoffDirectiveSchema.parse(directive)).toEqual(directive);

    const bad = agentMsg('b', 'b', { [CLIENT_ROUTING_URI]: { handoff: { targetAgentId: 'bad id!', contextSummary: '', handoffReason: 'r' } } });
    expect(() => readHandoffDirective(bad)).toThrow(TroupeError);
    try {
      readHandoffDirective(bad);
    } catch (e) {
      expect((e as TroupeError).code).toBe('EXTENSION_PARSE_ERROR');
      expect((e as TroupeError).message).toContain('handoff');
    }
    expect(() => readHandoffDirective(agentMsg('c', 'c', { [CLIENT_ROUTING_URI]: 'nope' }))).toThrow(/not an object/);
  });

  it('readHandoffReturn / readHandoffAccept / readHandoffRequest round-trip their builders', () => {
    expect(readHandoffReturn(agentMsg('a'))).toBeUndefined();
    const ret = withHandoffReturn(agentMsg('a'), { completionStatus: 'completed', resultSummary: 'ok', artifactsCreated: ['x'] });
    expect(readHandoffReturn(ret)).toEqual({ completionStatus: 'completed', resultSummary: 'ok', artifactsCreated: ['x'] });
    expect(() => readHandoffReturn(agentMsg('a', 'a', { [CLIENT_ROUTING_URI]: { handoffReturn: { completionStatus: 'nah' } } }))).toThrow(
      expect.objectContaining({ code: 'EXTENSION_PARSE_ERROR' }),
    );
    expect(readHandoffAccept(withHandoffAccept(agentMsg('a'), { accepted: true }))).toEqual({ accepted: true });
    expect(readHandoffRequest(withHandoffRequest(userMsg('u'), request))).toEqual(request);
  });

  it('handoffRequestFromDirective fills in the thread fields and validates', () => {
    const r = handoffRequestFromDirective(
      { targetAgentId: 'billing', contextSummary: 'c', handoffReason: 'r', recentMessageCount: 8 },
      { threadId: 't', tenantId: 'acme', userId: 'u', sourceAgentId: 'triage' },
    );
    expect(r).toEqual({
      threadId: 't',
      tenantId: 'acme',
      userId: 'u',
      sourceAgentId: 'triage',
      targetAgentId: 'billing',
      contextSummary: 'c',
      handoffReason: 'r',
      recentMessageCount: 8,
      preserveState: true,
      returnExpected: true,
    });
    expect(() =>
      handoffRequestFromDirective({ targetAgentId: 'triage', contextSummary: 'c', handoffReason: 'r' }, { threadId: 't', tenantId: 'a', userId: 'u', sourceAgentId: 'triage' }),
    ).toThrow(expect.objectContaining({ code: 'INVALID_MESSAGE' }));
  });
});
