/**
 * A conversation thread: one A2A task. Its states are the task states; a turn runs the router and agent
 * calls as child actors and ends in `input-required` unless an agent completes the task.
 *
 * Pure: agent calls and the router policy are injected actors (`agentCall`, `router`), and everything
 * the outside world must see leaves as emitted `troupe.thread.status` events (the host publishes them).
 */
import { assign, emit, enqueueActions, setup, type DoneActorEvent } from 'xstate';
import type { Message, TaskState } from '../protocol/a2a.js';
import type { ErrorBody } from '../protocol/errors.js';
import { USER } from '../protocol/routing.js';
import { agentCallMachine, type AgentCallOutput } from './agent-call.js';
import type { AgentDirectory, RouteDecision } from './route.js';
import { routerMachine, type RouterInput } from './router.js';
import { orchestrationMachine, type OrchestrationOutput, type OrchestrationStrategy } from './orchestration.js';

/** Metadata keys Troupe adds to messages it publishes. */
export const META = {
  agent: 'troupe/agent',
  route: 'troupe/route',
  error: 'troupe/error',
  hops: 'troupe/hops',
  /** The user message a final answer answers, so a client with several messages in flight can match them. */
  inReplyTo: 'troupe/inReplyTo',
} as const;

export interface ThreadConfig {
  entryAgent: string;
  maxHops: number;
  historyLimit: number;
  agentTimeoutMs: number;
  retries: number;
  retryDelayMs: number;
  usePolicy: boolean;
  threshold: number;
  maxAttempts: number;
  fallbackAgent?: string;
  clarifyText: string;
  /** How a decision naming several agents fans out. */
  orchestration: { strategy: OrchestrationStrategy; maxParallelAgents: number; fallbackMessage?: string; partialFailureTemplate?: string };
}

export const DEFAULT_THREAD_CONFIG: ThreadConfig = {
  entryAgent: 'triage',
  maxHops: 10,
  historyLimit: 50,
  agentTimeoutMs: 30_000,
  retries: 2,
  retryDelayMs: 1_000,
  usePolicy: false,
  threshold: 0.7,
  maxAttempts: 3,
  clarifyText: "I'm not sure which of our agents should take this. Could you say a bit more about what you need?",
  orchestration: { strategy: 'parallel', maxParallelAgents: 3 },
};

export interface ThreadInput {
  threadId: string;
  tenant: string;
  contextId?: string;
  config?: Partial<ThreadConfig>;
  agents?: AgentDirectory;
  now: number;
}

/** One step of a turn's route, kept in the task metadata and shown by `troupe send`. */
export interface RouteStep {
  from: string;
  to: string;
  hop: number;
  reason: string;
  at: number;
  confidence?: number;
}

export interface Turn {
  userMessageId: string;
  /** The agent holding the message now. */
  current: string;
  /** Who handed `current` its message (`user` or an agent id). */
  from: string;
  /** The message being sent to `current`. */
  outgoing: Message;
  /** Who sent the message to each agent in the chain, `user` at the bottom. */
  senderStack: string[];
  hops: number;
  route: RouteStep[];
  lastAnswer?: Message;
  lastFrom?: string;
  startedAt: number;
}

export interface ThreadContext {
  threadId: string;
  tenant: string;
  contextId: string;
  config: ThreadConfig;
  agents: AgentDirectory;
  history: Message[];
  /** User messages that arrived while a turn was running; handled in order afterwards. */
  pending: Message[];
  turn?: Turn;
  /** The last routing decisions across turns (bounded). */
  routeLog: RouteStep[];
  lastError?: ErrorBody;
  now: number;
  turns: number;
}

export type ThreadEvent =
  | { type: 'troupe.user.message'; message: Message; now?: number }
  | { type: 'troupe.agents'; agents: AgentDirectory }
  | { type: 'troupe.cancel'; reason?: string; now?: number }
  | { type: 'troupe.tick'; now: number };

export interface ThreadStatusEmitted {
  type: 'troupe.thread.status';
  state: TaskState;
  final: boolean;
  message?: Message;
  route?: RouteStep;
  error?: ErrorBody;
}

const ROUTE_LOG_LIMIT = 50;

function prune<T>(items: T[], limit: number): T[] {
  return items.length > limit ? items.slice(items.length - limit) : items;
}

function textOf(message: Message | undefined): string {
  return (message?.parts ?? []).flatMap((p) => (p.kind === 'text' ? [p.text] : [])).join('\n');
}

/** An agent-authored message from Troupe itself (errors, clarification). */
function systemMessage(context: ThreadContext, id: string, text: string, metadata: Record<string, unknown>): Message {
  return {
    kind: 'message',
    role: 'agent',
    messageId: id,
    contextId: context.contextId,
    taskId: context.threadId,
    parts: [{ kind: 'text', text }],
    metadata: { [META.agent]: 'troupe', ...metadata },
  };
}

/** The message an agent receives: the previous content, addressed from the thread's point of view. */
function messageFor(context: ThreadContext, source: Message, id: string, from: string): Message {
  return {
    kind: 'message',
    role: 'user',
    messageId: id,
    contextId: context.contextId,
    taskId: context.threadId,
    parts: source.parts,
    ...(source.extensions ? { extensions: source.extensions } : {}),
    metadata: { ...stripRouting(source.metadata), [META.agent]: from },
  };
}

function stripRouting(metadata: Record<string, unknown> | undefined): Record<string, unknown> {
  if (!metadata) return {};
  const { [META.route]: _r, [META.error]: _e, ...rest } = metadata;
  return Object.fromEntries(Object.entries(rest).filter(([k]) => !k.startsWith('https://ranch.woi.dev/extensions/client-routing')));
}

function agentReplyMessage(output: Extract<AgentCallOutput, { ok: true }>): Message | undefined {
  const { reply } = output;
  if (reply.kind === 'message') return reply;
  if (reply.kind === 'task') return reply.status.message;
  return undefined;
}

export const threadSetup = setup({
  types: {
    input: {} as ThreadInput,
    context: {} as ThreadContext,
    events: {} as ThreadEvent,
    emitted: {} as ThreadStatusEmitted,
  },
  actors: {
    agentCall: agentCallMachine,
    router: routerMachine,
    orchestration: orchestrationMachine,
  },
  guards: {
    hasPending: ({ context }) => context.pending.length > 0,
    routesToAgent: (_, decision: RouteDecision) => decision.to === 'agent',
    routesToFanOut: (_, decision: RouteDecision) => decision.to === 'agent' && (decision.additionalAgents?.length ?? 0) > 0,
    routesToClarify: (_, decision: RouteDecision) => decision.to === 'clarify',
    callSucceeded: (_, output: AgentCallOutput) => output.ok && output.reply.kind !== 'error',
    agentCompletedTask: (_, output: AgentCallOutput) => output.ok && output.reply.kind === 'task' && output.reply.status.state === 'completed',
    agentFailedTask: (_, output: AgentCallOutput) =>
      output.ok && output.reply.kind === 'task' && ['failed', 'rejected'].includes(output.reply.status.state),
  },
  actions: {
    setNow: assign({
      now: ({ context, event }) => ('now' in event && typeof event.now === 'number' ? event.now : context.now),
    }),
    setAgents: assign({
      agents: ({ context, event }) => (event.type === 'troupe.agents' ? event.agents : context.agents),
    }),
    queueUserMessage: assign({
      pending: ({ context, event }) => (event.type === 'troupe.user.message' ? [...context.pending, event.message] : context.pending),
    }),
    /** Takes the next queued user message and starts a turn with it. */
    startTurn: assign(({ context }) => {
      const [message, ...rest] = context.pending;
      if (!message) return {};
      const userMessage: Message = { ...message, contextId: context.contextId, taskId: context.threadId };
      return {
        pending: rest,
        history: prune([...context.history, userMessage], context.config.historyLimit),
        turns: context.turns + 1,
        lastError: undefined,
        turn: {
          userMessageId: userMessage.messageId,
          current: USER,
          from: USER,
          outgoing: userMessage,
          senderStack: [],
          hops: 0,
          route: [],
          startedAt: context.now,
        },
      };
    }),
    /** Applies a router decision that sends the message on to an agent. */
    applyAgentRoute: assign(({ context }, decision: RouteDecision) => {
      const turn = context.turn;
      if (!turn || decision.to !== 'agent') return {};
      const from = turn.current;
      const hop = decision.mode === 'initial' ? 0 : turn.hops + 1;
      const step: RouteStep = {
        from,
        to: decision.agentId,
        hop,
        reason: decision.reason,
        at: context.now,
        ...(decision.confidence !== undefined ? { confidence: decision.confidence } : {}),
      };
      const source = decision.mode === 'initial' ? turn.outgoing : (turn.lastAnswer ?? turn.outgoing);
      const senderStack =
        decision.mode === 'initial' ? [USER] : decision.mode === 'forward' ? [...turn.senderStack, from] : turn.senderStack.slice(0, -1);
      const outgoingId = decision.mode === 'initial' ? source.messageId : `${source.messageId}>${decision.agentId}`;
      return {
        turn: {
          ...turn,
          current: decision.agentId,
          from,
          hops: hop,
          senderStack,
          route: [...turn.route, step],
          outgoing: decision.mode === 'initial' ? source : messageFor(context, source, outgoingId, from),
        },
        routeLog: prune([...context.routeLog, step], ROUTE_LOG_LIMIT),
      };
    }),
    announceRoute: emit(({ context }): ThreadStatusEmitted => {
      const step = context.turn?.route.at(-1);
      return { type: 'troupe.thread.status', state: 'working', final: false, ...(step ? { route: step } : {}) };
    }),
    recordAgentAnswer: assign(({ context }, output: AgentCallOutput) => {
      const turn = context.turn;
      if (!turn || !output.ok) return {};
      const reply = agentReplyMessage(output);
      if (!reply) return {};
      const answer: Message = {
        ...reply,
        contextId: context.contextId,
        taskId: context.threadId,
        metadata: { ...reply.metadata, [META.agent]: output.agentId },
      };
      return {
        turn: { ...turn, lastAnswer: answer, lastFrom: output.agentId },
        history: prune([...context.history, answer], context.config.historyLimit),
      };
    }),
    /** A fan-out's aggregated answer becomes the turn's answer, with its metadata. */
    recordOrchestration: assign(({ context }, output: OrchestrationOutput) => {
      const turn = context.turn;
      if (!turn) return {};
      const answer: Message = {
        ...output.message,
        contextId: context.contextId,
        taskId: context.threadId,
        metadata: { ...output.message.metadata, [META.agent]: output.metadata.agents_used.join('+') || 'troupe', ...output.metadata },
      };
      const failures = output.metadata.failures;
      return {
        turn: { ...turn, lastAnswer: answer, lastFrom: turn.current },
        history: prune([...context.history, answer], context.config.historyLimit),
        lastError:
          output.metadata.task_state === 'failed'
            ? { code: 'WORKFLOW_ERROR' as const, message: `every agent failed: ${failures.map((f) => `${f.agentId} (${f.code})`).join(', ')}` }
            : undefined,
      };
    }),
    /** Route steps for the extra agents of a fan-out (the primary was recorded by applyAgentRoute). */
    applyFanOutRoute: assign(({ context }, decision: RouteDecision) => {
      const turn = context.turn;
      if (!turn || decision.to !== 'agent') return {};
      const steps: RouteStep[] = (decision.additionalAgents ?? []).map((agentId) => ({
        from: USER,
        to: agentId,
        hop: 0,
        reason: `fan-out (${context.config.orchestration.strategy}) with ${decision.agentId}`,
        at: context.now,
      }));
      return { turn: { ...turn, route: [...turn.route, ...steps] }, routeLog: prune([...context.routeLog, ...steps], ROUTE_LOG_LIMIT) };
    }),
    recordCallError: assign({
      lastError: (_, output: AgentCallOutput) => {
        if (!output.ok) return output.error;
        if (output.reply.kind === 'error') return output.reply.error;
        return undefined;
      },
    }),
    recordRouteError: assign({
      lastError: ({ context }, decision: RouteDecision) => (decision.to === 'user' && decision.error ? decision.error : context.lastError),
    }),
    /** Ends the turn: the user gets the last answer (with any error attached), or the error alone. */
    answerUser: enqueueActions(({ context, enqueue }, params: { state: TaskState; reason?: string }) => {
      const turn = context.turn;
      const error = context.lastError;
      const routeMeta = {
        [META.route]: turn?.route ?? [],
        [META.hops]: turn?.hops ?? 0,
        ...(turn ? { [META.inReplyTo]: turn.userMessageId } : {}),
        ...(error ? { [META.error]: error } : {}),
      };
      let message: Message;
      if (turn?.lastAnswer) {
        message = { ...turn.lastAnswer, metadata: { ...turn.lastAnswer.metadata, ...routeMeta } };
      } else {
        const text = error ? `${error.code}: ${error.message}` : (params.reason ?? 'No agent answered.');
        message = systemMessage(context, `${turn?.userMessageId ?? 'thread'}:error`, text, routeMeta);
      }
      if (!turn?.lastAnswer) {
        enqueue.assign({ history: prune([...context.history, message], context.config.historyLimit) });
      }
      enqueue.emit({ type: 'troupe.thread.status', state: params.state, final: true, message, ...(error ? { error } : {}) });
      enqueue.assign({ turn: undefined });
    }),
    askToClarify: enqueueActions(({ context, enqueue }, decision: RouteDecision) => {
      const reason = decision.to === 'clarify' ? decision.reason : '';
      const message = systemMessage(context, `${context.turn?.userMessageId ?? 'thread'}:clarify`, context.config.clarifyText, {
        'troupe/clarify': { reason, confidence: decision.to === 'clarify' ? decision.confidence : undefined },
        ...(context.turn ? { [META.inReplyTo]: context.turn.userMessageId } : {}),
      });
      enqueue.assign({ history: prune([...context.history, message], context.config.historyLimit), turn: undefined });
      enqueue.emit({ type: 'troupe.thread.status', state: 'input-required', final: true, message });
    }),
    announceWorking: emit({ type: 'troupe.thread.status', state: 'working', final: false }),
    announceCanceled: emit(({ context }): ThreadStatusEmitted => ({
      type: 'troupe.thread.status',
      state: 'canceled',
      final: true,
      message: systemMessage(context, `${context.threadId}:canceled`, 'The task was canceled.', {}),
    })),
    clearTurn: assign({ turn: undefined }),
  },
});

export const threadMachine = threadSetup.createMachine({
  id: 'thread',
  context: ({ input }) => ({
    threadId: input.threadId,
    tenant: input.tenant,
    contextId: input.contextId ?? input.threadId,
    config: { ...DEFAULT_THREAD_CONFIG, ...input.config },
    agents: input.agents ?? {},
    history: [],
    pending: [],
    routeLog: [],
    now: input.now,
    turns: 0,
  }),
  initial: 'submitted',
  on: {
    'troupe.agents': { actions: 'setAgents' },
    'troupe.tick': { actions: 'setNow' },
  },
  states: {
    submitted: {
      on: {
        'troupe.user.message': { target: 'working', actions: ['setNow', 'queueUserMessage'] },
        'troupe.cancel': { target: 'canceled', actions: 'setNow' },
      },
    },
    working: {
      entry: ['startTurn', 'announceWorking'],
      on: {
        'troupe.user.message': { actions: ['setNow', 'queueUserMessage'] },
        'troupe.cancel': { target: 'canceled', actions: 'setNow' },
      },
      initial: 'routing',
      states: {
        /** The router picks the first agent for the user's message. */
        routing: {
          invoke: {
            id: 'router',
            src: 'router',
            input: ({ context }): RouterInput => ({
              kind: 'user',
              message: context.turn?.outgoing ?? { kind: 'message', role: 'user', messageId: 'none', parts: [{ kind: 'text', text: '' }] },
              agents: context.agents,
              entryAgent: context.config.entryAgent,
              usePolicy: context.config.usePolicy,
              threshold: context.config.threshold,
              maxAttempts: context.config.maxAttempts,
              ...(context.config.fallbackAgent ? { fallbackAgent: context.config.fallbackAgent } : {}),
            }),
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
                actions: [
                  { type: 'applyAgentRoute', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
                  'announceRoute',
                ],
              },
              {
                guard: { type: 'routesToClarify', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
                target: '#thread.input-required',
                actions: { type: 'askToClarify', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
              },
              {
                target: 'answering',
                actions: { type: 'recordRouteError', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
              },
            ],
            onError: { target: 'answering' },
          },
        },
        /** One agent holds the message; the call retries and times out on its own. */
        calling: {
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
                guard: { type: 'agentFailedTask', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                target: '#thread.failed',
                actions: [
                  { type: 'recordAgentAnswer', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                  { type: 'answerUser', params: { state: 'failed' } },
                ],
              },
              {
                guard: { type: 'callSucceeded', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                target: 'routingReply',
                actions: { type: 'recordAgentAnswer', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
              },
              {
                target: 'answering',
                actions: { type: 'recordCallError', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
              },
            ],
          },
        },
        /** The router named several agents: fan out, then aggregate their answers into one. */
        orchestrating: {
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
            onDone: {
              target: 'answering',
              actions: { type: 'recordOrchestration', params: ({ event }: { event: DoneActorEvent<OrchestrationOutput> }) => event.output },
            },
            onError: { target: 'answering' },
          },
        },
        /** The router decides where the agent's reply goes: the user, back to its sender, or another agent. */
        routingReply: {
          invoke: {
            id: 'router',
            src: 'router',
            input: ({ context }): RouterInput => {
              const turn = context.turn;
              return {
                kind: 'reply',
                reply: turn?.lastAnswer ?? { kind: 'message', role: 'agent', messageId: 'none', parts: [{ kind: 'text', text: '' }] },
                from: turn?.lastFrom ?? turn?.current ?? '',
                senderStack: turn?.senderStack ?? [],
                hops: turn?.hops ?? 0,
                maxHops: context.config.maxHops,
                agents: context.agents,
              };
            },
            onDone: [
              {
                guard: { type: 'routesToAgent', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
                target: 'calling',
                actions: [
                  { type: 'applyAgentRoute', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
                  'announceRoute',
                ],
              },
              {
                target: 'answering',
                actions: { type: 'recordRouteError', params: ({ event }: { event: DoneActorEvent<RouteDecision> }) => event.output },
              },
            ],
            onError: { target: 'answering' },
          },
        },
        answering: {
          always: {
            target: '#thread.input-required',
            actions: { type: 'answerUser', params: { state: 'input-required' } },
          },
        },
      },
    },
    'input-required': {
      always: { guard: 'hasPending', target: 'working' },
      on: {
        'troupe.user.message': { target: 'working', actions: ['setNow', 'queueUserMessage'] },
        'troupe.cancel': { target: 'canceled', actions: 'setNow' },
      },
    },
    completed: { type: 'final' },
    canceled: { type: 'final', entry: ['clearTurn', 'announceCanceled'] },
    failed: { type: 'final' },
  },
});

/** The A2A task state a thread snapshot stands for. */
export function taskStateOf(value: unknown): TaskState {
  if (typeof value === 'string') return value as TaskState;
  if (value && typeof value === 'object' && 'working' in value) return 'working';
  return 'unknown';
}

export { textOf };
