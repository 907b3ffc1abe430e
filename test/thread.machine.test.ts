/**
 * The thread machine with its real children (router, agentCall, orchestration, handoff), only their I/O
 * scripted: every state it reaches from what the host, the agents, the policy and the timers can do,
 * with what must hold in each; then behaviour — routing, fan-out, handoffs, restore.
 */
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, waitFor, type AnyStateMachine } from 'xstate';
import type { Message } from '../src/protocol/a2a.js';
import { CLIENT_ROUTING_URI, type RouterDecision } from '../src/protocol/routing.js';
import type { AgentReply } from '../src/protocol/wire.js';
import type { AgentRequestInput, AgentRequestOutput } from '../src/machines/agent-call.js';
import { agentCallMachine } from '../src/machines/agent-call.js';
import { routerMachine, type PolicyInput } from '../src/machines/router.js';
import { orchestrationMachine } from '../src/machines/orchestration.js';
import { threadMachine, type ThreadStatusEmitted } from '../src/machines/thread.js';
import { META } from '../src/protocol/metadata.js';
import { handoffMachine } from '../src/machines/handoff.js';
import type { ThreadConfig } from '../src/machines/thread.js';
import { CoverageRecorder } from './helpers/machine-coverage.js';
import { T0, TEAM, ThreadRig, agentReply, type OpenRequest } from './helpers/thread-rig.js';
import { messageText } from '../src/protocol/a2a.js';
import { readHandoffRequest } from '../src/protocol/handoff.js';

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

/* ---------------------------------------------------------------------------------------------- */
/* the reachable graph, with real children                                                          */
/* ---------------------------------------------------------------------------------------------- */

/** One thing that can happen to a thread: an event from the host, an agent's or the policy's answer, a timer. */
interface Step {
  name: string;
  applies: (rig: ThreadRig) => boolean;
  run: (rig: ThreadRig) => void;
}

const isLive = (rig: ThreadRig) => rig.snapshot.status === 'active';
const hasRequest = (rig: ThreadRig) => rig.openRequests().length > 0;
const hasPolicyCall = (rig: ThreadRig) => rig.openPolicyCalls().length > 0;
const handoffTo = (targetAgentId: string, extra: Record<string, unknown> = {}) => ({
  handoff: { targetAgentId, contextSummary: 'the story so far', handoffReason: 'a specialist', ...extra },
});
const reply = (name: string, make: (r: OpenRequest) => AgentReply): Step => ({ name: `reply: ${name}`, applies: hasRequest, run: (rig) => rig.answer(make) });
const task = (state: 'completed' | 'failed'): AgentReply => ({
  kind: 'task',
  id: 'x',
  contextId: 'x',
  status: { state, message: agentReply(`task ${state}`) },
});

/** An agent's reply that asks a person to approve a tool call, by `T0 + 500`. */
const asksApproval = (agentId: string, id = `r-${agentId}-asks`): Message => ({
  ...agentReply(`${agentId} waits for approval`, undefined, id),
  metadata: {
    [META.inputRequired]: true,
    [META.approval]: {
      agent: agentId,
      answering: 'u1',
      expiresAt: T0 + 500,
      text: '',
      calls: [{ callId: 'c1', tool: 'refund', arguments: '{}', needsApproval: true }],
      turn: [],
    },
  },
});

/** An agent's reply that asks the thread to delegate. */
const delegating = (text: string, agents: string[]): Message => ({ ...agentReply(text), metadata: { [META.delegate]: { agents } } });

const STEPS: Step[] = [
  { name: 'user: hi', applies: isLive, run: (rig) => void rig.say('hi') },
  { name: 'user: to a ghost', applies: isLive, run: (rig) => void rig.say('psst', { [CLIENT_ROUTING_URI]: { recipient: 'ghost' } }) },
  { name: 'cancel', applies: isLive, run: (rig) => rig.actor.send({ type: 'troupe.cancel', reason: 'changed my mind', now: rig.now() }) },
  { name: 'tick', applies: isLive, run: (rig) => rig.actor.send({ type: 'troupe.tick', now: rig.now() }) },
  { name: 'restored', applies: isLive, run: (rig) => rig.actor.send({ type: 'troupe.restored', now: rig.now() }) },
  { name: 'agents', applies: isLive, run: (rig) => rig.actor.send({ type: 'troupe.agents', agents: TEAM }) },
  { name: 'a timer fires', applies: (rig) => isLive(rig) && rig.clock.pending > 0, run: (rig) => void rig.clock.fireNext() },
  reply('plain', (r) => agentReply(`${r.input.agentId} says`)),
  reply('to researcher', (r) => agentReply(`${r.input.agentId} asks researcher`, { recipient: 'researcher' })),
  reply('task completed', () => task('completed')),
  reply('task failed', () => task('failed')),
  reply('error', () => ({ kind: 'error', error: { code: 'INVALID_MESSAGE', message: 'cannot read that' } })),
  reply('hand off to writer', () => agentReply('passing you to writer', handoffTo('writer'))),
  reply('hand off to writer for good', () => agentReply('writer takes it from here', handoffTo('writer', { returnExpected: false }))),
  reply('hand off to a ghost', () => agentReply('passing you on', handoffTo('ghost'))),
  reply('return: completed', () =>
    agentReply('all done', { handoffReturn: { completionStatus: 'completed', resultSummary: 'made it', artifactsCreated: ['f1'] } }),
  ),
  reply('return: error', () => agentReply('could not', { handoffReturn: { completionStatus: 'error', resultSummary: 'it broke' } })),
  reply('return: cancelled', () => agentReply('stopping', { handoffReturn: { completionStatus: 'cancelled' } })),
  reply('decline', () => agentReply('not me', { handoffAccept: { accepted: false, rejectionReason: 'busy' } })),
  // Explored in the small team only (`taskEnd: answer`): everywhere it would double the states of the others.
  {
    name: 'reply: asks for approval',
    applies: (rig) => hasRequest(rig) && rig.snapshot.context.config.taskEnd === 'answer',
    run: (rig) => void rig.answer((r) => asksApproval(r.input.agentId)),
  },
  reply('delegate to researcher and writer', (r) => delegating(`${r.input.agentId} asks the team`, ['researcher', 'writer'])),
  reply('delegate to a ghost', (r) => delegating(`${r.input.agentId} asks a ghost`, ['ghost'])),
  {
    name: 'request fails',
    applies: hasRequest,
    run: (rig) => void rig.fail(Object.assign(new Error('timeout'), { code: 'TRANSPORT_ERROR', reason: 'TIMEOUT' })),
  },
  { name: 'policy: writer', applies: hasPolicyCall, run: (rig) => rig.decide({ agentId: 'writer', confidence: 0.9, reasoning: 'writes' }) },
  {
    name: 'policy: fan-out',
    applies: hasPolicyCall,
    run: (rig) => rig.decide({ agentId: 'triage', confidence: 0.9, reasoning: 'both', additionalAgents: ['researcher'] }),
  },
  { name: 'policy: unsure', applies: hasPolicyCall, run: (rig) => rig.decide({ agentId: 'writer', confidence: 0.2, reasoning: 'vague' }) },
  { name: 'policy: down', applies: hasPolicyCall, run: (rig) => rig.decide(new Error('policy down')) },
  { name: 'synthesis: written', applies: (rig) => rig.openSyntheses().length > 0, run: (rig) => rig.synthesise('one answer from both') },
  { name: 'synthesis: fails', applies: (rig) => rig.openSyntheses().length > 0, run: (rig) => rig.synthesise(new Error('model down')) },
];

/** What tells one reachable state of the whole (thread, children, I/O in flight, timers) from another. */
function stateKey(rig: ThreadRig): string {
  const snap = rig.snapshot;
  const ctx = snap.context;
  const children = Object.entries(snap.children)
    .map(([id, child]) => {
      const s = child?.getSnapshot() as { value?: unknown; status?: string } | undefined;
      return `${id}:${JSON.stringify(s?.value ?? s?.status)}`;
    })
    .sort();
  const io = [
    ...rig.openRequests().map((r) => `request:${r.input.agentId}`),
    ...rig.openPolicyCalls().map(() => 'policy'),
    ...rig.openSyntheses().map(() => 'synthesis'),
  ].sort();
  // How many calls of a fan-out have answered: one answer or several decide whether a synthesis runs.
  const fanOut = snap.children.orchestration?.getSnapshot() as { context?: { calls?: Array<{ status: string }> } } | undefined;
  const answered = fanOut?.context?.calls?.filter((c) => c.status === 'succeeded').length ?? 0;
  return JSON.stringify([
    snap.status,
    snap.value,
    answered,
    ctx.turn?.mode ?? null,
    ctx.handoff ? [ctx.handoff.phase, ctx.handoff.request.returnExpected] : null,
    ctx.pending.length > 0,
    ctx.approval !== undefined,
    children,
    io,
    rig.clock.pending > 0,
  ]);
}

/** What must hold in every state the thread reaches, whatever happened before. */
function checkInvariants(rig: ThreadRig, path: string[]): void {
  const where = path.join(' › ');
  const snap = rig.snapshot;
  const ctx = snap.context;
  const working = snap.status === 'active' && typeof snap.value === 'object' && 'working' in snap.value;
  // Never stuck: a turn in progress always waits for something that will come (an answer or a timer).
  if (working)
    expect(rig.openRequests().length + rig.openPolicyCalls().length + rig.openSyntheses().length + rig.clock.pending, `stuck after ${where}`).toBeGreaterThan(
      0,
    );
  // Nothing leaks: a thread between turns (or ended) has no request in flight.
  else
    expect(
      rig.openRequests().map((r) => r.input.agentId),
      `a request left in flight after ${where}`,
    ).toEqual([]);
  // The thread's view of its handoff and the handoff actor agree.
  const handoffChild = snap.children.handoff?.getSnapshot() as { value?: unknown } | undefined;
  if (snap.status === 'active') {
    if (ctx.handoff) expect(handoffChild?.value, `handoff view ${ctx.handoff.phase} after ${where}`).toBe(ctx.handoff.phase);
    else expect(handoffChild, `a handoff actor without a handoff after ${where}`).toBeUndefined();
  }
  // Each message is answered at most once, and between turns every message has been answered.
  const answered = rig.finals().flatMap((s) => (s.message?.metadata?.[META.inReplyTo] ? [String(s.message.metadata[META.inReplyTo])] : []));
  expect(new Set(answered).size, `a message answered twice after ${where}`).toBe(answered.length);
  if (snap.value === 'input-required' && ctx.pending.length === 0) {
    for (const m of rig.sent) expect(answered, `${m.messageId} unanswered after ${where}`).toContain(m.messageId);
  }
  // Routes tell what happened: nobody but the user addresses an agent "as the user".
  for (const s of rig.statuses) if (s.route) expect(s.route.reason).not.toMatch(/the user addressed/);
}

async function replay(config: Partial<ThreadConfig>, path: Step[], recorder: CoverageRecorder): Promise<ThreadRig> {
  const rig = new ThreadRig({ config, recorder });
  await rig.settle();
  for (const step of path) {
    step.run(rig);
    await rig.settle();
  }
  return rig;
}

/** Shared by the exploration and the fault tests below; checked at the end of the describe. */
const threadCoverage = new CoverageRecorder();

describe('thread machine with its real children: the reachable graph', () => {
  it('an unsure router hands the message to the clarification agent, whose answer is the question (input-required, also with taskEnd: answer)', async () => {
    const rig = new ThreadRig({ config: { usePolicy: true, maxAttempts: 1, clarificationAgent: 'writer', taskEnd: 'answer' }, recorder: threadCoverage });
    await rig.settle();
    rig.say('do the thing');
    await rig.settle();
    rig.decide({ agentId: 'researcher', confidence: 0.3, reasoning: 'too vague' });
    await rig.settle();
    const request = rig.answer(agentReply('Which thing do you mean?'));
    expect(request.input.agentId).toBe('writer');
    expect(request.input.message.metadata?.[META.clarify]).toMatchObject({ confidence: 0.3 });
    await rig.settle();
    expect(rig.finals().map((f) => [f.state, f.message && messageText(f.message)])).toEqual([['input-required', 'Which thing do you mean?']]);
    rig.stop();
  });

  it("with taskEnd: answer, an agent's question keeps the task input-required and its answer completes it", async () => {
    const rig = new ThreadRig({ config: { taskEnd: 'answer' }, recorder: threadCoverage });
    await rig.settle();
    rig.say('turn on the lights');
    await rig.settle();
    rig.answer({ ...agentReply('Which room?'), metadata: { [META.inputRequired]: true } });
    await rig.settle();
    expect(rig.finals().map((f) => f.state)).toEqual(['input-required']);
    rig.say('the kitchen');
    await rig.settle();
    rig.answer(agentReply('Done.'));
    await rig.settle();
    expect(rig.finals().map((f) => f.state)).toEqual(['input-required', 'completed']);
    expect(rig.snapshot.value).toBe('completed');
    rig.stop();
  });

  it("explores every state the thread and its children reach from the host events, the agents' answers and the timers", { timeout: 300_000 }, async () => {
    const MAX_DEPTH = 9;
    let explored = 0;
    // Two teams: one routes by its entry agent, with handoffs longer than a call; one by a policy, with
    // handoffs shorter than a call (so a deadline can pass while the target's first answer is awaited).
    // The second also synthesises a fan-out's answers with its model. A third ends the task on an agent's
    // answer (`taskEnd: answer`) and lets an agent's Task end it failed (`agentEndsFailed`); a few steps
    // reach what it adds, and a tool approval's deadline.
    const synthesis = { strategy: 'parallel', maxParallelAgents: 3, aggregation: 'synthesis' } as const;
    const teams: Array<[Partial<ThreadConfig>, number]> = [
      [{}, MAX_DEPTH],
      [{ usePolicy: true, maxAttempts: 1, handoffMaxDurationMs: 500, orchestration: synthesis }, MAX_DEPTH],
      [{ taskEnd: 'answer', agentEndsFailed: true }, 4],
    ];
    for (const [config, maxDepth] of teams) {
      const start = await replay(config, [], threadCoverage);
      const seen = new Set([stateKey(start)]);
      start.stop();
      let frontier: Step[][] = [[]];
      for (let depth = 0; depth < maxDepth && frontier.length; depth++) {
        const next: Step[][] = [];
        for (const path of frontier) {
          for (const step of STEPS) {
            const rig = await replay(config, path, threadCoverage);
            if (!step.applies(rig)) {
              rig.stop();
              continue;
            }
            step.run(rig);
            await rig.settle();
            explored += 1;
            checkInvariants(
              rig,
              [...path, step].map((s) => s.name),
            );
            const key = stateKey(rig);
            if (!seen.has(key)) {
              seen.add(key);
              next.push([...path, step]);
            }
            rig.stop();
          }
        }
        frontier = next;
      }
    }
    expect(explored).toBeGreaterThan(100);
    // Every state and transition of the thread but the four a crashed child takes (next test).
    const { states, transitions } = threadCoverage.missingOf(threadMachine as AnyStateMachine);
    expect(states).toEqual([]);
    expect(transitions).toEqual([
      'thread.working.delegating --xstate.error.actor.orchestration--> thread.input-required',
      'thread.working.orchestrating --xstate.error.actor.orchestration--> thread.input-required',
      'thread.working.routing --xstate.error.actor.router--> thread.input-required',
    ]);
    // The real handoff actor went through every state it has on the way.
    expect(threadCoverage.missingOf(handoffMachine as AnyStateMachine)).toEqual({ states: [], transitions: [] });
  });

  it('a child machine that crashes ends the turn with a plain answer and the thread waits for the next message', async () => {
    // A fault put into each real child: the only way they fail (I/O failures are in their output).
    const bug = (what: string) => () => {
      throw new Error(what);
    };
    // The router actor runs only when the policy decides (policy-free decisions are the thread's own states).
    const router = routerMachine.provide({ actions: { countAttempt: bug('router bug') } }) as typeof routerMachine;
    const orchestration = orchestrationMachine.provide({ actions: { aggregateResults: bug('aggregation bug') } }) as typeof orchestrationMachine;
    const cases: Array<{ what: string; answer: string; rig: () => ThreadRig; drive: (rig: ThreadRig) => Promise<void> }> = [
      {
        what: 'the router, asking its policy',
        answer: 'troupe: No agent answered.',
        rig: () => new ThreadRig({ router, config: { usePolicy: true, maxAttempts: 1 }, recorder: threadCoverage }),
        drive: async () => undefined,
      },
      {
        what: 'the orchestration',
        answer: 'troupe: No agent answered.',
        rig: () => new ThreadRig({ orchestration, config: { usePolicy: true, maxAttempts: 1 }, recorder: threadCoverage }),
        drive: async (rig) => {
          rig.decide({ agentId: 'triage', confidence: 0.9, reasoning: 'r', additionalAgents: ['writer'] });
          await rig.settle();
          rig.answer(agentReply('a'));
          rig.answer(agentReply('b'));
        },
      },
      {
        what: "a delegation's orchestration",
        answer: 'triage: triage asks the team', // the delegating agent's reply: the last answer of the turn
        rig: () => new ThreadRig({ orchestration, recorder: threadCoverage }),
        drive: async (rig) => {
          rig.answer(delegating('triage asks the team', ['researcher', 'writer']));
          await rig.settle();
          rig.answer(agentReply('a'));
          rig.answer(agentReply('b'));
        },
      },
    ];
    for (const { what, answer, rig: make, drive } of cases) {
      const rig = make();
      rig.say('hi');
      await rig.settle();
      await drive(rig);
      await rig.settle();
      expect(rig.snapshot.value, what).toBe('input-required');
      expect(rig.finalTexts(), what).toEqual([answer]);
      expect(
        rig.finals().map((s) => s.message?.metadata?.[META.inReplyTo]),
        what,
      ).toEqual(['u1']);
      rig.stop();
    }
    expect(threadCoverage.missingOf(threadMachine as AnyStateMachine)).toEqual({ states: [], transitions: [] });
  });
});

/** Runs a thread with a scripted team: each agent is a function from the incoming message to a reply. */
function runThread(team: Record<string, (m: Message, req: AgentRequestInput) => AgentReply | Promise<AgentReply>>, config = {}) {
  const calls: AgentRequestInput[] = [];
  const agentCall = agentCallMachine.provide({
    actors: {
      request: fromPromise<AgentRequestOutput, AgentRequestInput>(async ({ input }) => {
        calls.push(input);
        const agent = team[input.agentId];
        if (!agent) throw Object.assign(new Error('no responders'), { code: 'TRANSPORT_ERROR', reason: 'NO_RESPONDERS' });
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
          actors: {
            policy: fromPromise<RouterDecision, PolicyInput>(async () => ({
              agentId: 'researcher',
              confidence: 0.9,
              reasoning: 'both',
              additionalAgents: ['writer'],
            })),
          },
        }),
        orchestration: orchestrationMachine.provide({
          actors: {
            agentCall: agentCallMachine.provide({
              actors: {
                request: fromPromise<AgentRequestOutput, AgentRequestInput>(async ({ input }) => {
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
    expect(final.message?.metadata).toMatchObject({ agentsUsed: ['researcher'], taskState: 'completed' });
    expect((final.message?.metadata?.failures as Array<{ agentId: string }>).map((f) => f.agentId)).toEqual(['writer']);
  });

  it('low router confidence asks the user to clarify', async () => {
    const machine = threadMachine.provide({
      actors: {
        router: routerMachine.provide({
          actors: { policy: fromPromise<RouterDecision, PolicyInput>(async () => ({ agentId: 'writer', confidence: 0.3, reasoning: 'vague' })) },
        }),
      },
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

/* ---------------------------------------------------------------------------------------------- */
/* handoffs, fan-out and restore, step by step                                                      */
/* ---------------------------------------------------------------------------------------------- */

const slotOf = (m: Message | undefined) => m?.metadata?.[CLIENT_ROUTING_URI] as Record<string, unknown> | undefined;
const stepsOf = (s: ThreadStatusEmitted | undefined) =>
  ((s?.message?.metadata?.[META.route] ?? []) as Array<{ from: string; to: string; reason: string }>).map((r) => `${r.from}>${r.to}`);

/** A thread where triage handed off to writer, which accepted: the user now talks to writer. */
async function inHandoff(opts: { returnExpected?: boolean; owner?: string; config?: Partial<ThreadConfig> } = {}) {
  const rig = new ThreadRig({ ...(opts.owner ? { owner: opts.owner } : {}), ...(opts.config ? { config: opts.config } : {}) });
  rig.say('I need writing help');
  await rig.settle();
  rig.answer(
    agentReply('passing you to writer', {
      handoff: {
        targetAgentId: 'writer',
        contextSummary: 'wants a poem',
        handoffReason: 'writing',
        ...(opts.returnExpected === false ? { returnExpected: false } : {}),
      },
    }),
  );
  await rig.settle();
  const toWriter = rig.openRequests()[0]!;
  rig.answer(agentReply('writer here, what poem?'));
  await rig.settle();
  expect(rig.snapshot.context.handoff?.phase).toBe('active');
  return { rig, toWriter };
}

describe('thread machine: handoffs, fan-out and restore', () => {
  it('a target that returns gives the turn back to its source: its answer, the step back, then the source answers', async () => {
    const { rig } = await inHandoff();
    rig.say('done, thanks');
    await rig.settle();
    expect(rig.openRequests().map((r) => r.input.agentId)).toEqual(['writer']);
    const before = rig.statuses.length;
    rig.answer(
      agentReply('here is your poem', { handoffReturn: { completionStatus: 'completed', resultSummary: 'wrote a poem', artifactsCreated: ['poem.md'] } }),
    );
    await rig.settle();
    // The user hears the target first, then sees control go back; the source gets the result.
    const seen = rig.statuses.slice(before);
    expect(seen.map((s) => [s.final, s.message ? messageText(s.message) : s.route ? `${s.route.from}>${s.route.to}: ${s.route.reason}` : s.state])).toEqual([
      [false, 'here is your poem'],
      [false, 'writer>triage: handoff completed: wrote a poem'],
    ]);
    const toSource = rig.openRequests()[0]!;
    expect(toSource.input).toMatchObject({ agentId: 'triage', sender: 'writer', hop: 1 });
    expect(slotOf(toSource.input.message)).toEqual({
      handoffReturn: { completionStatus: 'completed', resultSummary: 'wrote a poem', artifactsCreated: ['poem.md'] },
    });
    expect(toSource.input.message.metadata?.[META.handoffResume]).toEqual({ sourceAgentId: 'triage', targetAgentId: 'writer', status: 'completed' });
    rig.answer(agentReply('glad writer could help'));
    await rig.settle();
    const final = rig.finals().at(-1)!;
    expect(messageText(final.message)).toBe('glad writer could help');
    expect(final.message?.metadata?.[META.inReplyTo]).toBe('u2');
    expect(final.error).toBeUndefined();
    expect(stepsOf(final)).toEqual(['user>writer', 'writer>triage']);
    expect(rig.snapshot.context.handoff).toBeUndefined();
    expect(rig.snapshot.children.handoff).toBeUndefined();
  });

  it("returnExpected: false — the target's return ends the turn; the source is not called and the next message is routed as usual", async () => {
    const { rig } = await inHandoff({ returnExpected: false });
    rig.say('done');
    await rig.settle();
    rig.answer(agentReply('all yours again', { handoffReturn: { completionStatus: 'completed' } }));
    await rig.settle();
    expect(rig.openRequests()).toEqual([]);
    expect(rig.finalTexts().at(-1)).toBe('writer: all yours again');
    expect(rig.snapshot.value).toBe('input-required');
    expect(rig.snapshot.context.handoff).toBeUndefined();
    rig.say('hello again');
    await rig.settle();
    expect(rig.openRequests().map((r) => r.input.agentId)).toEqual(['triage']);
  });

  it('a target whose first reply returns with completionStatus error is reported as failed to the source', async () => {
    const rig = new ThreadRig();
    rig.say('help');
    await rig.settle();
    rig.answer(agentReply('passing you on', { handoff: { targetAgentId: 'writer', contextSummary: 's', handoffReason: 'r' } }));
    await rig.settle();
    rig.answer(agentReply('cannot do it', { handoffReturn: { completionStatus: 'error', resultSummary: 'no ink' } }));
    await rig.settle();
    const toSource = rig.openRequests()[0]!;
    expect(toSource.input.agentId).toBe('triage');
    expect(messageText(toSource.input.message)).toBe('Handoff to writer failed: no ink');
    expect(slotOf(toSource.input.message)).toEqual({ handoffReturn: { completionStatus: 'error', resultSummary: 'no ink', artifactsCreated: [] } });
    expect(toSource.input.message.metadata?.[META.handoffResume]).toMatchObject({ status: 'failed' });
  });

  it('the handoff request names the real user of the thread', async () => {
    const { toWriter } = await inHandoff({ owner: 'gateway/ada' });
    expect(readHandoffRequest(toWriter.input.message)).toMatchObject({
      userId: 'ada',
      threadId: 't1',
      tenantId: 'demo',
      sourceAgentId: 'triage',
      targetAgentId: 'writer',
    });
  });

  it('a cancel between turns tells the user and starts a turn that goes straight to the source', async () => {
    const { rig } = await inHandoff();
    const before = rig.statuses.length;
    rig.actor.send({ type: 'troupe.cancel', reason: 'changed my mind', now: rig.now() });
    await rig.settle();
    const seen = rig.statuses.slice(before);
    expect(seen[0]).toMatchObject({ state: 'working', final: false });
    expect(messageText(seen[0]!.message)).toBe('Handoff to writer cancelled; back to triage.');
    expect(seen.find((s) => s.route)?.route).toMatchObject({ from: 'writer', to: 'triage', reason: 'handoff cancelled: changed my mind' });
    const toSource = rig.openRequests()[0]!;
    expect(toSource.input.agentId).toBe('triage');
    expect(slotOf(toSource.input.message)).toEqual({
      handoffReturn: { completionStatus: 'cancelled', resultSummary: 'changed my mind', artifactsCreated: [] },
    });
  });

  it('a deadline with returnExpected: false tells the user and leaves the source alone', async () => {
    const { rig } = await inHandoff({ returnExpected: false, config: { handoffMaxDurationMs: 5_000 } });
    expect(rig.clock.fireNext()).toBe(true);
    await rig.settle();
    const notice = rig.statuses.at(-1)!;
    expect(notice).toMatchObject({ state: 'input-required', final: false });
    expect(messageText(notice.message)).toBe('Handoff to writer failed: AGENT_TIMEOUT: the handoff to "writer" did not finish within 5000 ms');
    expect(rig.openRequests()).toEqual([]);
    expect(rig.snapshot.context.handoff).toBeUndefined();
  });

  it("a fan-out keeps the thread's time: ticks reach the orchestration and make executionTimeMs", async () => {
    const rig = new ThreadRig({ config: { usePolicy: true } });
    rig.say('weather and flights');
    await rig.settle();
    rig.decide({ agentId: 'triage', confidence: 0.9, reasoning: 'both', additionalAgents: ['researcher'] });
    await rig.settle();
    expect(rig.openRequests().map((r) => [r.input.agentId, r.input.fanOut])).toEqual([
      ['triage', true],
      ['researcher', true],
    ]);
    rig.actor.send({ type: 'troupe.tick', now: T0 + 250 });
    rig.answer(agentReply('sunny'));
    rig.answer(agentReply('booked'));
    await rig.settle();
    expect(rig.finals().at(-1)?.message?.metadata).toMatchObject({ agentsUsed: ['triage', 'researcher'], executionTimeMs: 250, taskState: 'completed' });
  });

  it('a restored thread runs its agent call again and re-arms its timeout and retry', async () => {
    const config = { retries: 1, retryDelayMs: 100, agentTimeoutMs: 1_000 };
    const first = new ThreadRig({ config });
    first.say('hello?');
    await first.settle();
    const persisted = JSON.parse(JSON.stringify(first.actor.getPersistedSnapshot()));
    first.stop(); // the node dies with its timers

    const rig = new ThreadRig({ config, snapshot: persisted });
    rig.actor.send({ type: 'troupe.restored', now: rig.now() });
    await rig.settle();
    // The same call again (same idempotency key), and its timeout is armed on the new node.
    expect(rig.openRequests().map((r) => [r.input.agentId, r.input.attempt, r.input.message.messageId])).toEqual([['triage', 0, 'u1']]);
    expect(rig.clock.fireNext()).toBe(true); // the agent never answers: the timeout fires
    await rig.settle();
    expect(rig.clock.fireNext()).toBe(true); // the retry delay
    await rig.settle();
    expect(rig.openRequests().map((r) => r.input.attempt)).toEqual([1]);
    rig.answer(agentReply('here now'));
    await rig.settle();
    expect(rig.finalTexts()).toEqual(['triage: here now']);
  });

  it('a thread restored mid fan-out runs the fan-out calls again (as fan-out calls) and finishes it', async () => {
    const config = { usePolicy: true, agentTimeoutMs: 1_000 };
    const first = new ThreadRig({ config });
    first.say('weather and flights');
    await first.settle();
    first.decide({ agentId: 'triage', confidence: 0.9, reasoning: 'both', additionalAgents: ['researcher'] });
    await first.settle();
    first.answer(agentReply('sunny')); // triage answered before the node died; researcher had not
    await first.settle();
    const persisted = JSON.parse(JSON.stringify(first.actor.getPersistedSnapshot()));
    first.stop();

    const rig = new ThreadRig({ config, snapshot: persisted });
    rig.actor.send({ type: 'troupe.restored', now: T0 + 400 });
    await rig.settle();
    expect(rig.openRequests().map((r) => [r.input.agentId, r.input.fanOut, r.input.message.messageId])).toEqual([['researcher', true, 'u1']]);
    rig.answer(agentReply('booked'));
    await rig.settle();
    expect(rig.finals().at(-1)?.message?.metadata).toMatchObject({ agentsUsed: ['triage', 'researcher'], executionTimeMs: 400 });
    expect(rig.snapshot.value).toBe('input-required');
  });

  it('an approval nobody decides on is refused at its deadline: the thread sends the waiting agent its own timeout decision, also after a restore', async () => {
    const first = new ThreadRig();
    first.say('refund it', { [CLIENT_ROUTING_URI]: { recipient: 'writer' } });
    await first.settle();
    first.answer(asksApproval('writer', 'ask-1'));
    await first.settle();
    expect(first.snapshot.value).toBe('input-required');
    expect(first.snapshot.context.approval).toEqual({ agent: 'writer', messageId: 'ask-1', expiresAt: T0 + 500 });
    expect(first.clock.pending).toBe(1); // the deadline
    const persisted = JSON.parse(JSON.stringify(first.actor.getPersistedSnapshot()));
    first.stop(); // the node dies with its timers

    // The next owner loads the record 400 ms on: the deadline is re-armed for what is left of it.
    const rig = new ThreadRig({ snapshot: persisted });
    rig.actor.send({ type: 'troupe.restored', now: T0 + 400 });
    await rig.settle();
    expect(rig.openRequests()).toEqual([]);
    expect(rig.clock.fireNext()).toBe(true);
    expect(rig.clock.now).toBe(100);
    await rig.settle();
    const [request] = rig.openRequests();
    expect(request?.input.agentId).toBe('writer');
    expect(request?.input.message.messageId).toBe('ask-1:timeout');
    expect(request?.input.message.parts.find((p) => p.kind === 'data')).toEqual({ kind: 'data', data: { [META.approval]: { decision: 'timeout' } } });
    expect(rig.snapshot.context.approval).toBeUndefined();
    rig.answer(agentReply('Nobody approved it; I did not refund.'));
    await rig.settle();
    expect(rig.finals().map((f) => [f.message?.metadata?.[META.inReplyTo], f.message && messageText(f.message)])).toEqual([
      ['ask-1:timeout', 'Nobody approved it; I did not refund.'],
    ]);
    expect(rig.snapshot.value).toBe('input-required');
    expect(rig.clock.pending).toBe(0);
  });

  it('a decision before the deadline disarms it; a deadline already past when the thread is restored fires at once', async () => {
    const rig = new ThreadRig();
    rig.say('refund it');
    await rig.settle();
    rig.answer(asksApproval('triage', 'ask-2'));
    await rig.settle();
    expect(rig.snapshot.context.approval?.messageId).toBe('ask-2');
    rig.say('yes', { [META.approval]: { decision: 'approve' } });
    await rig.settle();
    // The agent that waited answers otherwise: nothing waits, no deadline is armed.
    rig.answer(agentReply('Refunded.'));
    await rig.settle();
    expect(rig.snapshot.context.approval).toBeUndefined();
    expect(rig.clock.pending).toBe(0);

    rig.say('and the other one');
    await rig.settle();
    rig.answer(asksApproval('triage', 'ask-3'));
    await rig.settle();
    const persisted = JSON.parse(JSON.stringify(rig.actor.getPersistedSnapshot()));
    rig.stop();
    const late = new ThreadRig({ snapshot: persisted });
    late.actor.send({ type: 'troupe.restored', now: T0 + 10_000 });
    await late.settle();
    expect(late.clock.fireNext()).toBe(true);
    expect(late.clock.now).toBe(0);
    await late.settle();
    expect(late.openRequests().map((r) => [r.input.agentId, r.input.message.messageId])).toEqual([['triage', 'ask-3:timeout']]);
    late.stop();
  });
});
