import { afterEach, describe, expect, it, vi } from 'vitest';
import { createActor, getMicrosteps, type AnyMachineSnapshot, type AnyStateMachine, type EventObject } from 'xstate';
import { getAdjacencyMap, getShortestPaths, type StatePath } from 'xstate/graph';
import { CoverageRecorder, activeStateIds, definedStates, definedTransitions, missing } from './helpers/machine-coverage.js';
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
  endsHandoff,
  handoffEventsForTargetReply,
  handoffFailedEvent,
  handoffMachine,
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
  const actor = createActor(handoffMachine, { input: { request, now: T0, maxDurationMs: 60_000, ...input } });
  actor.start();
  return { actor };
}

/** An open handoff (not ended): what a thread holds while its target has the conversation. */
const isOpen = (snap: HandoffSnapshot) => snap.status === 'active' && ['pending', 'active'].includes(snap.value as string);

afterEach(() => {
  vi.useRealTimers();
});

/* ---------------------------------------------------------------------------------------------- */
/* model-based coverage                                                                             */
/* ---------------------------------------------------------------------------------------------- */

const eventsOf = <E extends EventObject>(path: StatePath<AnyMachineSnapshot, E>): E[] => path.steps.map((s) => s.event).filter((e) => e.type !== 'xstate.init');

const INPUT: HandoffInput = { request, now: T0, maxDurationMs: 60_000 };
const AFTER_PENDING = 'xstate.after.handoffDeadline.handoff.pending';
const AFTER_ACTIVE = 'xstate.after.handoffDeadline.handoff.active';

// The deadline events are what the machine's own `after` timers raise.
const SAMPLE_EVENTS: HandoffEvent[] = [
  { type: 'troupe.handoff.accepted', now: T0 + 100, estimatedDurationSeconds: 30 },
  { type: 'troupe.handoff.rejected', now: T0 + 100, rejectionReason: 'no capacity' },
  { type: 'troupe.handoff.userMessage', message: userMsg('m1'), now: T0 + 200 },
  { type: 'troupe.handoff.userMessage', message: userMsg('m2'), now: T0 + 300 },
  {
    type: 'troupe.handoff.returned',
    result: { completionStatus: 'completed', resultSummary: 'refund issued', artifactsCreated: ['refund-42'] },
    now: T0 + 400,
  },
  { type: 'troupe.handoff.returned', result: { completionStatus: 'error', resultSummary: 'could not refund', artifactsCreated: [] }, now: T0 + 400 },
  { type: 'troupe.handoff.returned', result: { completionStatus: 'cancelled', resultSummary: 'the user gave up', artifactsCreated: [] }, now: T0 + 400 },
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
  filterEvents: (snap: HandoffSnapshot, e: HandoffEvent) => snap.status === 'active' && !(e.type === 'troupe.handoff.userMessage' && snap.context.turns >= 2),
};

interface Replay {
  final: HandoffSnapshot;
}

/** Replays a path on a real actor (fake timers fire the deadline) and checks every step against the model. */
function replay(events: EventObject[], expected: AnyMachineSnapshot[], recorder: CoverageRecorder): Replay {
  vi.useFakeTimers();
  const actor = createActor(handoffMachine, { input: INPUT, inspect: recorder.inspect });
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
  const final = actor.getSnapshot();
  actor.stop();
  vi.useRealTimers();
  return { final };
}

describe('handoff machine: model-based', () => {
  it('every state is reached and every transition fires on real actors; outputs match the final state', () => {
    const states = definedStates(handoffMachine);
    // A return ends the handoff the way the target says.
    expect([...definedTransitions(handoffMachine)].filter((k) => k.startsWith('handoff.returning'))).toEqual([
      'handoff.returning --always--> handoff.completed [returnedCompleted]',
      'handoff.returning --always--> handoff.cancelled [returnedCancelled]',
      'handoff.returning --always--> handoff.error',
    ]);
    // Sanity: the model's own view of itself.
    expect([...states].sort()).toEqual(
      [
        'handoff',
        'handoff.active',
        'handoff.cancelled',
        'handoff.completed',
        'handoff.error',
        'handoff.pending',
        'handoff.rejected',
        'handoff.returning',
      ].sort(),
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
          for (const id of activeStateIds(handoffMachine as unknown as AnyStateMachine, (micro as AnyMachineSnapshot).value)) graphStates.add(id);
        }
        edgePaths.push({
          events: [...eventsOf(head!), event],
          states: [...head!.steps.slice(1).map((s) => s.state), state as AnyMachineSnapshot],
        });
      }
    }
    for (const p of shortest) for (const id of activeStateIds(handoffMachine as unknown as AnyStateMachine, p.state.value)) graphStates.add(id);
    expect(missing(states, graphStates)).toEqual([]);

    const recorder = new CoverageRecorder();
    const runs = [...shortest.map((p) => ({ events: eventsOf(p), states: p.steps.slice(1).map((s) => s.state as AnyMachineSnapshot) })), ...edgePaths];
    for (const run of runs) {
      const r = replay(run.events, run.states, recorder);
      // Outputs agree with where the path ended.
      const value = r.final.value as string;
      if (r.final.status === 'done') {
        const out = r.final.output as HandoffOutput;
        expect(out.status).toBe(value);
        expect(out.returnsToSource).toBe(value !== 'rejected'); // the request expects a return
        if (value === 'rejected') {
          expect(out).toMatchObject({ rejectionReason: 'no capacity', turns: 0 });
          expect(out.handoffReturn).toBeUndefined();
        } else expect(out.handoffReturn?.completionStatus).toBe(value === 'completed' ? 'completed' : value);
        if (value === 'completed')
          expect(out.handoffReturn).toEqual({ completionStatus: 'completed', resultSummary: 'refund issued', artifactsCreated: ['refund-42'] });
        if (value === 'error') expect(['AGENT_TIMEOUT', 'AGENT_ERROR']).toContain(out.error?.code);
      } else {
        expect(isOpen(r.final)).toBe(true);
      }
    }
    expect(recorder.missingOf(handoffMachine as unknown as AnyStateMachine)).toEqual({ states: [], transitions: [] });
  });

  it('is fully named: every action, guard and delay in the config is a string reference to setup', () => {
    const json = JSON.stringify(handoffMachine.config);
    const impl = handoffMachine.implementations;
    for (const name of [
      'recordNow',
      'recordAcceptance',
      'recordRejection',
      'recordUserMessage',
      'recordReturn',
      'markCompleted',
      'markCancelled',
      'markReturnedError',
      'recordCancel',
      'recordFailure',
      'recordTimeout',
    ]) {
      expect(json).toContain(`"${name}"`);
      expect(impl.actions).toHaveProperty(name);
    }
    expect(impl.delays).toHaveProperty('handoffDeadline');
    expect(impl.guards).toHaveProperty('isNewUserMessage');
    expect(impl.guards).toHaveProperty('returnedCompleted');
    expect(impl.guards).toHaveProperty('returnedCancelled');
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
  it('runs a full handoff: accept, count user messages (once each), return; the output gives control back with the result', () => {
    const { actor } = start();
    expect(actor.getSnapshot().value).toBe('pending');
    actor.send({ type: 'troupe.handoff.userMessage', message: userMsg('early') });
    expect(actor.getSnapshot().context.turns).toBe(0); // the target has not taken over yet

    actor.send({ type: 'troupe.handoff.accepted', now: T0 + 10, estimatedDurationSeconds: 120 });
    expect(actor.getSnapshot().value).toBe('active');
    expect(actor.getSnapshot().context).toMatchObject({ acceptedAt: T0 + 10, estimatedDurationSeconds: 120 });

    actor.send({ type: 'troupe.handoff.userMessage', message: userMsg('m1', 'where is my refund?'), now: T0 + 20 });
    actor.send({ type: 'troupe.handoff.userMessage', message: userMsg('m1', 'where is my refund?'), now: T0 + 21 }); // redelivery
    actor.send({ type: 'troupe.handoff.userMessage', message: userMsg('m2'), now: T0 + 30 });
    expect(actor.getSnapshot().context).toMatchObject({ turns: 2, lastMessageId: 'm2', now: T0 + 30 });
    expect(isOpen(actor.getSnapshot())).toBe(true);

    actor.send({
      type: 'troupe.handoff.returned',
      result: { completionStatus: 'completed', resultSummary: 'refund sent', artifactsCreated: ['refund-42'] },
      now: T0 + 40,
    });
    const snap = actor.getSnapshot();
    expect(snap.value).toBe('completed');
    expect(snap.status).toBe('done');
    expect(snap.output).toEqual({
      status: 'completed',
      returnsToSource: true,
      handoffReturn: { completionStatus: 'completed', resultSummary: 'refund sent', artifactsCreated: ['refund-42'] },
      turns: 2,
    });
  });

  it('a target that returns with completionStatus error ends the handoff in error; cancelled in cancelled', () => {
    const failed = start().actor;
    failed.send({ type: 'troupe.handoff.accepted', now: T0 });
    failed.send({ type: 'troupe.handoff.returned', result: { completionStatus: 'error', resultSummary: 'the refund system is down', artifactsCreated: [] } });
    expect(failed.getSnapshot().value).toBe('error');
    expect(failed.getSnapshot().output).toEqual({
      status: 'error',
      returnsToSource: true,
      handoffReturn: { completionStatus: 'error', resultSummary: 'the refund system is down', artifactsCreated: [] },
      error: { code: 'AGENT_ERROR', message: 'the refund system is down' },
      turns: 0,
    });
    const gaveUp = start().actor;
    gaveUp.send({ type: 'troupe.handoff.accepted', now: T0 });
    gaveUp.send({ type: 'troupe.handoff.returned', result: { completionStatus: 'cancelled', artifactsCreated: [] } });
    expect(gaveUp.getSnapshot().output).toMatchObject({ status: 'cancelled', returnsToSource: true, handoffReturn: { completionStatus: 'cancelled' } });
  });

  it('returnExpected: false — however it ends, control does not go back to the source', () => {
    const oneWay = HandoffRequestSchema.parse({ ...request, returnExpected: false });
    const returned = start({ request: oneWay }).actor;
    returned.send({ type: 'troupe.handoff.accepted', now: T0 });
    returned.send({ type: 'troupe.handoff.returned', result: { completionStatus: 'completed', artifactsCreated: [] } });
    expect(returned.getSnapshot().output).toMatchObject({ status: 'completed', returnsToSource: false });
    const cancelled = start({ request: oneWay }).actor;
    cancelled.send({ type: 'troupe.handoff.cancel' });
    expect(cancelled.getSnapshot().output).toMatchObject({ status: 'cancelled', returnsToSource: false });
  });

  it('a rejected handoff ends in `rejected` and control stays with the source', () => {
    const { actor } = start();
    // The target's first reply says no.
    const reply = withHandoffAccept(agentMsg('r1', 'I cannot take this'), { accepted: false, rejectionReason: 'out of office' });
    const events = handoffEventsForTargetReply(reply, 'pending', T0 + 5);
    expect(events).toEqual([{ type: 'troupe.handoff.rejected', now: T0 + 5, rejectionReason: 'out of office' }]);
    expect(events.map(endsHandoff)).toEqual([true]);
    for (const e of events) actor.send(e);

    const snap = actor.getSnapshot();
    expect(snap.value).toBe('rejected');
    // Nobody needs to "resume": the source never lost control.
    expect(snap.output).toEqual({ status: 'rejected', returnsToSource: false, rejectionReason: 'out of office', turns: 0 });
    expect(snap.can({ type: 'troupe.handoff.userMessage', message: userMsg('after') })).toBe(false);
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
    expect(events.map(endsHandoff)).toEqual([false, true]);
    const { actor } = start();
    for (const e of events) actor.send(e);
    expect(actor.getSnapshot().value).toBe('completed');
    // in `active`, handoffAccept is not looked at
    expect(handoffEventsForTargetReply(agentMsg('x'), 'active', 9)).toEqual([]);
    expect(() =>
      handoffEventsForTargetReply(agentMsg('x', 'x', { [CLIENT_ROUTING_URI]: { handoffReturn: { completionStatus: 'maybe' } } }), 'active', 9),
    ).toThrow(TroupeError);
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
      returnsToSource: true,
      error: { code: 'AGENT_TIMEOUT', message: 'the handoff to "billing" did not finish within 5000 ms' },
      handoffReturn: {
        completionStatus: 'error',
        resultSummary: 'AGENT_TIMEOUT: the handoff to "billing" did not finish within 5000 ms',
        artifactsCreated: [],
      },
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
    // The source is told why it has the conversation back.
    expect(a.getSnapshot().output).toMatchObject({
      status: 'cancelled',
      returnsToSource: true,
      handoffReturn: { completionStatus: 'cancelled', resultSummary: 'user said stop', artifactsCreated: [] },
    });
    expect(a.getSnapshot().context.cancelReason).toBe('user said stop');

    const b = start().actor;
    b.send({ type: 'troupe.handoff.accepted', now: T0 });
    b.send(handoffFailedEvent({ code: 'AGENT_NOT_FOUND', message: 'billing is gone' }, T0 + 3));
    expect(b.getSnapshot().output).toMatchObject({
      status: 'error',
      returnsToSource: true,
      error: { code: 'AGENT_NOT_FOUND', message: 'billing is gone' },
      handoffReturn: { completionStatus: 'error', resultSummary: 'AGENT_NOT_FOUND: billing is gone', artifactsCreated: [] },
    });

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
    const restored = createActor(handoffMachine, { snapshot: persisted, input: { request, now: 0, maxDurationMs: 1 } });
    restored.start();
    expect(restored.getSnapshot().value).toBe('active');
    expect(restored.getSnapshot().context).toMatchObject({ turns: 1, lastMessageId: 'm1', deadline: T0 + 10_000 });
    expect(isOpen(restored.getSnapshot())).toBe(true);

    // The host tells it the time: the timer is re-armed for the remaining 5 s (deadline T0+10s, now T0+5s).
    restored.send({ type: 'troupe.handoff.tick', now: T0 + 5_000 });
    // A redelivered message is not counted twice; a new one is.
    restored.send({ type: 'troupe.handoff.userMessage', message: userMsg('m1') });
    restored.send({ type: 'troupe.handoff.userMessage', message: userMsg('m2') });
    expect(restored.getSnapshot().context).toMatchObject({ turns: 2, lastMessageId: 'm2' });

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
      handoffRequestFromDirective(
        { targetAgentId: 'triage', contextSummary: 'c', handoffReason: 'r' },
        { threadId: 't', tenantId: 'a', userId: 'u', sourceAgentId: 'triage' },
      ),
    ).toThrow(expect.objectContaining({ code: 'INVALID_MESSAGE' }));
  });
});
