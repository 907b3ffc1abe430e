/**
 * The agent process machine (src/machines/agent.ts): model-based. Paths over its events come from its
 * graph (xstate/graph), each is replayed on a real actor, every step's state and counters are checked
 * against a plain model of the lifecycle and of the counters the host reports, and every state and
 * transition is reached.
 */
import { describe, expect, it } from 'vitest';
import { createActor, type AnyStateMachine } from 'xstate';
import { getShortestPaths, getSimplePaths } from 'xstate/graph';
import { CoverageRecorder, definedStates, definedTransitions } from './helpers/machine-coverage.js';
import { agentMachine, type AgentActorEvent } from '../src/machines/agent.js';

const EVENTS: AgentActorEvent[] = [
  { type: 'troupe.agent.joined' },
  { type: 'troupe.agent.received', messageId: 'm1', threadId: 't1', inFlight: 1, handled: 0, failed: 0 },
  { type: 'troupe.agent.received', messageId: 'm2', threadId: 't2', inFlight: 2, handled: 0, failed: 0 },
  { type: 'troupe.agent.answered', messageId: 'm1', inFlight: 1, handled: 1, failed: 0 },
  { type: 'troupe.agent.answered', messageId: 'm2', inFlight: 0, handled: 2, failed: 0 },
  { type: 'troupe.agent.failed', messageId: 'm1', inFlight: 1, handled: 0, failed: 1 },
  { type: 'troupe.agent.failed', messageId: 'm2', inFlight: 0, handled: 1, failed: 1 },
  { type: 'troupe.agent.counted', inFlight: 0, handled: 3, failed: 1 },
  { type: 'troupe.agent.counted', inFlight: 2, handled: 3, failed: 1 },
  { type: 'troupe.agent.leave' },
  { type: 'troupe.agent.left' },
];

type AgentSnapshot = ReturnType<ReturnType<typeof createActor<typeof agentMachine>>['getSnapshot']>;

const traversal = {
  input: { agentId: 'echo' },
  events: EVENTS,
  // A stopped agent takes nothing. The counters come from the events, so the state and the count in
  // flight are enough to tell the machine's states apart (and keep the simple paths few).
  filterEvents: (snap: AgentSnapshot) => snap.status === 'active',
  serializeState: (snap: AgentSnapshot) => JSON.stringify([snap.value, snap.context.inFlight]),
};

/**
 * What the agent should show after a sequence of events, computed without the machine: the lifecycle, and
 * the counters of the last event it takes (the host counts; the machine shows what it was told).
 */
function expected(events: AgentActorEvent[]) {
  let phase: 'starting' | 'idle' | 'busy' | 'stopping' | 'stopped' = 'starting';
  let counters = { inFlight: 0, handled: 0, failed: 0 };
  let lastMessageId: string | undefined;
  const take = (e: { inFlight: number; handled: number; failed: number }) => {
    counters = { inFlight: e.inFlight, handled: e.handled, failed: e.failed };
  };
  for (const e of events) {
    if (phase === 'starting' && e.type === 'troupe.agent.joined') phase = 'idle';
    else if ((phase === 'idle' || phase === 'busy') && e.type === 'troupe.agent.received') {
      take(e);
      lastMessageId = e.messageId;
      phase = 'busy';
    } else if (phase === 'busy' && (e.type === 'troupe.agent.answered' || e.type === 'troupe.agent.failed')) {
      take(e);
      if (e.inFlight <= 0) phase = 'idle';
    } else if ((phase === 'idle' || phase === 'busy') && e.type === 'troupe.agent.counted') {
      take(e);
      phase = e.inFlight > 0 ? 'busy' : 'idle';
    } else if (phase === 'stopping' && (e.type === 'troupe.agent.answered' || e.type === 'troupe.agent.failed' || e.type === 'troupe.agent.counted')) take(e);
    else if ((phase === 'idle' || phase === 'busy') && e.type === 'troupe.agent.leave') phase = 'stopping';
    else if (phase === 'stopping' && e.type === 'troupe.agent.left') phase = 'stopped';
  }
  const value = phase === 'idle' || phase === 'busy' ? { ready: phase } : phase;
  return { value, ...counters, lastMessageId };
}

describe('agent machine: model-based', () => {
  it('every state and transition is reached on real actors, and every step agrees with the model of what is in flight', () => {
    const machine = agentMachine as unknown as AnyStateMachine;
    const recorder = new CoverageRecorder();
    const eventsOf = (path: { steps: Array<{ event: unknown }> }) =>
      path.steps.map((s) => s.event as AgentActorEvent).filter((e) => (e.type as string) !== 'xstate.init');
    const shortest = getShortestPaths(agentMachine, traversal);
    // The simple paths, and every event after the shortest path to each state: the latter reaches the
    // edges back into a state already seen (busy -> idle when the last request ends), which no simple path takes.
    const runs = [
      ...[...shortest, ...getSimplePaths(agentMachine, traversal)].map(eventsOf),
      ...shortest.filter((p) => p.state.status === 'active').flatMap((p) => EVENTS.map((e) => [...eventsOf(p), e])),
    ];
    expect(runs.length).toBeGreaterThan(10);
    for (const events of runs) {
      const actor = createActor(agentMachine, { input: { agentId: 'echo' }, inspect: recorder.inspect });
      actor.start();
      events.forEach((event, i) => {
        actor.send(event);
        const snap = actor.getSnapshot();
        const want = expected(events.slice(0, i + 1));
        expect({
          value: snap.value,
          inFlight: snap.context.inFlight,
          handled: snap.context.handled,
          failed: snap.context.failed,
          lastMessageId: snap.context.lastMessageId,
        }).toEqual(want);
      });
      expect(actor.getSnapshot().status).toBe(actor.getSnapshot().value === 'stopped' ? 'done' : 'active');
      actor.stop();
    }
    expect(definedStates(machine).size).toBe(7);
    expect(definedTransitions(machine).size).toBe(16);
    expect(recorder.missingOf(machine)).toEqual({ states: [], transitions: [] });
  });

  it('an idle agent has nothing to answer: answered / failed in idle change nothing', () => {
    const actor = createActor(agentMachine, { input: { agentId: 'echo' } }).start();
    actor.send({ type: 'troupe.agent.joined' });
    actor.send({ type: 'troupe.agent.answered', messageId: 'ghost', inFlight: 0, handled: 1, failed: 0 });
    actor.send({ type: 'troupe.agent.failed', messageId: 'ghost', inFlight: 0, handled: 0, failed: 1 });
    expect(actor.getSnapshot().value).toEqual({ ready: 'idle' });
    expect(actor.getSnapshot().context).toMatchObject({ inFlight: 0, handled: 0, failed: 0 });
  });
});
