import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, waitFor, type AnyStateMachine, type EventObject } from 'xstate';
import { getShortestPaths, getSimplePaths } from 'xstate/graph';
import type { Message } from '../src/protocol/a2a.js';
import { CLIENT_ROUTING_URI, type RouterDecision } from '../src/protocol/routing.js';
import type { AgentReply } from '../src/protocol/wire.js';
import type { AgentCallOutput, AgentRequestInput } from '../src/machines/agent-call.js';
import { agentCallMachine } from '../src/machines/agent-call.js';
import type { RouteDecision } from '../src/machines/route.js';
import { routerMachine, type PolicyInput } from '../src/machines/router.js';
import { orchestrationMachine } from '../src/machines/orchestration.js';
import { threadMachine, type ThreadStatusEmitted } from '../src/machines/thread.js';
import { META } from '../src/protocol/metadata.js';
import { definedStates, definedTransitions, missing, replayPaths } from './helpers/machine-coverage.js';

const never = fromPromise<never, unknown>(() => new Promise<never>(() => {}));

function userMsg(text: string, id = `u-${text}`): Message {
  return { kind: 'message', role: 'user', messageId: id, parts: [{ kind: 'text', text }] };
}

function agentMsg(text: string, recipient?: unknown, id = `a-${text}`): Message {
  return {
    kind: 'message',
    role: 'agent',
    messageId: id,
    parts: [{ kind: 'text', text }],
    ...(recipient !== undefined ? { metadata: { [CLIENT_ROUTING_URI]: recipient } } : {}),
  };
}

const agents = {
  triage: { supportsClientRouting: true },
  researcher: { supportsClientRouting: true },
  writer: { supportsClientRouting: true },
  plain: { supportsClientRouting: false },
};

describe('thread machine: model-based coverage', () => {
  it('reaches every state and fires every transition', () => {
    const stubbed = threadMachine.provide({
      actors: { agentCall: never as never, router: never as never, orchestration: never as never, handoff: never as never },
    }) as AnyStateMachine;
    const handoffReply = (slot: Record<string, unknown>) => ({ ...agentMsg('h'), metadata: { [CLIENT_ROUTING_URI]: slot } });
    const toAgent = (agentId: string, mode: 'initial' | 'forward'): RouteDecision => ({ to: 'agent', agentId, mode, reason: 't' });
    const ok = (reply: AgentReply): AgentCallOutput => ({ ok: true, agentId: 'triage', reply, attempts: 1 });
    const events = (snap: { value: unknown }): EventObject[] => {
      const v = JSON.stringify(snap.value);
      const base: EventObject[] = [
        { type: 'troupe.user.message', message: userMsg('hi') } as EventObject,
        { type: 'troupe.cancel' },
        { type: 'troupe.tick', now: 5 } as EventObject,
        { type: 'troupe.restored', now: 6 } as EventObject,
        { type: 'troupe.agents', agents } as EventObject,
        {
          type: 'xstate.done.actor.handoff',
          output: { status: 'error', returnsToSource: true, handoffReturn: { completionStatus: 'error', resultSummary: 'late', artifactsCreated: [] }, turns: 0, error: { code: 'AGENT_TIMEOUT', message: 'late' } },
        } as EventObject,
        { type: 'xstate.done.actor.handoff', output: { status: 'rejected', returnsToSource: false, turns: 0, rejectionReason: 'busy' } } as EventObject,
      ];
      if (v.includes('"routing"')) {
        base.push(
          { type: 'xstate.done.actor.router', output: toAgent('triage', 'initial') } as EventObject,
          { type: 'xstate.done.actor.router', output: { to: 'clarify', reason: 'low', confidence: 0.2 } } as EventObject,
          { type: 'xstate.done.actor.router', output: { to: 'user', reason: 'x', error: { code: 'ROUTER_FAILURE', message: 'x' } } } as EventObject,
          { type: 'xstate.error.actor.router', error: new Error('boom') } as EventObject,
          { type: 'xstate.done.actor.router', output: { ...toAgent('triage', 'initial'), additionalAgents: ['writer'] } } as EventObject,
        );
      }
      if (v.includes('"orchestrating"')) {
        base.push(
          {
            type: 'xstate.done.actor.orchestration',
            output: {
              message: agentMsg('both'),
              metadata: { agents_used: ['triage', 'writer'], execution_time_ms: 5, task_state: 'completed', strategy: 'parallel', failures: [], cancelled: [], skipped: [] },
            },
          } as EventObject,
          { type: 'xstate.error.actor.orchestration', error: new Error('boom') } as EventObject,
        );
      }
      if (v.includes('"calling"')) {
        base.push(
          { type: 'xstate.done.actor.agentCall', output: ok(agentMsg('answer')) } as EventObject,
          {
            type: 'xstate.done.actor.agentCall',
            output: ok({ kind: 'task', id: 't', contextId: 'c', status: { state: 'completed', message: agentMsg('done') } }),
          } as EventObject,
          {
            type: 'xstate.done.actor.agentCall',
            output: ok({ kind: 'task', id: 't', contextId: 'c', status: { state: 'failed', message: agentMsg('cannot') } }),
          } as EventObject,
          { type: 'xstate.done.actor.agentCall', output: ok({ kind: 'error', error: { code: 'INVALID_MESSAGE', message: 'bad' } }) } as EventObject,
          {
            type: 'xstate.done.actor.agentCall',
            output: ok(handoffReply({ handoff: { targetAgentId: 'writer', contextSummary: 's', handoffReason: 'r' } })),
          } as EventObject,
          { type: 'xstate.done.actor.agentCall', output: ok(handoffReply({ handoff: { targetAgentId: 'nobody', contextSummary: 's', handoffReason: 'r' } })) } as EventObject,
          { type: 'xstate.done.actor.agentCall', output: ok(handoffReply({ handoffReturn: { completionStatus: 'completed', resultSummary: 'done' } })) } as EventObject,
          { type: 'xstate.done.actor.agentCall', output: { ok: false, agentId: 'triage', error: { code: 'AGENT_TIMEOUT', message: 'late' }, attempts: 3 } } as EventObject,
        );
      }
      if (v.includes('"routingReply"')) {
        base.push(
          { type: 'xstate.done.actor.router', output: toAgent('writer', 'forward') } as EventObject,
          { type: 'xstate.done.actor.router', output: { to: 'user', reason: 'done' } } as EventObject,
          { type: 'xstate.error.actor.router', error: new Error('boom') } as EventObject,
        );
      }
      return base;
    };
    const input = { threadId: 't1', tenant: 'demo', owner: 'local', now: 0, agents };
    // A state is its value, whether messages are queued and the event that led there, so self-transitions count.
    // A node per (previous state, event, state): shortest paths then cover every edge, not only every state.
    const serializeState = (s: { value: unknown; context: unknown }, e: EventObject | undefined, prev?: { value: unknown; context: unknown }) =>
      JSON.stringify([
        prev?.value,
        (prev?.context as { turn?: { mode: string } } | undefined)?.turn?.mode,
        (prev?.context as { handoff?: { phase: string } } | undefined)?.handoff?.phase,
        e ? JSON.stringify(e) : '',
        s.value,
        (s.context as { pending: unknown[] }).pending.length > 0,
        (s.context as { handoff?: { phase: string } }).handoff?.phase,
        (s.context as { turn?: { mode: string } }).turn?.mode,
      ]);
    const opts = { events, input, serializeState, limit: 100000 };
    const paths = getShortestPaths(stubbed, opts);
    const cov = replayPaths(stubbed, paths, input);
    expect(missing(definedStates(threadMachine), cov.states)).toEqual([]);
    expect(missing(definedTransitions(threadMachine), cov.transitions)).toEqual([]);
  });

  it('router machine: every state and transition', () => {
    const stubbed = routerMachine.provide({ actors: { policy: never as never } }) as AnyStateMachine;
    const inputs = [
      { kind: 'reply', reply: agentMsg('x', { recipient: 'user' }), from: 'triage', senderStack: ['user'], hops: 0, maxHops: 10, agents },
      { kind: 'user', message: userMsg('x'), agents, entryAgent: 'triage', handoffTarget: 'writer', usePolicy: false, threshold: 0.7, maxAttempts: 2 },
      { kind: 'user', message: { ...userMsg('x'), metadata: { [CLIENT_ROUTING_URI]: { recipient: 'writer' } } }, agents, entryAgent: 'triage', usePolicy: false, threshold: 0.7, maxAttempts: 2 },
      { kind: 'user', message: userMsg('x'), agents, entryAgent: 'triage', usePolicy: false, threshold: 0.7, maxAttempts: 2 },
      { kind: 'user', message: { ...userMsg('x'), metadata: { [CLIENT_ROUTING_URI]: { recipient: 'ghost' } } }, agents, entryAgent: 'triage', usePolicy: false, threshold: 0.7, maxAttempts: 2 },
      { kind: 'user', message: userMsg('x'), agents, entryAgent: 'triage', usePolicy: true, threshold: 0.7, maxAttempts: 2 },
    ];
    const events: EventObject[] = [
      { type: 'xstate.done.actor.policy', output: { agentId: 'writer', confidence: 0.9, reasoning: 'r' } } as EventObject,
      { type: 'xstate.done.actor.policy', output: { agentId: 'writer', confidence: 0.3, reasoning: 'r' } } as EventObject,
      { type: 'xstate.error.actor.policy', error: new Error('down') } as EventObject,
    ];
    const states = new Set<string>();
    const transitions = new Set<string>();
    for (const input of inputs) {
      const opts = { events, input, serializeState: (s: { value: unknown; context: unknown }) => JSON.stringify([s.value, (s.context as { attempts: number }).attempts]) };
      const cov = replayPaths(stubbed, getSimplePaths(stubbed, opts), input);
      cov.states.forEach((s) => states.add(s));
      cov.transitions.forEach((t) => transitions.add(t));
    }
    expect(missing(definedStates(routerMachine), states)).toEqual([]);
    expect(missing(definedTransitions(routerMachine), transitions)).toEqual([]);
  });

  it('agent call machine: every state and transition', () => {
    const stubbed = agentCallMachine.provide({ actors: { request: never as never } }) as AnyStateMachine;
    const input = { agentId: 'a', message: userMsg('x'), sender: 'user', hop: 0, timeoutMs: 10, retries: 1, retryDelayMs: 5, now: 0 };
    // Only events a state can receive: an unhandled actor error event would fail the actor.
    const events = (snap: { value: unknown }): EventObject[] =>
      snap.value === 'calling'
        ? [
            { type: 'xstate.done.actor.request', output: agentMsg('ok') } as EventObject,
            { type: 'xstate.error.actor.request', error: { code: 'NO_RESPONDERS', message: 'none' } } as EventObject,
            { type: 'xstate.after.callTimeout.agentCall.calling' } as EventObject,
            { type: 'troupe.agentCall.restored' } as EventObject,
          ]
        : snap.value === 'waiting'
          ? [{ type: 'xstate.after.retryDelay.agentCall.waiting' } as EventObject, { type: 'troupe.agentCall.restored' } as EventObject]
          : [];
    const opts = {
      events,
      input,
      serializeState: (s: { value: unknown; context: unknown }, e: EventObject | undefined) =>
        JSON.stringify([s.value, (s.context as { attempt: number }).attempt, e?.type]),
    };
    const cov = replayPaths(stubbed, getSimplePaths(stubbed, opts), input);
    expect(missing(definedStates(agentCallMachine), cov.states)).toEqual([]);
    expect(missing(definedTransitions(agentCallMachine), cov.transitions)).toEqual([]);
  });
});

/** Runs a thread with a scripted team: each agent is a function from the incoming message to a reply. */
function runThread(team: Record<string, (m: Message, req: AgentRequestInput) => AgentReply | Promise<AgentReply>>, config = {}) {
  const calls: AgentRequestInput[] = [];
  const agentCall = agentCallMachine.provide({
    actors: {
      request: fromPromise<AgentReply, AgentRequestInput>(async ({ input }) => {
        calls.push(input);
        const agent = team[input.agentId];
        if (!agent) throw Object.assign(new Error('no responders'), { code: 'NO_RESPONDERS' });
        return agent(input.message, input);
      }),
    },
  });
  const machine = threadMachine.provide({ actors: { agentCall, orchestration: orchestrationMachine.provide({ actors: { agentCall } }) } });
  const statuses: ThreadStatusEmitted[] = [];
  const actor = createActor(machine, {
    input: { threadId: 't1', tenant: 'demo', owner: 'local', now: 0, agents, config: { retries: 0, agentTimeoutMs: 200, ...config } },
  });
  actor.on('troupe.thread.status', (e) => statuses.push(e));
  actor.start();
  const finals = () => statuses.filter((s) => s.final);
  const say = async (text: string) => {
    const before = finals().length;
    actor.send({ type: 'troupe.user.message', message: userMsg(text, `u-${before}-${text}`) });
    await waitFor(actor, () => finals().length > before, { timeout: 2000 });
    return finals()[before]!;
  };
  return { actor, statuses, calls, say };
}

const textOf = (m: Message | undefined) => (m?.parts[0] as { text: string } | undefined)?.text;

describe('thread machine: routing behaviour', () => {
  it('routes triage -> researcher -> writer -> user and records the route', async () => {
    const { say, actor, calls } = runThread({
      triage: () => agentMsg('research this', { recipient: 'researcher' }),
      researcher: () => agentMsg('facts', { recipient: 'writer' }),
      writer: () => agentMsg('final text', { recipient: 'user' }),
    });
    const final = await say('write about otters');
    expect(final.state).toBe('input-required');
    expect(textOf(final.message)).toBe('final text');
    const route = final.message?.metadata?.[META.route] as Array<{ from: string; to: string; hop: number }>;
    expect(route.map((s) => `${s.from}>${s.to}@${s.hop}`)).toEqual(['user>triage@0', 'triage>researcher@1', 'researcher>writer@2']);
    expect(calls.map((c) => c.agentId)).toEqual(['triage', 'researcher', 'writer']);
    expect(calls[2]!.sender).toBe('researcher');
    expect(actor.getSnapshot().value).toBe('input-required');
    expect(actor.getSnapshot().context.history.map((m) => textOf(m))).toEqual(['write about otters', 'research this', 'facts', 'final text']);
  });

  it('`sender` goes back up the sender stack, and to the user at the bottom', async () => {
    const { say, calls } = runThread({
      triage: (m) => (textOf(m) === 'from researcher' ? agentMsg('triage done', { recipient: 'sender' }) : agentMsg('ask', { recipient: 'researcher' })),
      researcher: () => agentMsg('from researcher', { recipient: 'sender' }),
    });
    const final = await say('q');
    expect(calls.map((c) => c.agentId)).toEqual(['triage', 'researcher', 'triage']);
    expect(textOf(final.message)).toBe('triage done');
    expect(final.error).toBeUndefined();
  });

  it('stops a loop at maxHops with ROUTING_LOOP and the last answer', async () => {
    let n = 0;
    const { say, calls, actor } = runThread(
      {
        triage: () => agentMsg(`t${n++}`, { recipient: 'writer' }, `t${n}`),
        writer: () => agentMsg(`w${n++}`, { recipient: 'triage' }, `w${n}`),
      },
      { maxHops: 3 },
    );
    const final = await say('loop');
    expect(calls).toHaveLength(4);
    expect(final.error?.code).toBe('ROUTING_LOOP');
    expect(textOf(final.message)).toBe('w3');
    expect(final.message?.metadata?.[META.error]).toMatchObject({ code: 'ROUTING_LOOP' });
    // The thread keeps serving.
    expect(actor.getSnapshot().value).toBe('input-required');
  });

  it('unknown recipient -> INVALID_RECIPIENT; self -> ROUTING_LOOP; bad metadata -> EXTENSION_PARSE_ERROR', async () => {
    const { say } = runThread({
      triage: (m) =>
        textOf(m) === 'unknown'
          ? agentMsg('u', { recipient: 'nobody' })
          : textOf(m) === 'self'
            ? agentMsg('s', { recipient: 'triage' })
            : agentMsg('b', { recipient: 42 }),
    });
    expect((await say('unknown')).error?.code).toBe('INVALID_RECIPIENT');
    expect((await say('self')).error?.code).toBe('ROUTING_LOOP');
    const bad = await say('bad');
    expect(bad.error?.code).toBe('EXTENSION_PARSE_ERROR');
    expect(textOf(bad.message)).toBe('b');
  });

  it('an agent without the extension answers the user', async () => {
    const { say } = runThread({ triage: () => agentMsg('to plain', { recipient: 'plain' }), plain: () => agentMsg('plain answer') });
    expect(textOf((await say('x')).message)).toBe('plain answer');
  });

  it('an agent that times out ends the turn with AGENT_TIMEOUT after its retries, and the thread keeps serving', async () => {
    let calls = 0;
    const { say } = runThread(
      {
        triage: (m) => {
          calls++;
          return textOf(m) === 'slow' ? new Promise(() => {}) : agentMsg('fast');
        },
      },
      { agentTimeoutMs: 30, retries: 2, retryDelayMs: 5 },
    );
    const slow = await say('slow');
    expect(slow.error?.code).toBe('AGENT_TIMEOUT');
    expect(calls).toBe(3);
    expect(textOf((await say('quick')).message)).toBe('fast');
  });

  it('a typed error reply from an agent reaches the user', async () => {
    const { say } = runThread({ triage: () => ({ kind: 'error', error: { code: 'INVALID_MESSAGE', message: 'nope' } }) });
    const final = await say('x');
    expect(final.error).toEqual({ code: 'INVALID_MESSAGE', message: 'nope' });
    expect(textOf(final.message)).toContain('INVALID_MESSAGE');
  });

  it('messages that arrive mid-turn are queued and answered in order', async () => {
    const { actor, statuses } = runThread({ triage: async (m) => agentMsg(`re:${textOf(m)}`, undefined, `r-${textOf(m)}`) });
    for (const t of ['one', 'two', 'three']) actor.send({ type: 'troupe.user.message', message: userMsg(t) });
    await waitFor(actor, () => statuses.filter((s) => s.final).length === 3);
    expect(statuses.filter((s) => s.final).map((s) => textOf(s.message))).toEqual(['re:one', 're:two', 're:three']);
  });

  it('an agent completing the task ends the thread', async () => {
    const { say, actor } = runThread({
      triage: () => ({ kind: 'task', id: 'x', contextId: 'x', status: { state: 'completed', message: agentMsg('all done') } }),
    });
    const final = await say('finish');
    expect(final.state).toBe('completed');
    expect(actor.getSnapshot().status).toBe('done');
  });

  it('cancel stops the turn', async () => {
    const { actor, statuses } = runThread({ triage: () => new Promise(() => {}) });
    actor.send({ type: 'troupe.user.message', message: userMsg('x') });
    actor.send({ type: 'troupe.cancel' });
    expect(actor.getSnapshot().value).toBe('canceled');
    expect(statuses.at(-1)?.state).toBe('canceled');
  });

  it('a user message addressed to an agent skips the entry agent', async () => {
    const { actor, statuses, calls } = runThread({ triage: () => agentMsg('t'), writer: () => agentMsg('w') });
    actor.send({ type: 'troupe.user.message', message: { ...userMsg('direct'), metadata: { [CLIENT_ROUTING_URI]: { recipient: 'writer' } } } });
    await waitFor(actor, () => statuses.some((s) => s.final));
    expect(calls.map((c) => c.agentId)).toEqual(['writer']);
  });

  it('a policy decision naming several agents fans out and aggregates, reporting partial failure', async () => {
    const machine = threadMachine.provide({
      actors: {
        router: routerMachine.provide({
          actors: { policy: fromPromise<RouterDecision, PolicyInput>(async () => ({ agentId: 'researcher', confidence: 0.9, reasoning: 'both', additionalAgents: ['writer'] })) },
        }),
        orchestration: orchestrationMachine.provide({
          actors: {
            agentCall: agentCallMachine.provide({
              actors: {
                request: fromPromise<AgentReply, AgentRequestInput>(async ({ input }) => {
                  if (input.agentId === 'writer') throw Object.assign(new Error('writer is down'), { code: 'AGENT_ERROR' });
                  return agentMsg('the facts');
                }),
              },
            }),
          },
        }),
      },
    });
    const statuses: ThreadStatusEmitted[] = [];
    const actor = createActor(machine, { input: { threadId: 't', tenant: 'demo', owner: 'local', now: 0, agents, config: { usePolicy: true, retries: 0 } } });
    actor.on('troupe.thread.status', (e) => statuses.push(e));
    actor.start();
    actor.send({ type: 'troupe.user.message', message: userMsg('facts and prose') });
    await waitFor(actor, () => statuses.some((s) => s.final));
    const final = statuses.find((s) => s.final)!;
    expect(textOf(final.message)).toContain('the facts');
    expect(textOf(final.message)).toContain('However');
    expect(final.message?.metadata).toMatchObject({ agents_used: ['researcher'], task_state: 'completed' });
    expect((final.message?.metadata?.failures as Array<{ agentId: string }>).map((f) => f.agentId)).toEqual(['writer']);
  });

  it('low router confidence asks the user to clarify', async () => {
    const machine = threadMachine.provide({
      actors: { router: routerMachine.provide({ actors: { policy: fromPromise<RouterDecision, PolicyInput>(async () => ({ agentId: 'writer', confidence: 0.3, reasoning: 'vague' })) } }) },
    });
    const statuses: ThreadStatusEmitted[] = [];
    const actor = createActor(machine, { input: { threadId: 't', tenant: 'demo', owner: 'local', now: 0, agents, config: { usePolicy: true } } });
    actor.on('troupe.thread.status', (e) => statuses.push(e));
    actor.start();
    actor.send({ type: 'troupe.user.message', message: userMsg('hmm') });
    await waitFor(actor, () => statuses.some((s) => s.final));
    const final = statuses.find((s) => s.final)!;
    expect(final.state).toBe('input-required');
    expect(final.message?.metadata?.['troupe/clarify']).toMatchObject({ confidence: 0.3 });
  });

  it('history is pruned to the configured length', async () => {
    const { say, actor } = runThread({ triage: (m) => agentMsg(`re:${textOf(m)}`, undefined, `r-${textOf(m)}`) }, { historyLimit: 3 });
    for (const t of ['a', 'b', 'c']) await say(t);
    expect(actor.getSnapshot().context.history.map((m) => textOf(m))).toEqual(['re:b', 'c', 're:c']);
  });
});
