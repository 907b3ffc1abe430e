/**
 * The router machine (src/machines/router.ts): model-based over every kind of input it gets (a reply,
 * a user message in a handoff, addressed to a live or unknown agent, for the entry agent, through the
 * policy), with the policy's answers as its events; every state and transition reached on real actors.
 */
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, toPromise, type AnyStateMachine, type EventObject } from 'xstate';
import { getSimplePaths } from 'xstate/graph';
import type { Message } from '../src/protocol/a2a.js';
import { CLIENT_ROUTING_URI, type RouterDecision } from '../src/protocol/routing.js';
import { decideWithoutPolicy, routerMachine, type PolicyInput, type RouterInput } from '../src/machines/router.js';
import { definedStates, definedTransitions, missing, replayPaths } from './helpers/machine-coverage.js';

/** The policy is the router's I/O: the model's events stand for its answers. */
const never = fromPromise<never, unknown>(() => new Promise<never>(() => {}));

const userMsg = (text: string, metadata?: Record<string, unknown>): Message => ({
  kind: 'message',
  role: 'user',
  messageId: `u-${text}`,
  parts: [{ kind: 'text', text }],
  ...(metadata ? { metadata } : {}),
});
const agentMsg = (text: string, slot?: unknown): Message => ({
  kind: 'message',
  role: 'agent',
  messageId: `a-${text}`,
  parts: [{ kind: 'text', text }],
  ...(slot !== undefined ? { metadata: { [CLIENT_ROUTING_URI]: slot } } : {}),
});

const agents = { triage: { supportsClientRouting: true }, writer: { supportsClientRouting: true } };
const user = { agents, entryAgent: 'triage', usePolicy: false, threshold: 0.7, maxAttempts: 2 };

describe('router machine: model-based', () => {
  it('every state and transition', () => {
    const stubbed = routerMachine.provide({ actors: { policy: never as never } }) as AnyStateMachine;
    const inputs: RouterInput[] = [
      { kind: 'reply', reply: agentMsg('x', { recipient: 'user' }), from: 'triage', senderStack: ['user'], hops: 0, maxHops: 10, agents },
      { kind: 'user', message: userMsg('x'), ...user, handoffTarget: 'writer' },
      { kind: 'user', message: userMsg('x', { [CLIENT_ROUTING_URI]: { recipient: 'writer' } }), ...user },
      { kind: 'user', message: userMsg('x'), ...user },
      { kind: 'user', message: userMsg('x', { [CLIENT_ROUTING_URI]: { recipient: 'ghost' } }), ...user },
      { kind: 'user', message: userMsg('x'), ...user, usePolicy: true },
      { kind: 'user', message: userMsg('x'), ...user, usePolicy: true, fallbackAgent: 'writer' },
    ];
    const events: EventObject[] = [
      { type: 'xstate.done.actor.policy', output: { agentId: 'writer', confidence: 0.9, reasoning: 'r' } } as EventObject,
      { type: 'xstate.done.actor.policy', output: { agentId: 'writer', confidence: 0.3, reasoning: 'r' } } as EventObject,
      { type: 'xstate.error.actor.policy', error: new Error('down') } as EventObject,
      { type: 'xstate.done.actor.policy', output: { agentId: 'ghost', confidence: 0.9, reasoning: 'r' } } as EventObject,
    ];
    const states = new Set<string>();
    const transitions = new Set<string>();
    for (const input of inputs) {
      const opts = {
        events,
        input,
        serializeState: (s: { value: unknown; context: unknown }) => JSON.stringify([s.value, (s.context as { attempts: number }).attempts]),
      };
      const cov = replayPaths(stubbed, getSimplePaths(stubbed, opts), input);
      cov.states.forEach((s) => states.add(s));
      cov.transitions.forEach((t) => transitions.add(t));
    }
    expect(missing(definedStates(routerMachine), states)).toEqual([]);
    expect(missing(definedTransitions(routerMachine), transitions)).toEqual([]);
  });

  it("sends the user's message to an agent waiting for approval, unless the user addresses another or it is gone", () => {
    const waiting = { kind: 'user' as const, ...user, usePolicy: true, approvalAgent: 'writer' };
    expect(decideWithoutPolicy({ ...waiting, message: userMsg('approve') })).toMatchObject({
      to: 'agent',
      agentId: 'writer',
      reason: "writer waits for the user's approval",
    });
    expect(decideWithoutPolicy({ ...waiting, message: userMsg('x', { [CLIENT_ROUTING_URI]: { recipient: 'triage' } }) })).toMatchObject({
      to: 'agent',
      agentId: 'triage',
    });
    // An agent no longer on the mesh: routed as any message (here, by the policy).
    expect(decideWithoutPolicy({ ...waiting, approvalAgent: 'ghost', message: userMsg('approve') })).toBeUndefined();
  });

  it('a failing policy is retried up to maxAttempts, then the fallback agent answers', async () => {
    let calls = 0;
    const policy = fromPromise<RouterDecision, PolicyInput>(async () => {
      calls += 1;
      throw new Error(`down ${calls}`);
    });
    const actor = createActor(routerMachine.provide({ actors: { policy } }), {
      input: { kind: 'user', message: userMsg('x'), ...user, usePolicy: true, maxAttempts: 3, fallbackAgent: 'writer' },
    }).start();
    expect(await toPromise(actor)).toEqual({
      to: 'agent',
      agentId: 'writer',
      mode: 'initial',
      reason: 'router failed after 3 attempts (down 3); fallback agent writer',
    });
    expect(calls).toBe(3);
  });

  it('a failing policy with no fallback agent ends in ROUTER_FAILURE for the user, not the entry agent', async () => {
    let calls = 0;
    const policy = fromPromise<RouterDecision, PolicyInput>(async () => {
      calls += 1;
      throw new Error(`down ${calls}`);
    });
    const actor = createActor(routerMachine.provide({ actors: { policy } }), {
      input: { kind: 'user', message: userMsg('x'), ...user, usePolicy: true, maxAttempts: 2 },
    }).start();
    const decision = await toPromise(actor);
    expect(decision.to).toBe('user');
    if (decision.to !== 'user') throw new Error('unreachable');
    expect(decision.error?.code).toBe('ROUTER_FAILURE');
    expect(decision.error?.message).toContain('router failed after 2 attempts (down 2)');
    expect(decision.error?.message).toContain('fallback');
    expect(calls).toBe(2);
  });

  it("checks every policy's decision: unknown or repeated agents are failed attempts", async () => {
    const answers: RouterDecision[] = [
      { agentId: 'ghost', confidence: 0.9, reasoning: 'r' },
      { agentId: 'writer', confidence: 0.9, reasoning: 'r', additionalAgents: ['writer'] },
      { agentId: 'writer', confidence: 0.9, reasoning: 'r', additionalAgents: ['triage', 'triage'] },
      { agentId: 'writer', confidence: 0.9, reasoning: 'r', additionalAgents: ['nobody'] },
    ];
    const policy = fromPromise<RouterDecision, PolicyInput>(async () => answers.shift()!);
    const failed = await toPromise(
      createActor(routerMachine.provide({ actors: { policy } }), {
        input: { kind: 'user', message: userMsg('x'), ...user, usePolicy: true, maxAttempts: 3 },
      }).start(),
    );
    expect(failed).toMatchObject({ to: 'user', error: { code: 'ROUTER_FAILURE' } });
    expect(failed.to === 'user' && failed.error?.message).toContain('the policy added an agent twice');
    const fallback = await toPromise(
      createActor(routerMachine.provide({ actors: { policy } }), {
        input: { kind: 'user', message: userMsg('x'), ...user, usePolicy: true, maxAttempts: 1, fallbackAgent: 'triage' },
      }).start(),
    );
    expect(fallback).toMatchObject({
      to: 'agent',
      agentId: 'triage',
      reason: 'router failed after 1 attempts (the policy added "nobody", not live agents); fallback agent triage',
    });
  });

  it('hands the policy the history it was given, and fills the fallback reason template', async () => {
    const seen: PolicyInput[] = [];
    const policy = fromPromise<RouterDecision, PolicyInput>(async ({ input }) => {
      seen.push(input);
      throw new Error('bad answer');
    });
    const history = [userMsg('earlier'), agentMsg('reply')];
    const actor = createActor(routerMachine.provide({ actors: { policy } }), {
      input: {
        kind: 'user',
        message: userMsg('x'),
        ...user,
        usePolicy: true,
        maxAttempts: 1,
        fallbackAgent: 'writer',
        fallbackReasonTemplate: '{{agent}} took over after {{attempts}}: {{error}}',
        history,
      },
    }).start();
    expect(await toPromise(actor)).toEqual({ to: 'agent', agentId: 'writer', mode: 'initial', reason: 'writer took over after 1: bad answer' });
    expect(seen[0]!.history).toEqual(history);
  });
});
