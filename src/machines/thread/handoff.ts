/**
 * The thread's side of a handoff: what a source agent's reply asks for, the message the target gets
 * (with the request, the context summary and the recent messages), the message that gives control back
 * to the source, and the actions that drive the `handoff` child actor.
 */
import { assign, enqueueActions } from 'xstate';
import type { Message } from '../../protocol/a2a.js';
import type { ErrorBody } from '../../protocol/errors.js';
import { handoffRequestFromDirective, readHandoffDirective, readHandoffReturn, withHandoffRequest, type HandoffRequest } from '../../protocol/handoff.js';
import { META, type RouteStep } from '../../protocol/metadata.js';
import { CLIENT_ROUTING_URI } from '../../protocol/routing.js';
import type { AgentCallOutput } from '../agent-call.js';
import { handoffEventsForTargetReply, handoffFailedEvent, type HandoffEvent } from '../handoff.js';
import { liveAgent } from '../route.js';
import { ROUTE_LOG_LIMIT, messageFor, prune, systemMessage, userOf } from './messages.js';
import { threadBase } from './setup.js';
import type { ThreadContext, ThreadHandoff } from './types.js';

/**
 * What an agent's reply asks for by way of handoff: nothing, a valid request, or an error (malformed
 * directive, handing off to itself or to an agent that is not live).
 */
export function planHandoff(context: ThreadContext): { request: HandoffRequest } | { error: ErrorBody } | undefined {
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
export function withHandoffContext(context: ThreadContext, message: Message, request: HandoffRequest): Message {
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
export function resumeMessage(context: ThreadContext, handoff: ThreadHandoff, status: string, summary: string): Message {
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

export function isResume(message: Message): boolean {
  return message.metadata?.[META.handoffResume] !== undefined;
}

export const threadWithHandoff = threadBase.extend({
  guards: {
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
  },
  actions: {
    notifyHandoffOfUserMessage: enqueueActions(({ context, enqueue }) => {
      if (context.turn?.mode !== 'handoffActive') return;
      const message = context.turn.outgoing;
      enqueue.sendTo('handoff', { type: 'troupe.handoff.userMessage', message, now: context.now } satisfies HandoffEvent);
    }),
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
  },
});
