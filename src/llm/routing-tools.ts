/**
 * The tools through which a model chooses where its answer goes — Troupe's client-routing extension
 * offered as function calls:
 *
 * - `route` (recipient `user`, `sender` or a peer's id, and a reason) → `reply(text, { to, reason })`;
 *   offered when there is a choice (peers, or a sender other than the user);
 * - `handoff` (target peer, context summary, reason) → `reply(text, { handoff })`; offered when peers
 *   exist and this agent is not itself the target of a handoff (one handoff per thread);
 * - `return_handoff` (status, summary) → `reply(text, { handoffReturn })`; offered to the target of a
 *   handoff, to give control back;
 * - `delegate` (agents, input, strategy) → `reply(text, { delegate })`: the thread asks those peers and
 *   brings their answers back to this agent, which then answers the user; offered when peers exist,
 *   outside a handoff, and not on the message that brings a delegation's results back.
 *
 * One decision per answer: a second routing call is refused with a tool error the model can read.
 * Invalid arguments (an unknown agent, the agent itself) are tool errors too, listing the valid choices.
 */
import { z } from 'zod';
import type { HandoffDirective, HandoffRequest, HandoffReturnInput } from '../protocol/handoff.js';
import { describeZodError } from '../protocol/errors.js';
import { DELEGATION_STRATEGIES, type DelegateDirective } from '../protocol/delegation.js';
import { LIMITS } from '../protocol/limits.js';
import { SENDER, USER, type SimplifiedAgentCard } from '../protocol/routing.js';
import type { ToolDefinition } from '../model/types.js';

const ROUTE_TOOL = 'route';
const HANDOFF_TOOL = 'handoff';
const RETURN_HANDOFF_TOOL = 'return_handoff';
const DELEGATE_TOOL = 'delegate';

interface RoutingChoice {
  tool: string;
  to?: string;
  reason?: string;
  handoff?: HandoffDirective;
  handoffReturn?: HandoffReturnInput;
  delegate?: DelegateDirective;
}

export interface RoutingSituation {
  /** This agent's id. */
  self: string;
  /** Who sent the message: `user` or an agent id. */
  sender: string;
  peers: readonly SimplifiedAgentCard[];
  /** Set when this agent is the target of an active handoff. */
  handoff?: HandoffRequest;
  /** The message brings the results of this agent's delegation back (no second delegation on it). */
  delegationResults?: boolean;
  /** The agent's card does not allow it to start handoffs / to delegate: those tools are not offered. */
  noHandoff?: boolean;
  noDelegate?: boolean;
}

export interface RoutingTools {
  definitions: ToolDefinition[];
  names: string[];
  /** Runs one routing call: the text for the model, or throws an Error the model reads as a tool error. */
  run(name: string, argumentsText: string): string;
  /** The decision of this turn, if the model made one. */
  choice(): RoutingChoice | undefined;
}

function parse<T>(schema: z.ZodType<T>, text: string): T {
  let value: unknown;
  try {
    value = JSON.parse(text.trim() === '' ? '{}' : text);
  } catch {
    throw new Error(`the arguments are not valid JSON: ${text.slice(0, 200)}`);
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new Error(`invalid arguments: ${describeZodError(parsed.error)}`);
  return parsed.data;
}

/** The routing tools for one turn, given who may be routed to. */
export function routingTools(situation: RoutingSituation): RoutingTools {
  const peers = situation.peers.filter((p) => p.id !== situation.self);
  const peerIds = peers.map((p) => p.id);
  const recipients = [USER, ...(situation.sender !== USER ? [SENDER] : []), ...peerIds];
  const definitions: ToolDefinition[] = [];
  let decided: RoutingChoice | undefined;

  const offerRoute = peers.length > 0 || situation.sender !== USER;
  const offerHandoff = peers.length > 0 && !situation.handoff && situation.noHandoff !== true;
  const offerReturn = situation.handoff !== undefined;
  const offerDelegate = peers.length > 0 && !situation.handoff && situation.delegationResults !== true && situation.noDelegate !== true;

  if (offerRoute) {
    const who = peers.map((p) => `${p.id} (${p.description || p.name})`).join('; ');
    definitions.push({
      name: ROUTE_TOOL,
      description:
        `Choose who receives your next answer: "user" (the person you are helping)` +
        `${situation.sender !== USER ? `, "sender" (agent ${situation.sender}, who sent you this message)` : ''}` +
        `${who ? `, or another agent: ${who}` : ''}. Call it at most once, then write your answer ` +
        '(to an agent: what you need it to do). Without it, your answer goes to the user.',
      parameters: {
        type: 'object',
        properties: {
          recipient: { type: 'string', enum: recipients, description: 'who receives your answer' },
          reason: { type: 'string', description: 'why, in one sentence' },
        },
        required: ['recipient', 'reason'],
        additionalProperties: false,
      },
    });
  }
  if (offerHandoff) {
    definitions.push({
      name: HANDOFF_TOOL,
      description:
        'Hand the conversation over to a specialist agent: it then talks with the user directly until it is done, ' +
        'and control comes back to you with its summary. Call it at most once, then tell the user briefly.',
      parameters: {
        type: 'object',
        properties: {
          target: { type: 'string', enum: peerIds, description: 'the agent to hand over to' },
          context_summary: { type: 'string', description: 'what the specialist needs to know (at most 2000 characters)' },
          reason: { type: 'string', description: 'why you hand over (at most 500 characters)' },
        },
        required: ['target', 'context_summary', 'reason'],
        additionalProperties: false,
      },
    });
  }
  if (offerReturn) {
    definitions.push({
      name: RETURN_HANDOFF_TOOL,
      description:
        `Agent ${situation.handoff!.sourceAgentId} handed this conversation to you. When the user's need is met ` +
        '(or cannot be), give control back with a summary, then write your last message to the user.',
      parameters: {
        type: 'object',
        properties: {
          status: { type: 'string', enum: ['completed', 'cancelled', 'error'], description: 'how it ended' },
          summary: { type: 'string', description: `what ${situation.handoff!.sourceAgentId} needs to know` },
        },
        required: ['status', 'summary'],
        additionalProperties: false,
      },
    });
  }

  if (offerDelegate) {
    definitions.push({
      name: DELEGATE_TOOL,
      description:
        'Ask other agents for help: each gets your input, and their answers come back to you in your next message, ' +
        'so that you can write the answer to the user yourself. Call it at most once, then tell the user briefly what you are doing.',
      parameters: {
        type: 'object',
        properties: {
          agents: {
            type: 'array',
            items: { type: 'string', enum: peerIds },
            minItems: 1,
            maxItems: LIMITS.delegateAgents,
            description: 'the agents to ask, each once',
          },
          input: { type: 'string', description: 'what you ask them' },
          strategy: {
            type: 'string',
            enum: [...DELEGATION_STRATEGIES],
            description: 'parallel (default): all at once; sequential: one after another; first_success: the first answer wins',
          },
        },
        required: ['agents', 'input'],
        additionalProperties: false,
      },
    });
  }

  const decide = (choice: RoutingChoice): void => {
    if (decided) throw new Error(`you already chose (${decided.tool}${decided.to ? ` to ${decided.to}` : ''}); one routing decision per answer`);
    decided = choice;
  };

  const oneOf = (values: string[], what: string) =>
    z.string().refine((v) => values.includes(v), { message: `${what} must be one of ${values.join(', ') || '(none)'}` });

  return {
    definitions,
    names: definitions.map((d) => d.name),
    choice: () => decided,
    run(name, text) {
      if (name === ROUTE_TOOL && offerRoute) {
        const args = parse(z.object({ recipient: oneOf(recipients, 'recipient'), reason: z.string().max(500).optional() }), text);
        decide({ tool: name, to: args.recipient, ...(args.reason ? { reason: args.reason } : {}) });
        if (args.recipient === USER) return 'Your answer will go to the user. Write it now.';
        if (args.recipient === SENDER) return `Your answer will go back to ${situation.sender}. Write it now.`;
        return `Your answer will go to agent ${args.recipient}. Write it now, as a message to that agent.`;
      }
      if (name === HANDOFF_TOOL && offerHandoff) {
        const args = parse(
          z.object({ target: oneOf(peerIds, 'target'), context_summary: z.string().min(1).max(2000), reason: z.string().min(1).max(500) }),
          text,
        );
        decide({ tool: name, handoff: { targetAgentId: args.target, contextSummary: args.context_summary, handoffReason: args.reason } });
        return `The conversation will be handed to ${args.target} after your answer. Tell the user briefly.`;
      }
      if (name === RETURN_HANDOFF_TOOL && offerReturn) {
        const args = parse(z.object({ status: z.enum(['completed', 'cancelled', 'error']), summary: z.string().min(1).max(2000) }), text);
        decide({ tool: name, handoffReturn: { completionStatus: args.status, resultSummary: args.summary } });
        return `Control goes back to ${situation.handoff!.sourceAgentId} after your answer. Write your last message to the user.`;
      }
      if (name === DELEGATE_TOOL && offerDelegate) {
        const args = parse(
          z.object({
            agents: z
              .array(oneOf(peerIds, 'each agent'))
              .min(1)
              .max(LIMITS.delegateAgents)
              .refine((a) => new Set(a).size === a.length, { message: 'name each agent once' }),
            input: z.string().min(1).max(LIMITS.delegateInputChars),
            strategy: z.enum(DELEGATION_STRATEGIES).optional(),
          }),
          text,
        );
        decide({ tool: name, delegate: { agents: args.agents, input: args.input, ...(args.strategy ? { strategy: args.strategy } : {}) } });
        return `${args.agents.join(', ')} will be asked after your answer; their answers come back to you. Tell the user briefly what you are doing.`;
      }
      throw new Error(`no routing tool "${name}" is available now`);
    },
  };
}
