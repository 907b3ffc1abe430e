/**
 * Routing within a turn: a router decision sends the message on to an agent (recording the route step
 * and announcing it), fans it out, asks the user to clarify, or ends the turn with the router's error.
 */
import { assign, emit, enqueueActions } from 'xstate';
import { META, type RouteStep } from '../../protocol/metadata.js';
import { USER } from '../../protocol/routing.js';
import { liveAgent, routeReply, type RouteDecision } from '../../routing/route.js';
import { decideWithoutPolicy, type RouterInput } from '../router.js';
import type { Message } from '../../protocol/a2a.js';
import { readApprovalRequest } from '../../protocol/approval.js';
import { withHandoffContext } from './handoff.js';
import { ROUTE_LOG_LIMIT, messageFor, prune, systemMessage } from './messages.js';
import { threadWithDelegation } from './delegation.js';
import { DEFAULT_ROUTER_HISTORY_MESSAGES, type ThreadContext, type ThreadStatusEmitted } from './types.js';

function fillClarify(template: string, values: Record<string, string>): string {
  return template.replace(/\{\{\s*(candidate|confidence|reasoning)\s*\}\}/g, (_, name: string) => values[name] ?? '');
}

/** The earlier messages the router policy sees: the last N before the turn's message. */
function routerHistory(context: ThreadContext): Message[] {
  const n = context.config.routerHistoryMessages ?? DEFAULT_ROUTER_HISTORY_MESSAGES;
  const current = context.turn?.userMessageId;
  const earlier = context.history.filter((m) => m.messageId !== current);
  return n > 0 ? earlier.slice(-n) : [];
}

/**
 * The agent whose answer before the turn's message waits for the user's approval: the last agent message
 * of the history before it, when it carries an approval request.
 */
function approvalAgent(context: ThreadContext): string | undefined {
  const current = context.turn?.userMessageId;
  for (let i = context.history.length - 1; i >= 0; i--) {
    const m = context.history[i]!;
    if (m.messageId === current || m.role !== 'agent') continue;
    return readApprovalRequest(m)?.agent;
  }
  return undefined;
}

function withApproval(context: ThreadContext): { approvalAgent?: string } {
  const agent = approvalAgent(context);
  return agent ? { approvalAgent: agent } : {};
}

/** What the router is given for the turn's user message. */
export function userRouterInput(context: ThreadContext): RouterInput {
  return {
    kind: 'user',
    message: context.turn?.outgoing ?? { kind: 'message', role: 'user', messageId: 'none', parts: [{ kind: 'text', text: '' }] },
    agents: context.agents,
    entryAgent: context.config.entryAgent,
    ...(context.turn?.mode === 'handoffActive' && context.handoff ? { handoffTarget: context.handoff.request.targetAgentId } : {}),
    ...withApproval(context),
    usePolicy: context.config.usePolicy,
    threshold: context.config.threshold,
    maxAttempts: context.config.maxAttempts,
    ...(context.config.fallbackAgent ? { fallbackAgent: context.config.fallbackAgent } : {}),
    ...(context.config.fallbackReasonTemplate ? { fallbackReasonTemplate: context.config.fallbackReasonTemplate } : {}),
    ...(context.config.usePolicy ? { history: routerHistory(context) } : {}),
  };
}

/** Where the user's message goes when no policy decides (see `routerPolicyDecides`). */
export function userDecisionWithoutPolicy(context: ThreadContext): RouteDecision {
  return (
    decideWithoutPolicy(userRouterInput(context)) ?? {
      to: 'user',
      reason: 'the router policy decides',
      error: { code: 'ROUTER_FAILURE', message: 'the router policy decides' },
    }
  );
}

/** Where the agent's reply goes: the client-routing rules (a pure function of the turn). */
export function replyDecision(context: ThreadContext): RouteDecision {
  const turn = context.turn;
  return routeReply({
    reply: turn?.lastAnswer ?? { kind: 'message', role: 'agent', messageId: 'none', parts: [{ kind: 'text', text: '' }] },
    from: turn?.lastFrom ?? turn?.current ?? '',
    senderStack: turn?.senderStack ?? [],
    hops: turn?.hops ?? 0,
    maxHops: context.config.maxHops,
    agents: context.agents,
  });
}

export const threadSetup = threadWithDelegation.extend({
  guards: {
    /** The user's message needs the router policy (no handoff target, no agent addressed, a policy configured). */
    routerPolicyDecides: ({ context }) => decideWithoutPolicy(userRouterInput(context)) === undefined,
    routesToAgent: (_, decision: RouteDecision) => decision.to === 'agent',
    /** Several agents, for a team that lets them work together (`orchestration.multiAgent`, seed 003's EnableMultiAgentCoordination). */
    routesToFanOut: ({ context }, decision: RouteDecision) =>
      decision.to === 'agent' && (decision.additionalAgents?.length ?? 0) > 0 && context.config.orchestration.multiAgent !== false,
    routesToClarify: (_, decision: RouteDecision) => decision.to === 'clarify',
    /** Unsure, and the team names a live clarification agent to ask the user. */
    routesToClarificationAgent: ({ context }, decision: RouteDecision) =>
      decision.to === 'clarify' &&
      context.config.clarificationAgent !== undefined &&
      liveAgent(context.agents, context.config.clarificationAgent) !== undefined,
  },
  actions: {
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
      const senderStack = decision.mode === 'initial' ? [USER] : decision.mode === 'forward' ? [...turn.senderStack, from] : turn.senderStack.slice(0, -1);
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
    recordRouteError: assign(({ context }, decision: RouteDecision) => {
      const lastError = decision.to === 'user' && decision.error ? decision.error : context.lastError;
      if (decision.to !== 'user' || decision.error?.code !== 'ROUTER_FAILURE' || !context.turn) return { lastError };
      // A failed routing decision is a decision too: it goes in the route log.
      const step: RouteStep = { from: USER, to: USER, hop: 0, reason: decision.reason, at: context.now, outcome: 'failure' };
      return { lastError, turn: { ...context.turn, route: [...context.turn.route, step] }, routeLog: prune([...context.routeLog, step], ROUTE_LOG_LIMIT) };
    }),
    /** Ends the turn: the user gets the last answer (with any error attached), or the error alone. */
    /** The clarification agent gets the user's message with why the router asked (`troupe/clarify`). */
    markClarifying: assign(({ context }, decision: RouteDecision) => {
      const turn = context.turn;
      if (!turn || decision.to !== 'clarify') return {};
      const clarify = { reason: decision.reason, confidence: decision.confidence, ...(decision.candidate ? { candidate: decision.candidate } : {}) };
      return { turn: { ...turn, clarifying: true, outgoing: { ...turn.outgoing, metadata: { ...turn.outgoing.metadata, [META.clarify]: clarify } } } };
    }),
    askToClarify: enqueueActions(({ context, enqueue }, decision: RouteDecision) => {
      const reason = decision.to === 'clarify' ? decision.reason : '';
      const confidence = decision.to === 'clarify' ? decision.confidence : undefined;
      const text = fillClarify(context.config.clarifyText, {
        candidate: decision.to === 'clarify' ? (decision.candidate ?? '') : '',
        confidence: confidence !== undefined ? confidence.toFixed(2) : '',
        reasoning: reason,
      });
      const step: RouteStep = {
        from: USER,
        to: USER,
        hop: 0,
        reason,
        at: context.now,
        outcome: 'clarify',
        ...(confidence !== undefined ? { confidence } : {}),
      };
      enqueue.assign({ routeLog: prune([...context.routeLog, step], ROUTE_LOG_LIMIT) });
      const message = systemMessage(context, `${context.turn?.userMessageId ?? 'thread'}:clarify`, text, {
        [META.clarify]: { reason, confidence: decision.to === 'clarify' ? decision.confidence : undefined },
        ...(context.turn ? { [META.inReplyTo]: context.turn.userMessageId } : {}),
      });
      enqueue.assign({ history: prune([...context.history, message], context.config.historyLimit), turn: undefined });
      enqueue.emit({ type: 'troupe.thread.status', state: 'input-required', final: true, message });
    }),
  },
});

/** The clarification agent's route for an unsure decision (`routesToClarificationAgent` holds). */
export function clarificationRoute(context: ThreadContext, decision: RouteDecision): RouteDecision {
  const agentId = context.config.clarificationAgent ?? '';
  const why = decision.to === 'clarify' ? decision.reason : '';
  return {
    to: 'agent',
    agentId,
    mode: 'initial',
    reason: `clarification by ${agentId}: ${why}`,
    ...(decision.to === 'clarify' ? { confidence: decision.confidence } : {}),
  };
}
