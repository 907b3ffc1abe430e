/**
 * The thread's side of a handoff: what a source agent's reply asks for, the message the target gets
 * (with the request, the context summary and the recent messages), and the actions that tell the
 * `handoff` child actor what happened. The handoff's rules live in that actor (../handoff.ts): when it
 * ends, its output says how and whether control goes back to the source, and the thread acts on it —
 * within the turn when a target's reply or failure ended it (the target's answer, then the source's),
 * or with a turn of its own when a cancel or the deadline did.
 */
import { assign, enqueueActions } from 'xstate';
import type { Message } from '../../protocol/a2a.js';
import type { ErrorBody } from '../../protocol/errors.js';
import { handoffRequestFromDirective, readHandoffDirective, readHandoffReturn, withHandoffRequest, type HandoffRequest } from '../../protocol/handoff.js';
import { META, type RouteStep } from '../../protocol/metadata.js';
import { CLIENT_ROUTING_URI, USER } from '../../protocol/routing.js';
import type { AgentCallOutput } from '../agent-call.js';
import { endsHandoff, handoffEventsForTargetReply, handoffFailedEvent, type HandoffEvent, type HandoffOutput } from '../handoff.js';
import { liveAgent } from '../../routing/route.js';
import { ROUTE_LOG_LIMIT, messageFor, prune, systemMessage, userOf } from './messages.js';
import { threadBase } from './setup.js';
import type { ThreadContext } from './types.js';

type HandoffPlan = { request: HandoffRequest } | { error: ErrorBody } | undefined;

/**
 * Plans by context: a reply is looked at by several guards and then by the action of the transition they
 * pick, all on the same (immutable) context object, so it is read once per context.
 */
const plans = new WeakMap<ThreadContext, HandoffPlan>();

/**
 * What an agent's reply asks for by way of handoff: nothing, a valid request, or an error (malformed
 * directive, handing off to itself or to an agent that is not live).
 */
function planHandoff(context: ThreadContext): HandoffPlan {
  if (plans.has(context)) return plans.get(context);
  const plan = readPlan(context);
  plans.set(context, plan);
  return plan;
}

function readPlan(context: ThreadContext): HandoffPlan {
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
  const target = liveAgent(context.agents, directive.targetAgentId);
  if (!target) {
    return { error: { code: 'AGENT_NOT_FOUND', message: `${source} asked to hand off to "${directive.targetAgentId}", which is not a live agent` } };
  }
  const allowed = context.config.permissions;
  if (allowed?.handoffInitiate && !allowed.handoffInitiate.includes(source)) {
    return {
      error: {
        code: 'HANDOFF_NOT_ALLOWED',
        message: `${source} asked to hand off to ${directive.targetAgentId}, but the team does not let it start handoffs (permissions.handoff.initiate)`,
        details: { source, target: directive.targetAgentId },
      },
    };
  }
  if (allowed?.handoffAccept && !allowed.handoffAccept.includes(directive.targetAgentId)) {
    return {
      error: {
        code: 'HANDOFF_NOT_ALLOWED',
        message: `${source} asked to hand off to ${directive.targetAgentId}, which the team does not let take handoffs (permissions.handoff.accept)`,
        details: { source, target: directive.targetAgentId },
      },
    };
  }
  if (liveAgent(context.agents, source)?.handoff?.canInitiate === false) {
    return {
      error: {
        code: 'HANDOFF_NOT_ALLOWED',
        message: `${source} asked to hand off to ${directive.targetAgentId}, but its card does not allow it to start handoffs`,
        details: { source, target: directive.targetAgentId },
      },
    };
  }
  if (target.handoff?.canAccept === false) {
    return {
      error: {
        code: 'HANDOFF_NOT_ALLOWED',
        message: `${source} asked to hand off to ${directive.targetAgentId}, whose card does not accept handoffs`,
        details: { source, target: directive.targetAgentId },
      },
    };
  }
  try {
    return {
      request: handoffRequestFromDirective(directive, {
        threadId: context.threadId,
        tenantId: context.tenant,
        userId: userOf(context.owner),
        sourceAgentId: source,
      }),
    };
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

/** How a handoff's end reads in the resume message and the route: completed, cancelled or failed. */
function handoffOutcome(status: HandoffOutput['status']): 'completed' | 'cancelled' | 'failed' | 'declined' {
  if (status === 'error') return 'failed';
  if (status === 'rejected') return 'declined';
  return status;
}

const REASON_SUMMARY_CHARS = 200;

function summaryOf(output: HandoffOutput): string {
  return output.handoffReturn?.resultSummary ?? 'no summary';
}

/** The route step that gives control back: from the target to the source, with how the handoff ended. */
function resumeStep(request: HandoffRequest, output: HandoffOutput, hop: number, at: number): RouteStep {
  const summary = summaryOf(output);
  const clipped = summary.length > REASON_SUMMARY_CHARS ? `${summary.slice(0, REASON_SUMMARY_CHARS - 1)}…` : summary;
  return { from: request.targetAgentId, to: request.sourceAgentId, hop, reason: `handoff ${handoffOutcome(output.status)}: ${clipped}`, at };
}

/**
 * The message that gives control back to the handoff's source agent: the handoff's outcome as text,
 * `handoffReturn` (completion status, summary, artifacts) in the client-routing slot, and
 * `troupe/handoffResume` naming both agents.
 */
function resumeMessage(context: ThreadContext, request: HandoffRequest, output: HandoffOutput, messageId: string): Message {
  const { sourceAgentId, targetAgentId } = request;
  const outcome = handoffOutcome(output.status);
  return {
    kind: 'message',
    role: 'user',
    messageId,
    contextId: context.contextId,
    taskId: context.threadId,
    parts: [{ kind: 'text', text: `Handoff to ${targetAgentId} ${outcome}: ${summaryOf(output)}` }],
    metadata: {
      [META.agent]: 'troupe',
      [CLIENT_ROUTING_URI]: { handoffReturn: output.handoffReturn ?? { completionStatus: 'error', artifactsCreated: [] } },
      [META.handoffResume]: { sourceAgentId, targetAgentId, status: outcome } satisfies HandoffResumeMeta,
    },
  };
}

/** `troupe/handoffResume` on a resume message. */
interface HandoffResumeMeta {
  sourceAgentId: string;
  targetAgentId: string;
  status: ReturnType<typeof handoffOutcome>;
}

export function isResume(message: Message): boolean {
  return message.metadata?.[META.handoffResume] !== undefined;
}

/** The route step of a resume message queued for a turn of its own (a cancel or a deadline ended the handoff). */
function queuedResumeStep(message: Message, at: number): RouteStep | undefined {
  const meta = message.metadata?.[META.handoffResume] as Partial<HandoffResumeMeta> | undefined;
  if (!meta?.sourceAgentId || !meta.targetAgentId) return undefined;
  let summary: string | undefined;
  try {
    summary = readHandoffReturn(message)?.resultSummary;
  } catch {
    summary = undefined;
  }
  return { from: meta.targetAgentId, to: meta.sourceAgentId, hop: 0, reason: `handoff ${meta.status ?? 'ended'}: ${summary ?? 'no summary'}`, at };
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
    /** The thread told the handoff something that ends it: its output decides what the turn does next. */
    handoffEnding: ({ context }) => context.handoff?.phase === 'ending',
    handoffReturnsToSource: (_, output: HandoffOutput) => output.returnsToSource,
    /** A turn that gives control back to a handoff's source (queued when a cancel or a deadline ended it). */
    startsWithResume: ({ context }) => context.turn !== undefined && isResume(context.turn.outgoing),
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
    /** The target's first answer: accepted (it now talks to the user), declined, or returned at once. */
    tellHandoffOfFirstReply: enqueueActions(({ context, enqueue }) => {
      const handoff = context.handoff;
      const reply = context.turn?.lastAnswer;
      if (!handoff || !reply) return;
      let events: HandoffEvent[];
      try {
        events = handoffEventsForTargetReply(reply, 'pending', context.now);
      } catch (err) {
        events = [handoffFailedEvent(err, context.now)];
      }
      for (const e of events) enqueue.sendTo('handoff', e);
      enqueue.assign({ handoff: { ...handoff, phase: events.some(endsHandoff) ? 'ending' : 'active' } });
    }),
    /** A later answer of the target: it goes to the user, and a return ends the handoff. */
    tellHandoffOfReply: enqueueActions(({ context, enqueue }) => {
      const handoff = context.handoff;
      const reply = context.turn?.lastAnswer;
      if (!handoff || !reply) return;
      let events: HandoffEvent[];
      try {
        events = handoffEventsForTargetReply(reply, 'active', context.now);
      } catch (err) {
        enqueue.assign({ lastError: { code: 'EXTENSION_PARSE_ERROR', message: err instanceof Error ? err.message : String(err) } });
        return;
      }
      for (const e of events) enqueue.sendTo('handoff', e);
      if (events.some(endsHandoff)) enqueue.assign({ handoff: { ...handoff, phase: 'ending' } });
    }),
    /** The target's call failed (an error, a timeout, an error reply): the handoff ends in error. */
    tellHandoffOfFailure: enqueueActions(({ context, enqueue }, output: AgentCallOutput) => {
      const handoff = context.handoff;
      if (!handoff) return;
      const error = !output.ok ? output.error : output.reply.kind === 'error' ? output.reply.error : { code: 'AGENT_ERROR' as const, message: 'failed' };
      enqueue.sendTo('handoff', handoffFailedEvent(error, context.now));
      enqueue.assign({ handoff: { ...handoff, phase: 'ending' } });
    }),
    /** The user cancels the handoff (not the thread); its output then says where control goes. */
    cancelHandoff: enqueueActions(({ context, event, enqueue }) => {
      const handoff = context.handoff;
      if (!handoff) return;
      const reason = event.type === 'troupe.cancel' && event.reason ? event.reason : 'cancelled by the user';
      enqueue.sendTo('handoff', { type: 'troupe.handoff.cancel', reason, now: context.now } satisfies HandoffEvent);
      enqueue.assign({ handoff: { ...handoff, phase: 'ending' } });
    }),
    /**
     * The handoff ended within a turn and control goes back to its source, now: the target's last answer
     * (or its failure) reaches the user, then the source gets the resume message as the turn's next hop.
     */
    resumeSource: enqueueActions(({ context, enqueue }, output: HandoffOutput) => {
      const turn = context.turn;
      const handoff = context.handoff;
      if (!turn || !handoff) return;
      const { request } = handoff;
      const hop = turn.hops + 1;
      const resume = resumeMessage(context, request, output, `${turn.userMessageId}>resume@${hop}>${request.sourceAgentId}`);
      const step = resumeStep(request, output, hop, context.now);
      if (turn.lastAnswer && turn.lastFrom === request.targetAgentId) {
        enqueue.emit({ type: 'troupe.thread.status', state: 'working', final: false, message: turn.lastAnswer });
      } else if (context.lastError) {
        enqueue.emit({ type: 'troupe.thread.status', state: 'working', final: false, error: context.lastError });
      }
      enqueue.stopChild('handoff');
      enqueue.assign({
        handoff: undefined,
        // The source answers for the turn now; what failed was told to the user above and to the source.
        lastError: undefined,
        history: prune([...context.history, resume], context.config.historyLimit),
        turn: {
          ...turn,
          mode: 'normal',
          current: request.sourceAgentId,
          from: request.targetAgentId,
          hops: hop,
          senderStack: [USER],
          outgoing: resume,
          route: [...turn.route, step],
          lastAnswer: undefined,
          lastFrom: undefined,
        },
        routeLog: prune([...context.routeLog, step], ROUTE_LOG_LIMIT),
      });
    }),
    /**
     * The handoff ended within a turn and control does not go back to the source: a declined handoff
     * says so (the source keeps the conversation), one that failed ends the turn with its error, and a
     * completed one with `returnExpected: false` leaves the target's answer as the turn's answer.
     */
    concludeHandoff: enqueueActions(({ context, enqueue }, output: HandoffOutput) => {
      const turn = context.turn;
      const handoff = context.handoff;
      if (!turn || !handoff) return;
      enqueue.stopChild('handoff');
      if (output.status === 'rejected') {
        const why = output.rejectionReason ?? 'no reason given';
        const text = `${handoff.request.targetAgentId} did not take over (${why}); ${handoff.request.sourceAgentId} keeps the conversation.`;
        enqueue.assign({
          handoff: undefined,
          turn: {
            ...turn,
            lastAnswer: systemMessage(context, `${turn.userMessageId}:handoff-declined`, text, { [META.handoff]: { status: 'rejected', reason: why } }),
          },
        });
        return;
      }
      enqueue.assign({ handoff: undefined, lastError: context.lastError ?? (output.status === 'error' ? output.error : undefined) });
    }),
    /** The handoff ended by itself (its deadline) or on a cancel, outside a turn's handoff steps. */
    onHandoffEnded: enqueueActions(({ context, event, enqueue }) => {
      const handoff = context.handoff;
      if (!handoff || event.type !== 'xstate.done.actor.handoff') return;
      const output = event.output;
      const { sourceAgentId, targetAgentId } = handoff.request;
      const outcome = handoffOutcome(output.status);
      enqueue.stopChild('handoff');
      if (output.returnsToSource) {
        const resume = resumeMessage(context, handoff.request, output, `${context.threadId}:handoff:${context.turns}:${targetAgentId}:${outcome}`);
        enqueue.assign({ handoff: undefined, pending: [resume, ...context.pending] });
      } else {
        enqueue.assign({ handoff: undefined });
      }
      const text = output.returnsToSource
        ? `Handoff to ${targetAgentId} ${outcome}; back to ${sourceAgentId}.`
        : `Handoff to ${targetAgentId} ${outcome}: ${summaryOf(output)}`;
      enqueue.emit({
        type: 'troupe.thread.status',
        state: output.returnsToSource || context.turn ? 'working' : 'input-required',
        final: false,
        message: systemMessage(context, `${context.threadId}:handoff-end:${context.turns}:${outcome}`, text, { [META.handoff]: { status: output.status } }),
      });
    }),
    /** A turn started by a queued resume message goes straight to the source. */
    applyQueuedResume: assign(({ context }) => {
      const turn = context.turn;
      const step = turn ? queuedResumeStep(turn.outgoing, context.now) : undefined;
      if (!turn || !step) return {};
      return {
        turn: { ...turn, current: step.to, from: step.from, senderStack: [USER], route: [...turn.route, step] },
        routeLog: prune([...context.routeLog, step], ROUTE_LOG_LIMIT),
      };
    }),
  },
});
