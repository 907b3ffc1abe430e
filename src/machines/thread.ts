/**
 * A conversation thread: one A2A task. Its states are the task states; a turn runs the router and agent
 * calls as child actors and ends in `input-required` unless an agent completes the task.
 *
 * Pure: agent calls and the router policy are injected actors (`agentCall`, `router`), and everything
 * the outside world must see leaves as emitted `troupe.thread.status` events (the host publishes them).
 */
import { assign, emit, enqueueActions, sendTo, setup, type DoneActorEvent } from 'xstate';
import type { Message, TaskState } from '../protocol/a2a.js';
import type { ErrorBody } from '../protocol/errors.js';
import { USER } from '../protocol/routing.js';
import { agentCallMachine, type AgentCallOutput } from './agent-call.js';
import { liveAgent, type AgentDirectory, type RouteDecision } from './route.js';
import { routerMachine, type RouterInput } from './router.js';
import { orchestrationMachine, type OrchestrationOutput, type OrchestrationStrategy } from './orchestration.js';
import { handoffEventsForTargetReply, handoffFailedEvent, handoffMachine, type HandoffEvent, type HandoffOutput } from './handoff.js';
import {
  handoffRequestFromDirective,
  readHandoffDirective,
  readHandoffReturn,
  withHandoffRequest,
  type HandoffRequest,
} from '../protocol/handoff.js';
import { CLIENT_ROUTING_URI } from '../protocol/routing.js';
import { META, type RouteStep } from '../protocol/metadata.js';

export type { RouteStep };

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
  /** Longest a handoff may hold the thread before control returns to its source. */
  handoffMaxDurationMs: number;
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
  handoffMaxDurationMs: 10 * 60_000,
};

export interface ThreadInput {
  threadId: string;
  tenant: string;
  /** Who may use the thread: `<principal>` or `<principal>/<user>` (set once, by the first message). */
  owner: string;
  contextId?: string;
  config?: Partial<ThreadConfig>;
  agents?: AgentDirectory;
  now: number;
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
  /** `handoffStart`: the message asks a target to take over; `handoffActive`: the user talks to the target. */
  mode: 'normal' | 'handoffStart' | 'handoffActive';
}

/** The thread's view of its one open handoff; the handoff actor itself is the child `handoff`. */
export interface ThreadHandoff {
  request: HandoffRequest;
  phase: 'pending' | 'active';
}

export interface ThreadContext {
  threadId: string;
  tenant: string;
  owner: string;
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
  handoff?: ThreadHandoff;
}

export type ThreadEvent =
  | { type: 'troupe.user.message'; message: Message; now?: number }
  | { type: 'troupe.agents'; agents: AgentDirectory }
  | { type: 'troupe.cancel'; reason?: string; now?: number }
  | { type: 'troupe.tick'; now: number }
  /** Sent by the host right after restoring a snapshot: timers were not persisted, re-arm them. */
  | { type: 'troupe.restored'; now: number }
  /** The handoff child ended on its own (deadline) or after the thread ended it. */
  | { type: 'xstate.done.actor.handoff'; output: HandoffOutput };

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

/**
 * What an agent's reply asks for by way of handoff: nothing, a valid request, or an error (malformed
 * directive, handing off to itself or to an agent that is not live).
 */
function planHandoff(context: ThreadContext): { request: HandoffRequest } | { error: ErrorBody } | undefined {
  const turn = context.turn;
  const reply = turn?.lastAnswer;
  if (!turn || !reply) return undefined;
  let directive;
  try {
    directive = readHandoffDirective(reply);
  } catch (err) {
    return { error: { code: 'EXTENSION_PARSE_ERROR', message: err instanceof Error ? err.message : String(err) } };
  }
  if (!directive) return undefined;
  const source = turn.lastFrom ?? turn.current;
  if (!liveAgent(context.agents, directive.targetAgentId)) {
    return { error: { code: 'AGENT_NOT_FOUND', message: `${source} asked to hand off to "${directive.targetAgentId}", which is not a live agent` } };
  }
  try {
    return { request: handoffRequestFromDirective(directive, { threadId: context.threadId, tenantId: context.tenant, userId: userOf(context.owner), sourceAgentId: source }) };
  } catch (err) {
    return { error: { code: 'INVALID_MESSAGE', message: err instanceof Error ? err.message : String(err) } };
  }
}

/** A message for a handoff's target: the request (with its context summary) and the recent messages. */
function withHandoffContext(context: ThreadContext, message: Message, request: HandoffRequest): Message {
  const recent = context.history.filter((m) => m.messageId !== message.messageId).slice(-request.recentMessageCount);
  return withHandoffRequest(
    { ...message, metadata: { ...message.metadata, [META.recentMessages]: recent, [META.contextSummary]: request.contextSummary } },
    request,
  );
}

/**
 * The message that gives control back to the handoff's source agent: queued like a user message and
 * addressed to the source, so the next turn resumes it with the result.
 */
function resumeMessage(context: ThreadContext, handoff: ThreadHandoff, status: string, summary: string): Message {
  const { sourceAgentId, targetAgentId } = handoff.request;
  return {
    kind: 'message',
    role: 'user',
    messageId: `${context.threadId}:handoff:${context.turns}:${status}`,
    contextId: context.contextId,
    taskId: context.threadId,
    parts: [{ kind: 'text', text: `Handoff to ${targetAgentId} ${status}: ${summary}` }],
    metadata: {
      [META.agent]: 'troupe',
      [CLIENT_ROUTING_URI]: { recipient: sourceAgentId, handoffReturn: { completionStatus: status === 'completed' ? 'completed' : status === 'cancelled' ? 'cancelled' : 'error', resultSummary: summary, artifactsCreated: [] } },
      [META.handoffResume]: { targetAgentId, status },
    },
  };
}

/** The end user of an owner `<principal>/<user>`, or the principal itself. */
export function userOf(owner: string): string {
  const slash = owner.indexOf('/');
  return slash < 0 ? owner : owner.slice(slash + 1);
}

function isResume(message: Message): boolean {
  return message.metadata?.[META.handoffResume] !== undefined;
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
    handoff: handoffMachine,
  },
  guards: {
    hasPending: ({ context }) => context.pending.length > 0,
    hasHandoff: ({ context }) => context.handoff !== undefined,
    isHandoffStartReply: ({ context }) => context.turn?.mode === 'handoffStart' && context.handoff !== undefined,
    isHandoffTargetReply: ({ context }) => context.turn?.mode === 'handoffActive' && context.handoff?.phase === 'active',
    requestsHandoff: ({ context }) => {
      const plan = planHandoff(context);
      return plan !== undefined && 'request' in plan;
    },
    requestsHandoffWhileOpen: ({ context }) => context.handoff !== undefined && planHandoff(context) !== undefined,
    hasMalformedHandoff: ({ context }) => {
      const plan = planHandoff(context);
      return plan !== undefined && 'error' in plan;
    },
    handoffCallFailed: ({ context }, output: AgentCallOutput) =>
      context.handoff !== undefined && context.turn?.mode !== 'normal' && (!output.ok || output.reply.kind === 'error'),
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
          mode: context.handoff?.phase === 'active' && !isResume(userMessage) ? 'handoffActive' : 'normal',
        },
      };
    }),
    /** While a handoff is active the handoff actor counts the user's turns. */
    notifyHandoffOfUserMessage: enqueueActions(({ context, enqueue }) => {
      if (context.turn?.mode !== 'handoffActive') return;
      const message = context.turn.outgoing;
      enqueue.sendTo('handoff', { type: 'troupe.handoff.userMessage', message, now: context.now } satisfies HandoffEvent);
    }),
    rearmAgentCall: sendTo('agentCall', { type: 'troupe.agentCall.restored' }),
    rearmOrchestration: sendTo('orchestration', ({ context }) => ({ type: 'troupe.orchestration.restored' as const, now: context.now })),
    tickHandoff: enqueueActions(({ context, enqueue }) => {
      if (context.handoff) enqueue.sendTo('handoff', { type: 'troupe.handoff.tick', now: context.now } satisfies HandoffEvent);
    }),
    /** The source agent asked for a handoff: spawn the handoff actor and send the target the request. */
    startHandoff: enqueueActions(({ context, enqueue }) => {
      const turn = context.turn;
      const plan = planHandoff(context);
      if (!turn || !plan || !('request' in plan)) return;
      const { request } = plan;
      const source = turn.lastFrom ?? turn.current;
      const userMessage = context.history.find((m) => m.messageId === turn.userMessageId) ?? turn.outgoing;
      const outgoing = withHandoffContext(context, messageFor(context, userMessage, `${turn.userMessageId}>handoff>${request.targetAgentId}`, source), request);
      const step: RouteStep = { from: source, to: request.targetAgentId, hop: turn.hops + 1, reason: `handoff: ${request.handoffReason}`, at: context.now };
      enqueue.spawnChild('handoff', { id: 'handoff', input: { request, now: context.now, maxDurationMs: context.config.handoffMaxDurationMs } });
      enqueue.assign({
        handoff: { request, phase: 'pending' },
        turn: { ...turn, mode: 'handoffStart', current: request.targetAgentId, from: source, hops: turn.hops + 1, outgoing, route: [...turn.route, step] },
        routeLog: prune([...context.routeLog, step], ROUTE_LOG_LIMIT),
      });
    }),
    recordHandoffConflict: assign({
      lastError: ({ context }) => ({
        code: 'HANDOFF_CONFLICT' as const,
        message: `thread ${context.threadId} already has an active handoff to ${context.handoff?.request.targetAgentId ?? 'another agent'}; finish or cancel it first`,
      }),
    }),
    recordMalformedHandoff: assign({
      lastError: ({ context }) => {
        const plan = planHandoff(context);
        return plan && 'error' in plan ? plan.error : context.lastError;
      },
    }),
    /** The target's first answer: accept (it now talks to the user), reject (control stays), or return at once. */
    applyTargetFirstReply: enqueueActions(({ context, enqueue }) => {
      const turn = context.turn;
      const handoff = context.handoff;
      const reply = turn?.lastAnswer;
      if (!turn || !handoff || !reply) return;
      let events: HandoffEvent[];
      try {
        events = handoffEventsForTargetReply(reply, 'pending', context.now);
      } catch (err) {
        events = [handoffFailedEvent(err, context.now)];
      }
      for (const e of events) enqueue.sendTo('handoff', e);
      const last = events.at(-1);
      if (last?.type === 'troupe.handoff.rejected' || last?.type === 'troupe.handoff.failed') {
        const why = last.type === 'troupe.handoff.rejected' ? (last.rejectionReason ?? 'no reason given') : last.error.message;
        const text = `${handoff.request.targetAgentId} did not take over (${why}); ${handoff.request.sourceAgentId} keeps the conversation.`;
        enqueue.stopChild('handoff');
        enqueue.assign({
          handoff: undefined,
          turn: { ...turn, lastAnswer: systemMessage(context, `${turn.userMessageId}:handoff-declined`, text, { [META.handoff]: { status: 'rejected', reason: why } }) },
        });
      } else if (last?.type === 'troupe.handoff.returned') {
        enqueue.stopChild('handoff');
        enqueue.assign({ handoff: undefined, pending: [resumeMessage(context, handoff, 'completed', last.result.resultSummary ?? 'done'), ...context.pending] });
      } else {
        enqueue.assign({ handoff: { ...handoff, phase: 'active' } });
      }
    }),
    /** A reply from the target during the handoff goes to the user; a return gives control back. */
    applyTargetReply: enqueueActions(({ context, enqueue }) => {
      const handoff = context.handoff;
      const reply = context.turn?.lastAnswer;
      if (!handoff || !reply) return;
      let result;
      try {
        result = readHandoffReturn(reply);
      } catch (err) {
        enqueue.assign({ lastError: { code: 'EXTENSION_PARSE_ERROR', message: err instanceof Error ? err.message : String(err) } });
        return;
      }
      if (!result) return;
      enqueue.sendTo('handoff', { type: 'troupe.handoff.returned', result, now: context.now } satisfies HandoffEvent);
      enqueue.stopChild('handoff');
      enqueue.assign({
        handoff: undefined,
        pending: [resumeMessage(context, handoff, result.completionStatus, result.resultSummary ?? 'no summary'), ...context.pending],
      });
    }),
    /** The target failed or timed out: the handoff ends in error and control returns to the source. */
    failHandoff: enqueueActions(({ context, enqueue }, output: AgentCallOutput) => {
      const handoff = context.handoff;
      if (!handoff) return;
      const error = !output.ok ? output.error : output.reply.kind === 'error' ? output.reply.error : { code: 'AGENT_ERROR' as const, message: 'failed' };
      enqueue.sendTo('handoff', handoffFailedEvent(error, context.now));
      enqueue.stopChild('handoff');
      enqueue.assign({ handoff: undefined, pending: [resumeMessage(context, handoff, 'failed', `${error.code}: ${error.message}`), ...context.pending] });
    }),
    /** The user cancels the handoff (not the thread): control returns to the source. */
    cancelHandoff: enqueueActions(({ context, event, enqueue }) => {
      const handoff = context.handoff;
      if (!handoff) return;
      const reason = event.type === 'troupe.cancel' && event.reason ? event.reason : 'cancelled by the user';
      enqueue.sendTo('handoff', { type: 'troupe.handoff.cancel', reason, now: context.now } satisfies HandoffEvent);
      enqueue.stopChild('handoff');
      enqueue.assign({ handoff: undefined, pending: [resumeMessage(context, handoff, 'cancelled', reason), ...context.pending] });
      enqueue.emit({ type: 'troupe.thread.status', state: 'working', final: false, message: systemMessage(context, `${context.threadId}:handoff-cancel:${context.turns}`, `Handoff to ${handoff.request.targetAgentId} cancelled; back to ${handoff.request.sourceAgentId}.`, {}) });
    }),
    /** The handoff actor ended by itself (its deadline passed): control returns to the source. */
    onHandoffEnded: enqueueActions(({ context, event, enqueue }) => {
      const handoff = context.handoff;
      if (!handoff || event.type !== 'xstate.done.actor.handoff') return;
      const output = event.output;
      const summary = output.error ? `${output.error.code}: ${output.error.message}` : (output.resultSummary ?? output.status);
      enqueue.stopChild('handoff');
      enqueue.assign({ handoff: undefined, pending: [...context.pending, resumeMessage(context, handoff, output.status === 'error' ? 'failed' : output.status, summary)] });
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
          outgoing:
            decision.mode !== 'initial'
              ? messageFor(context, source, outgoingId, from)
              : turn.mode === 'handoffActive' && context.handoff
                ? withHandoffContext(context, source, context.handoff.request)
                : source,
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
        ...(decision.confidence !== undefined ? { confidence: decision.confidence } : {}),
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
        [META.clarify]: { reason, confidence: decision.to === 'clarify' ? decision.confidence : undefined },
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
    owner: input.owner,
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
      entry: ['startTurn', 'notifyHandoffOfUserMessage', 'announceWorking'],
      on: {
        'troupe.user.message': { actions: ['setNow', 'queueUserMessage'] },
        'troupe.cancel': [
          { guard: 'hasHandoff', actions: ['setNow', 'cancelHandoff'] },
          { target: 'canceled', actions: 'setNow' },
        ],
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
              ...(context.turn?.mode === 'handoffActive' && context.handoff ? { handoffTarget: context.handoff.request.targetAgentId } : {}),
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
                guard: { type: 'agentFailedTask', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                target: '#thread.failed',
                actions: [
                  { type: 'recordAgentAnswer', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                  { type: 'answerUser', params: { state: 'failed' } },
                ],
              },
              {
                guard: { type: 'callSucceeded', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                target: 'inspectingReply',
                actions: { type: 'recordAgentAnswer', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
              },
              {
                guard: { type: 'handoffCallFailed', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                target: 'answering',
                actions: [
                  { type: 'recordCallError', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                  { type: 'failHandoff', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
                ],
              },
              {
                target: 'answering',
                actions: { type: 'recordCallError', params: ({ event }: { event: DoneActorEvent<AgentCallOutput> }) => event.output },
              },
            ],
          },
        },
        /** Handoffs first: a target's answer, a request to hand off; anything else goes to the router. */
        inspectingReply: {
          always: [
            { guard: 'isHandoffStartReply', target: 'answering', actions: 'applyTargetFirstReply' },
            { guard: 'requestsHandoffWhileOpen', target: 'answering', actions: 'recordHandoffConflict' },
            { guard: 'isHandoffTargetReply', target: 'answering', actions: 'applyTargetReply' },
            { guard: 'hasMalformedHandoff', target: 'answering', actions: 'recordMalformedHandoff' },
            { guard: 'requestsHandoff', target: 'calling', actions: ['startHandoff', 'announceRoute'] },
            { target: 'routingReply' },
          ],
        },
        /** The router named several agents: fan out, then aggregate their answers into one. */
        orchestrating: {
          on: { 'troupe.restored': { actions: ['setNow', 'tickHandoff', 'rearmOrchestration'] } },
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
        'troupe.cancel': [
          { guard: 'hasHandoff', target: 'working', actions: ['setNow', 'cancelHandoff'] },
          { target: 'canceled', actions: 'setNow' },
        ],
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

