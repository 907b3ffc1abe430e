/**
 * A conversation thread: one A2A task. Its states are the task states; a turn runs the router and agent
 * calls as child actors and ends in `input-required` unless an agent completes the task (or, with
 * `taskEnd: answer`, its answer does).
 *
 * Pure: agent calls and the router policy are injected actors (`agentCall`, `router`), and everything
 * the outside world must see leaves as emitted `troupe.thread.status` events (the host publishes them).
 * The actions and guards live with their concern (handoff.ts, turn.ts, routing.ts); this file is the
 * statechart.
 */
import type { DoneActorEvent } from 'xstate';
import type { TaskState } from '../../protocol/a2a.js';
import { USER } from '../../protocol/routing.js';
import type { AgentCallOutput } from '../agent-call.js';
import type { OrchestrationOutput } from '../orchestration.js';
import type { RouteDecision } from '../../routing/route.js';
import type { RouterInput } from '../router.js';
import { clarificationRoute, replyDecision, threadSetup, userDecisionWithoutPolicy, userRouterInput } from './routing.js';
import { delegationOrchestrationInput } from './delegation.js';
import { DEFAULT_THREAD_CONFIG, type SynthesisInput, type SynthesisOutput, type ThreadContext } from './types.js';

/**
 * How a turn that answers the user ends: the answer goes out (`answerUser`) and the thread waits for the
 * user. A transition, not a state of its own: an eventless state in between cost each turn a microstep.
 */
const ANSWERED = '#thread.input-required';
const ANSWER = { type: 'answerUser', params: { state: 'input-required' } } as const;

export const threadMachine = threadSetup.createMachine({
  id: 'thread',
  context: ({ input }) => ({
    threadId: input.threadId,
    tenant: input.tenant,
    owner: input.owner,
    contextId: input.contextId ?? input.threadId,
    config: { ...DEFAULT_THREAD_CONFIG, ...input.config },
    agents: input.agents ?? {},
    history: input.history ?? [],
    pending: [],
    routeLog: [],
    now: input.now,
    createdAt: input.now,
    turns: 0,
  }),
  initial: 'submitted',
  on: {
    'troupe.agents': { actions: 'setAgents' },
    'troupe.tick': { actions: ['setNow', 'tickHandoff'] },
    'troupe.restored': { actions: ['setNow', 'tickHandoff'] },
    'xstate.done.actor.handoff': { actions: 'onHandoffEnded' },
  },
  states: {
    submitted: {
      on: {
        'troupe.user.message': { target: 'working', actions: ['setNow', 'queueUserMessage'] },
        'troupe.cancel': { target: 'canceled', actions: 'setNow' },
      },
    },
    working: {
      // No `working` of its own here: a turn routed at once says `working` with its route step (one
      // event, not two in the same step); only the router's decision, which takes time, is preceded by one.
      entry: ['startTurn', 'notifyHandoffOfUserMessage'],
      on: {
        'troupe.user.message': { actions: ['setNow', 'queueUserMessage'] },
        'troupe.cancel': [
          { guard: 'hasHandoff', actions: ['setNow', 'cancelHandoff'] },
          { target: 'canceled', actions: 'setNow' },
        ],
      },
      initial: 'starting',
      states: {
        /**
         * A turn that gives control back to a handoff's source goes to it. Any other is routed: at once
         * when no policy needs asking (the active handoff's target, an agent the user addressed, the
         * entry agent), else by the router actor (`routing`).
         */
        starting: {
          always: [
            { guard: 'startsWithResume', target: 'calling', actions: ['applyQueuedResume', 'announceRoute'] },
            { guard: 'routerPolicyDecides', target: 'routing' },
            {
              guard: { type: 'routesToAgent', params: ({ context }) => userDecisionWithoutPolicy(context) },
              target: 'calling',
              actions: [{ type: 'applyAgentRoute', params: ({ context }) => userDecisionWithoutPolicy(context) }, 'announceRoute'],
            },
            { target: ANSWERED, actions: [{ type: 'recordRouteError', params: ({ context }) => userDecisionWithoutPolicy(context) }, ANSWER] },
          ],
        },
        /** The router actor asks the team's policy which agent takes the user's message. */
        routing: {
          entry: 'announceWorking',
          invoke: {
            id: 'router',
            src: 'router',
            input: ({ context }): RouterInput => userRouterInput(context),
            onDone: [
              {
                guard: { type: 'routesToFanOut', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
                target: 'orchestrating',
                actions: [
                  { type: 'applyAgentRoute', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
                  { type: 'applyFanOutRoute', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
                  'announceRoute',
                ],
              },
              {
                guard: { type: 'routesToAgent', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
                target: 'calling',
                actions: [{ type: 'applyAgentRoute', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output }, 'announceRoute'],
              },
              {
                guard: { type: 'routesToClarificationAgent', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
                target: 'calling',
                actions: [
                  {
                    type: 'applyAgentRoute',
                    params: ({ context, event }: { context: ThreadContext; event: DoneActorEvent<RouteDecision> }) => clarificationRoute(context, event.output),
                  },
                  { type: 'markClarifying', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
                  'announceRoute',
                ],
              },
              {
                guard: { type: 'routesToClarify', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
                target: '#thread.input-required',
                actions: { type: 'askToClarify', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
              },
              {
                target: ANSWERED,
                actions: [{ type: 'recordRouteError', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output }, ANSWER],
              },
            ],
            onError: { target: ANSWERED, actions: ANSWER },
          },
        },
        /** One agent holds the message; the call retries and times out on its own. */
        calling: {
          on: { 'troupe.restored': { actions: ['setNow', 'tickHandoff', 'rearmAgentCall'] } },
          invoke: {
            id: 'agentCall',
            src: 'agentCall',
            input: ({ context }) => {
              const turn = context.turn;
              return {
                agentId: turn?.current ?? '',
                message: turn?.outgoing ?? { kind: 'message' as const, role: 'user' as const, messageId: 'none', parts: [{ kind: 'text' as const, text: '' }] },
                sender: turn?.from ?? USER,
                hop: turn?.hops ?? 0,
                timeoutMs: context.config.agentTimeoutMs,
                retries: context.config.retries,
                retryDelayMs: context.config.retryDelayMs,
                now: context.now,
              };
            },
            onDone: [
              {
                guard: { type: 'agentCompletedTask', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                target: '#thread.completed',
                actions: [
                  { type: 'recordAgentAnswer', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                  { type: 'answerUser', params: { state: 'completed' } },
                ],
              },
              {
                guard: { type: 'agentEndsTaskFailed', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                target: '#thread.failed',
                actions: [
                  { type: 'recordAgentAnswer', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                  { type: 'answerUser', params: { state: 'failed' } },
                ],
              },
              {
                // Not the agent's to end: its words answer the turn, with AGENT_ERROR, and the thread goes on.
                guard: { type: 'agentFailedTurn', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                target: ANSWERED,
                actions: [
                  { type: 'recordAgentAnswer', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                  { type: 'recordAgentGaveUp', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                  ANSWER,
                ],
              },
              {
                guard: { type: 'callSucceeded', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                target: 'inspectingReply',
                actions: { type: 'recordAgentAnswer', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
              },
              {
                guard: { type: 'handoffCallFailed', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                target: 'updatingHandoff',
                actions: [
                  { type: 'recordCallError', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                  { type: 'tellHandoffOfFailure', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                ],
              },
              {
                target: ANSWERED,
                actions: [{ type: 'recordCallError', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output }, ANSWER],
              },
            ],
          },
        },
        /**
         * Handoffs first (a target's answer, a request to hand off), then delegation; any other reply goes
         * where the client-routing rules say: the user, back to its sender, or another agent.
         */
        inspectingReply: {
          always: [
            { guard: 'isHandoffStartReply', target: 'updatingHandoff', actions: 'tellHandoffOfFirstReply' },
            { guard: 'requestsHandoffWhileOpen', target: ANSWERED, actions: ['recordHandoffConflict', ANSWER] },
            { guard: 'isHandoffTargetReply', target: 'updatingHandoff', actions: 'tellHandoffOfReply' },
            { guard: 'hasMalformedHandoff', target: ANSWERED, actions: ['recordMalformedHandoff', ANSWER] },
            { guard: 'requestsHandoff', target: 'calling', actions: ['startHandoff', 'announceRoute'] },
            { guard: 'hasRefusedDelegation', target: ANSWERED, actions: ['recordRefusedDelegation', ANSWER] },
            { guard: 'requestsDelegation', target: 'delegating', actions: ['startDelegation', 'announceRoute'] },
            {
              guard: { type: 'routesToAgent', params: ({ context }) => replyDecision(context) },
              target: 'calling',
              actions: [{ type: 'applyAgentRoute', params: ({ context }) => replyDecision(context) }, 'announceRoute'],
            },
            { target: ANSWERED, actions: [{ type: 'recordRouteError', params: ({ context }) => replyDecision(context) }, ANSWER] },
          ],
        },
        /** The handoff actor was told how its target answered (or failed); one that ends is waited for. */
        updatingHandoff: {
          always: [
            { guard: 'handoffEnding', target: 'awaitingHandoffEnd' },
            { target: ANSWERED, actions: ANSWER },
          ],
        },
        /** The handoff's output says where control goes: back to the source within this turn, or not. */
        awaitingHandoffEnd: {
          on: {
            'xstate.done.actor.handoff': [
              {
                guard: { type: 'handoffReturnsToSource', params: ({ event }) => event.output },
                target: 'calling',
                actions: [{ type: 'resumeSource', params: ({ event }) => event.output }, 'announceRoute'],
              },
              {
                target: ANSWERED,
                actions: [{ type: 'concludeHandoff', params: ({ event }) => event.output }, ANSWER],
              },
            ],
          },
        },
        /** The router named several agents: fan out, then aggregate their answers into one. */
        orchestrating: {
          on: {
            'troupe.tick': { actions: ['setNow', 'tickHandoff', 'tickOrchestration'] },
            'troupe.restored': { actions: ['setNow', 'tickHandoff', 'rearmOrchestration'] },
          },
          invoke: {
            id: 'orchestration',
            src: 'orchestration',
            input: ({ context }) => {
              const turn = context.turn;
              const primary = turn?.route[0]?.to ?? turn?.current ?? '';
              const extra = (turn?.route ?? []).slice(1).map((s) => s.to);
              const o = context.config.orchestration;
              return {
                decision: { agentId: primary, confidence: turn?.route[0]?.confidence ?? 1, reasoning: turn?.route[0]?.reason ?? '', additionalAgents: extra },
                message: turn?.outgoing ?? { kind: 'message' as const, role: 'user' as const, messageId: 'none', parts: [{ kind: 'text' as const, text: '' }] },
                strategy: o.strategy,
                maxParallelAgents: o.maxParallelAgents,
                agentTimeoutMs: context.config.agentTimeoutMs,
                retries: context.config.retries,
                retryDelayMs: context.config.retryDelayMs,
                startedAt: context.now,
                ...(o.fallbackMessage ? { fallbackMessage: o.fallbackMessage } : {}),
                ...(o.partialFailureTemplate ? { partialFailureTemplate: o.partialFailureTemplate } : {}),
              };
            },
            onDone: [
              {
                guard: { type: 'synthesises', params: ({ event }: { event: DoneActorEvent<OrchestrationOutput> }) => event.output },
                target: 'synthesizing',
                actions: [
                  { type: 'recordOrchestration', params: ({ event }: { event: DoneActorEvent<OrchestrationOutput> }) => event.output },
                  { type: 'startSynthesis', params: ({ event }: { event: DoneActorEvent<OrchestrationOutput> }) => event.output },
                ],
              },
              {
                target: ANSWERED,
                actions: [{ type: 'recordOrchestration', params: ({ event }: { event: DoneActorEvent<OrchestrationOutput> }) => event.output }, ANSWER],
              },
            ],
            onError: { target: ANSWERED, actions: ANSWER },
          },
        },
        /** The team's model writes one answer from the fan-out's answers (streamed); the join stands if it fails. */
        synthesizing: {
          invoke: {
            id: 'synthesize',
            src: 'synthesize',
            input: ({ context }): SynthesisInput => context.turn?.synthesis ?? { threadId: context.threadId, messageId: 'none', question: '', answers: [] },
            onDone: {
              target: ANSWERED,
              actions: [{ type: 'recordSynthesis', params: ({ event }: { event: DoneActorEvent<SynthesisOutput> }) => event.output }, ANSWER],
            },
            onError: { target: ANSWERED, actions: ['keepJoin', ANSWER] },
          },
        },
        /** An agent delegated: its delegates are called (orchestration), and their results go back to it. */
        delegating: {
          on: {
            'troupe.tick': { actions: ['setNow', 'tickHandoff', 'tickOrchestration'] },
            'troupe.restored': { actions: ['setNow', 'tickHandoff', 'rearmOrchestration'] },
          },
          invoke: {
            id: 'orchestration',
            src: 'orchestration',
            input: ({ context }) => delegationOrchestrationInput(context),
            onDone: {
              target: 'calling',
              actions: [
                { type: 'returnDelegationResults', params: ({ event }: { event: DoneActorEvent<OrchestrationOutput> }) => event.output },
                'announceRoute',
              ],
            },
            onError: { target: ANSWERED, actions: ANSWER },
          },
        },
      },
    },
    'input-required': {
      // An approval the thread waits on is refused at its deadline (approval.ts).
      entry: 'armApprovalDeadline',
      exit: 'cancelApprovalDeadline',
      always: [
        { guard: 'answeredTask', target: 'completed' },
        { guard: 'hasPending', target: 'working' },
      ],
      on: {
        'troupe.user.message': { target: 'working', actions: ['setNow', 'queueUserMessage'] },
        'troupe.restored': { actions: ['setNow', 'tickHandoff', 'armApprovalDeadline'] },
        'troupe.approval.timeout': { guard: 'approvalDue', target: 'working', actions: 'queueApprovalTimeout' },
        // A first cancel ends the handoff: its output queues the resume, and `always` starts that turn.
        'troupe.cancel': [
          { guard: 'hasHandoff', actions: ['setNow', 'cancelHandoff'] },
          { target: 'canceled', actions: 'setNow' },
        ],
      },
    },
    completed: { type: 'final' },
    canceled: { type: 'final', entry: ['announceCanceled', 'clearTurn'] },
    failed: { type: 'final' },
  },
});

/** The A2A task state a thread snapshot stands for. */
export function taskStateOf(value: unknown): TaskState {
  if (typeof value === 'string') return value as TaskState;
  if (value && typeof value === 'object' && 'working' in value) return 'working';
  return 'unknown';
}
