/**
 * The agent call machine (src/machines/agent-call.ts): model-based. Paths come from its graph; each is
 * replayed on a real actor whose only I/O, the `request`, the test settles, and whose timers run on a
 * manual clock: a timeout or a retry delay in the model is that timer firing, not a hand-made event.
 */
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, type AnyMachineSnapshot, type AnyStateMachine, type EventObject } from 'xstate';
import { getSimplePaths } from 'xstate/graph';
import type { Message } from '../src/protocol/a2a.js';
import { agentCallMachine, type AgentCallInput, type AgentRequestInput, type AgentRequestOutput } from '../src/machines/agent-call.js';
import { CoverageRecorder } from './helpers/machine-coverage.js';
import { ManualClock } from './helpers/thread-rig.js';

const message: Message = { kind: 'message', role: 'user', messageId: 'm1', parts: [{ kind: 'text', text: 'x' }] };
const answer: Message = { kind: 'message', role: 'agent', messageId: 'a1', parts: [{ kind: 'text', text: 'ok' }] };
const INPUT: AgentCallInput = { agentId: 'a', message, sender: 'user', hop: 0, timeoutMs: 10, retries: 1, retryDelayMs: 5, now: 0 };

const DONE = { type: 'xstate.done.actor.request', output: answer };
const ERROR = { type: 'xstate.error.actor.request', error: { code: 'TRANSPORT_ERROR', reason: 'NO_RESPONDERS', message: 'none' } };
const TIMEOUT = { type: 'xstate.after.callTimeout.agentCall.calling' };
const RETRY = { type: 'xstate.after.retryDelay.agentCall.waiting' };
const RESTORED = { type: 'troupe.agentCall.restored' as const };

function rig() {
  const clock = new ManualClock();
  const requests: Array<{ input: AgentRequestInput; signal: AbortSignal; resolve: (r: AgentRequestOutput) => void; reject: (e: unknown) => void }> = [];
  const request = fromPromise<AgentRequestOutput, AgentRequestInput>(
    ({ input, signal }) => new Promise((resolve, reject) => requests.push({ input, signal, resolve, reject })),
  );
  return { clock, requests, logic: agentCallMachine.provide({ actors: { request } }) };
}
const settle = () => new Promise<void>((r) => setImmediate(r));

describe('agent call machine: the time of the answer', () => {
  it('a reply that says when it came passes its time on in the output; a plain one leaves it out', async () => {
    for (const [resolved, at] of [
      [{ kind: 'troupe.timedReply' as const, reply: answer, at: 1_234 }, 1_234],
      [answer, undefined],
    ] as const) {
      const { clock, requests, logic } = rig();
      const actor = createActor(logic, { input: INPUT, clock }).start();
      await settle();
      requests[0]!.resolve(resolved);
      await settle();
      const snap = actor.getSnapshot();
      expect(snap.output).toEqual({ ok: true, agentId: 'a', reply: answer, attempts: 1, ...(at === undefined ? {} : { at }) });
      actor.stop();
    }
  });
});

describe('agent call machine: model-based', () => {
  it('every state and transition, with the request settled and the timers fired for real', async () => {
    const stubbed = agentCallMachine as AnyStateMachine;
    // Only events a state can receive: an unhandled actor error event would fail the actor.
    const events = (snap: AnyMachineSnapshot): EventObject[] =>
      snap.value === 'calling' ? [DONE, ERROR, TIMEOUT, RESTORED] : snap.value === 'waiting' ? [RETRY, RESTORED] : [];
    const paths = getSimplePaths(stubbed, {
      events,
      input: INPUT,
      serializeState: (s: AnyMachineSnapshot, e: EventObject | undefined) => JSON.stringify([s.value, (s.context as { attempt: number }).attempt, e?.type]),
    });
    const recorder = new CoverageRecorder();
    for (const path of paths) {
      const { clock, requests, logic } = rig();
      const actor = createActor(logic, { input: INPUT, clock, inspect: recorder.inspect }).start();
      await settle();
      for (const step of path.steps.slice(1)) {
        const open = requests.filter((r) => !r.signal.aborted).at(-1);
        if (step.event.type === DONE.type) open!.resolve(answer);
        else if (step.event.type === ERROR.type) open!.reject(ERROR.error);
        else if (step.event.type === TIMEOUT.type || step.event.type === RETRY.type) expect(clock.fireNext()).toBe(true);
        else actor.send(RESTORED);
        await settle();
        expect(actor.getSnapshot().value).toBe(step.state.value);
        expect(actor.getSnapshot().context.attempt).toBe((step.state.context as { attempt: number }).attempt);
      }
      // Every attempt used the message's id as its idempotency key; a re-armed call ran its request again.
      for (const r of requests) expect(r.input).toMatchObject({ agentId: 'a', message, attempt: expect.any(Number) });
      const snap = actor.getSnapshot();
      if (snap.status === 'done') {
        expect(snap.output).toMatchObject(snap.value === 'succeeded' ? { ok: true, reply: answer } : { ok: false });
        if (snap.value === 'failed') expect(['AGENT_NOT_FOUND', 'AGENT_TIMEOUT']).toContain((snap.output as { error: { code: string } }).error.code);
      }
      actor.stop();
    }
    expect(recorder.missingOf(stubbed)).toEqual({ states: [], transitions: [] });
  });
});
