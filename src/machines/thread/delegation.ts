/**
 * Delegation within a turn: an agent's reply asks the thread (`metadata["troupe/delegate"]`) to fan its
 * work out to other agents; the thread runs the orchestration child with the delegates, then calls the
 * delegating agent again with what they answered (`metadata["troupe/delegation"]`, and an attributed
 * text). Its next reply goes on as any reply (to the user, by default). The delegation counts two hops
 * (out to the delegates, back to the delegator) against the thread's hop limit; the delegator's card
 * must allow delegating (`capabilities.orchestration.canDelegate`, absent = allowed) and its
 * `maxParallel`, like the team's limit, caps the delegates of a parallel fan-out.
 */
import { assign, enqueueActions } from 'xstate';
import { messageText, type Message } from '../../protocol/a2a.js';
import { readDelegateDirective, type DelegationResults } from '../../protocol/delegation.js';
import type { ErrorBody } from '../../protocol/errors.js';
import { META, RESULT_META, type RouteStep } from '../../protocol/metadata.js';
import type { OrchestrationInput, OrchestrationOutput } from '../orchestration.js';
import { liveAgent } from '../../routing/route.js';
import { ROUTE_LOG_LIMIT, prune } from './messages.js';
import { threadWithTurns } from './turn.js';
import type { ThreadContext, TurnDelegation } from './types.js';

/** Hops a delegation takes: out to the delegates, back to the delegator. */
const DELEGATION_HOPS = 2;

/** The delegation the last reply asks for, or why the thread refuses it, or undefined when it asks for none. */
function planDelegation(context: ThreadContext): { delegation: TurnDelegation } | { error: ErrorBody } | undefined {
  const turn = context.turn;
  const reply = turn?.lastAnswer;
  if (!turn || !reply || turn.delegation) return undefined;
  let directive;
  try {
    directive = readDelegateDirective(reply);
  } catch (err) {
    return { error: { code: 'EXTENSION_PARSE_ERROR', message: err instanceof Error ? err.message : String(err) } };
  }
  if (!directive) return undefined;
  const delegator = turn.lastFrom ?? turn.current;
  const card = liveAgent(context.agents, delegator);
  const allowed = context.config.permissions?.delegate;
  if (allowed && !allowed.includes(delegator)) {
    return {
      error: {
        code: 'DELEGATION_NOT_ALLOWED',
        message: `${delegator} asked to delegate, but the team does not let it (permissions.delegate)`,
        details: { delegator },
      },
    };
  }
  if (card?.orchestration?.canDelegate === false) {
    return {
      error: {
        code: 'DELEGATION_NOT_ALLOWED',
        message: `${delegator} asked to delegate, but its card does not allow it (capabilities.orchestration.canDelegate is false)`,
        details: { delegator },
      },
    };
  }
  const strategy = directive.strategy ?? context.config.orchestration.strategy;
  const limit = Math.min(card?.orchestration?.maxParallel ?? Number.POSITIVE_INFINITY, context.config.orchestration.maxParallelAgents);
  if (strategy !== 'sequential' && directive.agents.length > limit) {
    return {
      error: {
        code: 'DELEGATION_NOT_ALLOWED',
        message: `${delegator} asked to delegate to ${directive.agents.length} agents at once; at most ${limit} are allowed (its card's maxParallel, the team's max parallel agents)`,
        details: { delegator, agents: directive.agents, limit },
      },
    };
  }
  if (directive.agents.includes(delegator)) {
    return { error: { code: 'INVALID_RECIPIENT', message: `${delegator} asked to delegate to itself`, details: { delegator } } };
  }
  const missing = directive.agents.filter((id) => !liveAgent(context.agents, id));
  if (missing.length) {
    return {
      error: {
        code: 'AGENT_NOT_FOUND',
        message: `${delegator} asked to delegate to ${missing.map((id) => `"${id}"`).join(', ')}, not live agents`,
        details: { missing },
      },
    };
  }
  if (turn.hops + DELEGATION_HOPS > context.config.maxHops) {
    return {
      error: {
        code: 'ROUTING_LOOP',
        message: `${delegator} asked to delegate at hop ${turn.hops}; a delegation takes ${DELEGATION_HOPS} hops and the limit is ${context.config.maxHops}`,
        details: { hops: turn.hops, maxHops: context.config.maxHops },
      },
    };
  }
  const text = directive.input ?? messageText(reply);
  const input: Message = {
    kind: 'message',
    role: 'user',
    messageId: `${reply.messageId}>delegate`,
    contextId: context.contextId,
    taskId: context.threadId,
    parts: [{ kind: 'text', text: text || messageText(turn.outgoing) }],
    metadata: { [META.agent]: delegator },
  };
  return { delegation: { delegator, agents: directive.agents, strategy, input, hop: turn.hops + 1 } };
}

/** The orchestration child's input for the turn's delegation. */
export function delegationOrchestrationInput(context: ThreadContext): OrchestrationInput {
  const d = context.turn?.delegation;
  const o = context.config.orchestration;
  const agents = d?.agents ?? [];
  return {
    decision: { agentId: agents[0] ?? '', confidence: 1, reasoning: `delegation by ${d?.delegator ?? ''}`, additionalAgents: agents.slice(1) },
    message: d?.input ?? { kind: 'message', role: 'user', messageId: 'none', parts: [{ kind: 'text', text: '' }] },
    strategy: d?.strategy ?? o.strategy,
    // Checked when the delegation was planned: every delegate is called.
    maxParallelAgents: Math.max(1, agents.length),
    agentTimeoutMs: context.config.agentTimeoutMs,
    retries: context.config.retries,
    retryDelayMs: context.config.retryDelayMs,
    startedAt: context.now,
    sender: d?.delegator ?? '',
    hop: d?.hop ?? 0,
    ...(o.fallbackMessage ? { fallbackMessage: o.fallbackMessage } : {}),
    ...(o.partialFailureTemplate ? { partialFailureTemplate: o.partialFailureTemplate } : {}),
  };
}

export const threadWithDelegation = threadWithTurns.extend({
  guards: {
    requestsDelegation: ({ context }) => {
      const plan = planDelegation(context);
      return plan !== undefined && 'delegation' in plan;
    },
    hasRefusedDelegation: ({ context }) => {
      const plan = planDelegation(context);
      return plan !== undefined && 'error' in plan;
    },
  },
  actions: {
    recordRefusedDelegation: assign({
      lastError: ({ context }) => {
        const plan = planDelegation(context);
        return plan && 'error' in plan ? plan.error : context.lastError;
      },
    }),
    /** The delegates are called at the next hop, each with a route step; the user sees what the delegator said meanwhile. */
    startDelegation: enqueueActions(({ context, enqueue }) => {
      const turn = context.turn;
      const plan = planDelegation(context);
      if (!turn || !plan || !('delegation' in plan)) return;
      const { delegation } = plan;
      const steps: RouteStep[] = delegation.agents.map((to) => ({
        from: delegation.delegator,
        to,
        hop: delegation.hop,
        reason: `delegation (${delegation.strategy}) by ${delegation.delegator}`,
        at: context.now,
      }));
      enqueue.assign({
        turn: { ...turn, delegation, hops: delegation.hop, route: [...turn.route, ...steps] },
        routeLog: prune([...context.routeLog, ...steps], ROUTE_LOG_LIMIT),
      });
      if (turn.lastAnswer && messageText(turn.lastAnswer))
        enqueue.emit({ type: 'troupe.thread.status', state: 'working', final: false, message: turn.lastAnswer });
    }),
    /** The delegates answered (or failed): the delegator is called again with their results, one hop later. */
    returnDelegationResults: enqueueActions(({ context, enqueue }, output: OrchestrationOutput) => {
      const turn = context.turn;
      const delegation = turn?.delegation;
      if (!turn || !delegation) return;
      const m = output.metadata;
      const results: DelegationResults = {
        delegator: delegation.delegator,
        strategy: delegation.strategy,
        input: messageText(delegation.input),
        results: m.results.map((r) => ({ agentId: r.agentId, success: r.success, latencyMs: r.latencyMs, ...(r.error ? { error: r.error } : {}) })),
        agentsUsed: m.agentsUsed,
        executionTimeMs: m.executionTimeMs,
        latencyMs: m.latencyMs,
      };
      const hop = delegation.hop + 1;
      const message: Message = {
        kind: 'message',
        role: 'user',
        messageId: `${turn.userMessageId}>delegation>${delegation.delegator}@${hop}`,
        contextId: context.contextId,
        taskId: context.threadId,
        parts: output.message.parts,
        metadata: {
          [META.agent]: 'troupe',
          [META.delegation]: results,
          [RESULT_META.agentsUsed]: m.agentsUsed,
          [RESULT_META.executionTimeMs]: m.executionTimeMs,
          [RESULT_META.latencyMs]: m.latencyMs,
          [RESULT_META.results]: results.results,
          [RESULT_META.taskState]: m.taskState,
        },
      };
      const ok = m.results.filter((r) => r.success).length;
      const step: RouteStep = {
        from: 'troupe',
        to: delegation.delegator,
        hop,
        reason: `delegation results: ${ok} of ${m.results.length} answered`,
        at: context.now,
      };
      const { delegation: _done, ...rest } = turn;
      enqueue.assign({
        turn: { ...rest, current: delegation.delegator, hops: hop, outgoing: message, route: [...turn.route, step] },
        routeLog: prune([...context.routeLog, step], ROUTE_LOG_LIMIT),
      });
    }),
  },
});
