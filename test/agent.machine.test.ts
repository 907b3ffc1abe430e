/**
 * The agent process machine (src/machines/agent.ts): model-based. Paths over its events come from its
 * graph (xstate/graph), each is replayed on a real actor, every step's state and counters are checked
 * against a plain model of what the agent has in flight, and every state and transition is reached.
 */
import { describe, expect, it } from 'vitest';
import { createActor, type AnyStateMachine } from 'xstate';
import { getShortestPaths, getSimplePaths } from 'xstate/graph';
import { CoverageRecorder, definedStates, definedTransitions } from './helpers/machine-coverage.js';
import { agentMachine, type AgentActorEvent } from '../src/machines/agent.js';

const EVENTS: AgentActorEvent[] = [
  { type: 'troupe.agent.joined' },
  { type: 'troupe.agent.received', messageId: 'm1', threadId: 't1' },
  { type: 'troupe.agent.received', messageId: 'm2', threadId: 't2' },
  { type: 'troupe.agent.answered', messageId: 'm1' },
  { type: 'troupe.agent.failed', messageId: 'm2' },
  { type: 'troupe.agent.leave' },
  { type: 'troupe.agent.left' },
];

type AgentSnapshot = ReturnType<ReturnType<typeof createActor<typeof agentMachine>>['getSnapshot']>;

const traversal = {
  input: { agentId: 'echo' },
  events: EVENTS,
  // At most two messages in flight keeps the graph finite; a stopped agent takes nothing.
  filterEvents: (snap: AgentSnapshot, e: AgentActorEvent) => snap.status === 'active' && !(e.type === 'troupe.agent.received' && snap.context.inFlight >= 2),
  serializeState: (snap: AgentSnapshot) => JSON.stringify([snap.value, snap.context.inFlight, snap.context.handled > 0, snap.context.failed > 0]),
};

/** What the agent should show after a sequence of events, computed without the machine. */
function expected(events: AgentActorEvent[]) {
  let phase: 'starting' | 'ready' | 'stopping' | 'stopped' = 'starting';
  let inFlight = 0;
  let handled = 0;
  let failed = 0;
  let lastMessageId: string | undefined;
  for (const e of events) {
    if (phase === 'starting' && e.type === 'troupe.agent.joined') phase = 'ready';
    else if (phase === 'ready' && e.type === 'troupe.agent.received') {
      inFlight += 1;
      lastMessageId = e.messageId;
    } else if ((phase === 'ready' || phase === 'stopping') && e.type === 'troupe.agent.answered' && (phase === 'stopping' || inFlight > 0)) {
      inFlight = Math.max(0, inFlight - 1);
      handled += 1;
    } else if ((phase === 'ready' || phase === 'stopping') && e.type === 'troupe.agent.failed' && (phase === 'stopping' || inFlight > 0)) {
      inFlight = Math.max(0, inFlight - 1);
      failed += 1;
    } else if (phase === 'ready' && e.type === 'troupe.agent.leave') phase = 'stopping';
    else if (phase === 'stopping' && e.type === 'troupe.agent.left') phase = 'stopped';
  }
  const value = phase === 'ready' ? { ready: inFlight > 0 ? 'busy' : 'idle' } : phase;
  return { value, inFlight, handled, failed, lastMessageId };
}

describe('agent machine: model-based', () => {
  it('every state and transition is reached on real actors, and every step agrees with the model of what is in flight', () => {
    const machine = agentMachine as unknown as AnyStateMachine;
    const recorder = new CoverageRecorder();
    const paths = [...getShortestPaths(agentMachine, traversal), ...getSimplePaths(agentMachine, traversal)];
    expect(paths.length).toBeGreaterThan(10);
    for (const path of paths) {
      const events = path.steps.map((s) => s.event as AgentActorEvent).filter((e) => (e.type as string) !== 'xstate.init');
      const actor = createActor(agentMachine, { input: { agentId: 'echo' }, inspect: recorder.inspect });
      actor.start();
      events.forEach((event, i) => {
        actor.send(event);
        const snap = actor.getSnapshot();
        const want = expected(events.slice(0, i + 1));
        expect({ value: snap.value, inFlight: snap.context.inFlight, handled: snap.context.handled, failed: snap.context.failed, lastMessageId: snap.context.lastMessageId }).toEqual(want);
      });
      expect(actor.getSnapshot().status).toBe(actor.getSnapshot().value === 'stopped' ? 'done' : 'active');
      actor.stop();
    }
    expect(definedStates(machine).size).toBe(7);
    expect(definedTransitions(machine).size).toBe(11);
    expect(recorder.missingOf(machine)).toEqual({ states: [], transitions: [] });
  });

  it('an idle agent has nothing to answer: answered / failed in idle change nothing', () => {
    const actor = createActor(agentMachine, { input: { agentId: 'echo' } }).start();
    actor.send({ type: 'troupe.agent.joined' });
    actor.send({ type: 'troupe.agent.answered', messageId: 'ghost' });
    actor.send({ type: 'troupe.agent.failed', messageId: 'ghost' });
    expect(actor.getSnapshot().value).toEqual({ ready: 'idle' });
    expect(actor.getSnapshot().context).toMatchObject({ inFlight: 0, handled: 0, failed: 0 });
  });
});
