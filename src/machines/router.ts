/**
 * The router: an actor per routing decision. For an agent reply it applies the client-routing rules
 * (`routeReply`); for a user message it picks the first agent — the active handoff target, an agent the
 * user named, the policy's choice (retried up to `maxAttempts`, under `threshold` -> clarify, failing
 * -> the fallback agent when one is set, else ROUTER_FAILURE to the user: never a silent substitute), or the team's entry agent. The policy is an injected actor, so this stays pure.
 */
import { assign, fromPromise, setup, type DoneActorEvent, type ErrorActorEvent } from 'xstate';
import type { Message } from '../protocol/a2a.js';
import { CLIENT_ROUTING_URI, type RouterDecision } from '../protocol/routing.js';
import { liveAgent, routeReply, type AgentDirectory, type ReplyRouteInput, type RouteDecision } from './route.js';

export interface UserRouteInput {
  message: Message;
  agents: AgentDirectory;
  /** The team's entry agent, used when no policy is set. */
  entryAgent: string;
  /** The agent that holds control in an active handoff. */
  handoffTarget?: string;
  usePolicy: boolean;
  threshold: number;
  maxAttempts: number;
  fallbackAgent?: string;
  /** The route reason when the fallback agent answers: `{{attempts}}`, `{{error}}`, `{{agent}}`. */
  fallbackReasonTemplate?: string;
  /** The thread's earlier messages the policy may read, oldest first (already cut to what it should see). */
  history?: Message[];
}

export type RouterInput = ({ kind: 'reply' } & ReplyRouteInput) | ({ kind: 'user' } & UserRouteInput);

export interface PolicyInput {
  message: Message;
  agentIds: string[];
  /** Earlier messages of the thread, oldest first. */
  history?: Message[];
}

export const DEFAULT_FALLBACK_REASON_TEMPLATE = 'router failed after {{attempts}} attempts ({{error}}); fallback agent {{agent}}';

function fillTemplate(template: string, values: Record<string, string>): string {
  return template.replace(/\{\{\s*(\w+)\s*\}\}/g, (whole, name: string) => (Object.prototype.hasOwnProperty.call(values, name) ? values[name]! : whole));
}

export interface RouterContext {
  input: RouterInput;
  attempts: number;
  decision?: RouteDecision;
  lastError?: string;
}

/** An agent id the user addressed directly: `metadata[URI].recipient` on the user's message. */
function addressedAgent(message: Message): string | undefined {
  const meta = message.metadata?.[CLIENT_ROUTING_URI];
  if (meta && typeof meta === 'object' && 'recipient' in meta && typeof meta.recipient === 'string') return meta.recipient;
  return undefined;
}

/**
 * What is wrong with a policy's decision, if anything: every agent it names must be live, and the
 * additional agents distinct from the primary and from each other. Checked here for every policy.
 */
export function decisionProblem(decision: RouterDecision, agents: AgentDirectory): string | undefined {
  if (!liveAgent(agents, decision.agentId)) return `the policy chose "${decision.agentId}", which is not a live agent`;
  const extra = decision.additionalAgents ?? [];
  const unknown = extra.filter((id) => !liveAgent(agents, id));
  if (unknown.length) return `the policy added ${unknown.map((id) => `"${id}"`).join(', ')}, not live agents`;
  if (extra.includes(decision.agentId)) return `the policy added its primary agent "${decision.agentId}" again`;
  if (new Set(extra).size !== extra.length) return 'the policy added an agent twice';
  return undefined;
}

function userInput(context: RouterContext): UserRouteInput {
  if (context.input.kind !== 'user') throw new Error('router: expected a user route input');
  return context.input;
}

export const routerSetup = setup({
  types: {
    input: {} as RouterInput,
    context: {} as RouterContext,
    output: {} as RouteDecision,
  },
  actors: {
    policy: fromPromise<RouterDecision, PolicyInput>(async () => {
      throw new Error('router: no policy provided');
    }),
  },
  guards: {
    isReply: ({ context }) => context.input.kind === 'reply',
    inHandoff: ({ context }) => context.input.kind === 'user' && context.input.handoffTarget !== undefined,
    userAddressedAgent: ({ context }) => {
      if (context.input.kind !== 'user') return false;
      const id = addressedAgent(context.input.message);
      return id !== undefined && liveAgent(context.input.agents, id) !== undefined;
    },
    userAddressedUnknownAgent: ({ context }) => {
      if (context.input.kind !== 'user') return false;
      const id = addressedAgent(context.input.message);
      return id !== undefined && liveAgent(context.input.agents, id) === undefined;
    },
    usesPolicy: ({ context }) => context.input.kind === 'user' && context.input.usePolicy,
    confident: ({ context }, decision: RouterDecision) => decision.confidence >= userInput(context).threshold,
    invalidDecision: ({ context }, decision: RouterDecision) => decisionProblem(decision, userInput(context).agents) !== undefined,
    invalidDecisionRetryable: ({ context }, decision: RouterDecision) =>
      decisionProblem(decision, userInput(context).agents) !== undefined && context.attempts < userInput(context).maxAttempts,
    invalidDecisionWithFallback: ({ context }, decision: RouterDecision) =>
      decisionProblem(decision, userInput(context).agents) !== undefined && userInput(context).fallbackAgent !== undefined,
    canRetryPolicy: ({ context }) => context.attempts < userInput(context).maxAttempts,
    hasFallbackAgent: ({ context }) => context.input.kind === 'user' && context.input.fallbackAgent !== undefined,
  },
  actions: {
    routeReply: assign({
      decision: ({ context }) => {
        if (context.input.kind !== 'reply') throw new Error('router: expected a reply route input');
        return routeReply(context.input);
      },
    }),
    routeToHandoffTarget: assign({
      decision: ({ context }): RouteDecision => ({
        to: 'agent',
        agentId: userInput(context).handoffTarget ?? '',
        mode: 'initial',
        reason: 'an active handoff holds control',
      }),
    }),
    routeToAddressedAgent: assign({
      decision: ({ context }): RouteDecision => {
        const agentId = addressedAgent(userInput(context).message) ?? '';
        return { to: 'agent', agentId, mode: 'initial', reason: `the user addressed ${agentId}` };
      },
    }),
    refuseUnknownAgent: assign({
      decision: ({ context }): RouteDecision => {
        const agentId = addressedAgent(userInput(context).message) ?? '';
        return {
          to: 'user',
          reason: `the user addressed "${agentId}", which is not a live agent`,
          error: { code: 'INVALID_RECIPIENT', message: `no live agent "${agentId}": list the agents with \`troupe ps\``, details: { recipient: agentId } },
        };
      },
    }),
    routeToEntryAgent: assign({
      decision: ({ context }): RouteDecision => {
        const { entryAgent } = userInput(context);
        return { to: 'agent', agentId: entryAgent, mode: 'initial', reason: `entry agent ${entryAgent}` };
      },
    }),
    acceptPolicyDecision: assign({
      decision: (_, decision: RouterDecision): RouteDecision => ({
        to: 'agent',
        agentId: decision.agentId,
        mode: 'initial',
        reason: decision.reasoning,
        confidence: decision.confidence,
        ...(decision.additionalAgents?.length ? { additionalAgents: decision.additionalAgents } : {}),
      }),
    }),
    askToClarify: assign({
      decision: ({ context }, decision: RouterDecision): RouteDecision => ({
        to: 'clarify',
        reason: `confidence ${decision.confidence.toFixed(2)} is under the threshold ${userInput(context).threshold}: ${decision.reasoning}`,
        confidence: decision.confidence,
        candidate: decision.agentId,
      }),
    }),
    countAttempt: assign({ attempts: ({ context }) => context.attempts + 1 }),
    recordPolicyError: assign({
      lastError: (_, error: unknown) => (error instanceof Error ? error.message : String(error)),
    }),
    recordInvalidDecision: assign({
      lastError: ({ context }, decision: RouterDecision) => decisionProblem(decision, userInput(context).agents) ?? 'invalid decision',
    }),
    routeToFallback: assign({
      decision: ({ context }): RouteDecision => {
        const input = userInput(context);
        const agentId = input.fallbackAgent ?? input.entryAgent;
        const reason = fillTemplate(input.fallbackReasonTemplate ?? DEFAULT_FALLBACK_REASON_TEMPLATE, {
          attempts: String(context.attempts),
          error: context.lastError ?? 'unknown error',
          agent: agentId,
        });
        return { to: 'agent', agentId, mode: 'initial', reason };
      },
    }),
    /** No fallback agent: the user learns the router failed and what to do, rather than some agent answering. */
    failRouting: assign({
      decision: ({ context }): RouteDecision => {
        const reason = `router failed after ${context.attempts} attempts (${context.lastError ?? 'unknown error'})`;
        return {
          to: 'user',
          reason,
          error: {
            code: 'ROUTER_FAILURE',
            message: `${reason}. Address an agent directly (list them with \`troupe ps\`) or try again; the team can name a fallback agent (routing.fallback_agent in team.yaml, config.fallbackAgent in a TS team)`,
            details: { attempts: context.attempts, ...(context.lastError ? { lastError: context.lastError } : {}) },
          },
        };
      },
    }),
  },
});

export const routerMachine = routerSetup.createMachine({
  id: 'router',
  context: ({ input }) => ({ input, attempts: 0 }),
  initial: 'start',
  states: {
    start: {
      always: [
        { guard: 'isReply', target: 'decided', actions: 'routeReply' },
        { guard: 'inHandoff', target: 'decided', actions: 'routeToHandoffTarget' },
        { guard: 'userAddressedAgent', target: 'decided', actions: 'routeToAddressedAgent' },
        { guard: 'userAddressedUnknownAgent', target: 'decided', actions: 'refuseUnknownAgent' },
        { guard: 'usesPolicy', target: 'scoring' },
        { target: 'decided', actions: 'routeToEntryAgent' },
      ],
    },
    scoring: {
      entry: 'countAttempt',
      invoke: {
        id: 'policy',
        src: 'policy',
        input: ({ context }): PolicyInput => {
          const input = userInput(context);
          return { message: input.message, agentIds: Object.keys(input.agents), ...(input.history ? { history: input.history } : {}) };
        },
        onDone: [
          // An invalid decision is a failed attempt, like a policy error.
          {
            guard: { type: 'invalidDecisionRetryable', params: ({ event }: { event: DoneActorEvent<RouterDecision> }) => event.output },
            target: 'scoring',
            reenter: true,
            actions: { type: 'recordInvalidDecision', params: ({ event }: { event: DoneActorEvent<RouterDecision> }) => event.output },
          },
          {
            guard: { type: 'invalidDecisionWithFallback', params: ({ event }: { event: DoneActorEvent<RouterDecision> }) => event.output },
            target: 'decided',
            actions: [{ type: 'recordInvalidDecision', params: ({ event }: { event: DoneActorEvent<RouterDecision> }) => event.output }, 'routeToFallback'],
          },
          {
            guard: { type: 'invalidDecision', params: ({ event }: { event: DoneActorEvent<RouterDecision> }) => event.output },
            target: 'decided',
            actions: [{ type: 'recordInvalidDecision', params: ({ event }: { event: DoneActorEvent<RouterDecision> }) => event.output }, 'failRouting'],
          },
          {
            guard: { type: 'confident', params: ({ event }: { event: DoneActorEvent<RouterDecision> }) => event.output },
            target: 'decided',
            actions: { type: 'acceptPolicyDecision', params: ({ event }: { event: DoneActorEvent<RouterDecision> }) => event.output },
          },
          {
            target: 'decided',
            actions: { type: 'askToClarify', params: ({ event }: { event: DoneActorEvent<RouterDecision> }) => event.output },
          },
        ],
        onError: [
          {
            guard: 'canRetryPolicy',
            target: 'scoring',
            reenter: true,
            actions: { type: 'recordPolicyError', params: ({ event }: { event: ErrorActorEvent }) => event.error },
          },
          {
            guard: 'hasFallbackAgent',
            target: 'decided',
            actions: [
              { type: 'recordPolicyError', params: ({ event }: { event: ErrorActorEvent }) => event.error },
              'routeToFallback',
            ],
          },
          {
            target: 'decided',
            actions: [
              { type: 'recordPolicyError', params: ({ event }: { event: ErrorActorEvent }) => event.error },
              'failRouting',
            ],
          },
        ],
      },
    },
    decided: { type: 'final' },
  },
  output: ({ context }) => context.decision ?? { to: 'user', reason: 'router reached no decision', error: { code: 'ROUTER_FAILURE', message: 'router reached no decision' } },
});
