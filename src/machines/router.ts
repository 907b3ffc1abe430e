/**
 * The router. For an agent reply it applies the client-routing rules (`routeReply`); for a user message
 * it picks the first agent — the active handoff target, an agent the user named, the policy's choice
 * (retried up to `maxAttempts`, under `threshold` -> clarify, failing -> the fallback agent when one is
 * set, else ROUTER_FAILURE to the user: never a silent substitute), or the team's entry agent.
 *
 * The decisions that need no policy are one pure function (`decideWithoutPolicy`), which the thread
 * machine calls in its own states; the machine here is the actor a thread runs when its policy decides
 * (injected, so this stays pure), and it takes the same policy-free decisions when run on its own.
 */
import { assign, fromPromise, setup, type DoneActorEvent, type ErrorActorEvent } from 'xstate';
import type { Message } from '../protocol/a2a.js';
import { readApprovalDecision } from '../protocol/approval.js';
import { CLIENT_ROUTING_URI, type RouterDecision } from '../protocol/routing.js';
import { liveAgent, routeReply, type AgentDirectory, type ReplyRouteInput, type RouteDecision } from '../routing/route.js';

export interface UserRouteInput {
  message: Message;
  agents: AgentDirectory;
  /** The team's entry agent, used when no policy is set. */
  entryAgent: string;
  /** The agent that holds control in an active handoff. */
  handoffTarget?: string;
  /** The agent whose last answer waits for the user's approval of a tool call (protocol/approval.ts). */
  approvalAgent?: string;
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

const DEFAULT_FALLBACK_REASON_TEMPLATE = 'router failed after {{attempts}} attempts ({{error}}); fallback agent {{agent}}';

function fillTemplate(template: string, values: Record<string, string>): string {
  return template.replace(/\{\{\s*(\w+)\s*\}\}/g, (whole, name: string) => (Object.prototype.hasOwnProperty.call(values, name) ? values[name]! : whole));
}

/**
 * @inDeclarations the declaration of the machines built on it names this type (knip.jsonc).
 */
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
function decisionProblem(decision: RouterDecision, agents: AgentDirectory): string | undefined {
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

/**
 * The decision that needs no policy, or undefined when the policy must decide: a reply follows the
 * client-routing rules; a user message goes to the active handoff's target, to the agent the user
 * addressed (an unknown one is refused), or, without a policy, to the entry agent.
 *
 * Pure and synchronous. The thread machine takes these decisions in its own states (an actor per
 * decision cost a child actor's whole life — construction, initial step, done event, stop — twice a
 * turn, for a function call); the router actor runs only when a policy decides, which is asynchronous,
 * retried and worth watching.
 */
export function decideWithoutPolicy(input: RouterInput): RouteDecision | undefined {
  if (input.kind === 'reply') return routeReply(input);
  if (input.handoffTarget !== undefined) {
    return { to: 'agent', agentId: input.handoffTarget, mode: 'initial', reason: 'an active handoff holds control' };
  }
  const addressed = addressedAgent(input.message);
  if (addressed !== undefined) {
    if (liveAgent(input.agents, addressed)) {
      // The thread's own refusal at an approval's deadline is addressed too, but not by the user.
      const why =
        readApprovalDecision(input.message)?.decision === 'timeout' ? `the approval ${addressed} waited for timed out` : `the user addressed ${addressed}`;
      return { to: 'agent', agentId: addressed, mode: 'initial', reason: why };
    }
    return {
      to: 'user',
      reason: `the user addressed "${addressed}", which is not a live agent`,
      error: { code: 'INVALID_RECIPIENT', message: `no live agent "${addressed}": list the agents with \`troupe ps\``, details: { recipient: addressed } },
    };
  }
  // The user's next message answers an agent waiting for approval, whatever it says (a decision or not).
  if (input.approvalAgent !== undefined && liveAgent(input.agents, input.approvalAgent)) {
    return { to: 'agent', agentId: input.approvalAgent, mode: 'initial', reason: `${input.approvalAgent} waits for the user's approval` };
  }
  if (input.usePolicy) return undefined;
  if (input.entryAgent) return { to: 'agent', agentId: input.entryAgent, mode: 'initial', reason: `entry agent ${input.entryAgent}` };
  return defaultEntry(input.agents);
}

/** The conventional entry of the demo team, used when no team names one and several agents are live. */
const CONVENTIONAL_ENTRY = 'triage';

/**
 * Where a message goes when no team names an entry agent (a node started without --team): the only live
 * agent; among several, `triage` if live; else nowhere, and the user learns how to say where.
 */
export function defaultEntry(agents: AgentDirectory): RouteDecision {
  const live = Object.keys(agents).sort();
  if (live.length === 1)
    return { to: 'agent', agentId: live[0]!, mode: 'initial', reason: `${live[0]!} is the only agent on the mesh (no team names an entry agent)` };
  if (liveAgent(agents, CONVENTIONAL_ENTRY))
    return { to: 'agent', agentId: CONVENTIONAL_ENTRY, mode: 'initial', reason: `entry agent ${CONVENTIONAL_ENTRY} (no team names one)` };
  const shown = live.length > 8 ? `${live.slice(0, 8).join(', ')}, …` : live.join(', ');
  const message =
    live.length === 0
      ? 'no agent is on the mesh yet: start one (troupe agent <file> --nats …) and send again'
      : `no team names an entry agent and the mesh has ${live.length} agents (${shown}): start the node with --team <file>, or address one with \`troupe send --to <agent>\``;
  return { to: 'user', reason: 'no entry agent', error: { code: 'NO_ENTRY_AGENT', message, details: { agents: live.slice(0, 50) } } };
}

const routerSetup = setup({
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
    needsPolicy: ({ context }) => decideWithoutPolicy(context.input) === undefined,
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
    decideWithoutPolicy: assign({ decision: ({ context }) => decideWithoutPolicy(context.input) }),
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
        { guard: 'needsPolicy', target: 'scoring' },
        { target: 'decided', actions: 'decideWithoutPolicy' },
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
            actions: [{ type: 'recordPolicyError', params: ({ event }: { event: ErrorActorEvent }) => event.error }, 'routeToFallback'],
          },
          {
            target: 'decided',
            actions: [{ type: 'recordPolicyError', params: ({ event }: { event: ErrorActorEvent }) => event.error }, 'failRouting'],
          },
        ],
      },
    },
    decided: { type: 'final' },
  },
  output: ({ context }) =>
    context.decision ?? { to: 'user', reason: 'router reached no decision', error: { code: 'ROUTER_FAILURE', message: 'router reached no decision' } },
});
