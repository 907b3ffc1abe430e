/**
 * Where an agent's reply goes next. A pure function: the router machine runs it, tests call
 * it directly.
 */
import type { Message } from '../protocol/a2a.js';
import { TroupeError, type ErrorBody } from '../protocol/errors.js';
import { SENDER, USER, readRoutingResponse } from '../protocol/routing.js';

/** What the router knows of each live agent. */
export interface AgentDirectoryEntry {
  supportsClientRouting: boolean;
  /** From the card's `capabilities.handoff`; absent = allowed. */
  handoff?: { canInitiate?: boolean; canAccept?: boolean };
  /** From the card's `capabilities.orchestration`; absent = may delegate, up to the team's limit. */
  orchestration?: { canDelegate?: boolean; maxParallel?: number };
}
export type AgentDirectory = Record<string, AgentDirectoryEntry>;

/**
 * The directory entry of a live agent. Ids are external strings (an agent may name `constructor` or
 * `__proto__`), and a directory restored from a snapshot is a plain object: only own keys count.
 */
export function liveAgent(agents: AgentDirectory, id: string): AgentDirectoryEntry | undefined {
  return Object.hasOwn(agents, id) ? agents[id] : undefined;
}

export interface ReplyRouteInput {
  reply: Message;
  /** The agent that produced the reply. */
  from: string;
  /** Who sent the current message to each agent in the chain; the top is `from`'s sender. */
  senderStack: readonly string[];
  /** Agent-to-agent forwards so far in this turn. */
  hops: number;
  maxHops: number;
  agents: AgentDirectory;
}

export type RouteDecision =
  | { to: 'user'; reason: string; error?: ErrorBody }
  | {
      to: 'agent';
      agentId: string;
      /** `initial`: a user message's first agent; `forward` pushes the sender on the stack; `return` pops it. */
      mode: 'initial' | 'forward' | 'return';
      reason: string;
      confidence?: number;
      additionalAgents?: string[];
    }
  /** The router is not confident enough: the thread asks the user to clarify. */
  | { to: 'clarify'; reason: string; confidence: number; candidate?: string };

export function routeReply(input: ReplyRouteInput): RouteDecision {
  const { reply, from, senderStack, hops, maxHops, agents } = input;
  let response;
  try {
    response = readRoutingResponse(reply);
  } catch (err) {
    const error = TroupeError.from(err, 'EXTENSION_PARSE_ERROR').toBody();
    return { to: 'user', reason: `${from} sent malformed routing metadata; its answer goes to the user`, error };
  }
  const senderOf = senderStack[senderStack.length - 1] ?? USER;
  const recipient = response?.recipient;
  const why = response?.reason ? `: ${response.reason}` : '';

  if (recipient === undefined) {
    const supports = liveAgent(agents, from)?.supportsClientRouting ?? false;
    return {
      to: 'user',
      reason: supports ? `${from} named no recipient; policy answers the user` : `${from} does not use client routing; it answers the user`,
    };
  }
  if (recipient === USER) return { to: 'user', reason: `${from} answered the user${why}` };

  let target: string;
  let mode: 'forward' | 'return';
  if (recipient === SENDER) {
    if (senderOf === USER) return { to: 'user', reason: `${from} returned to its sender, the user${why}` };
    target = senderOf;
    mode = 'return';
  } else {
    target = recipient;
    mode = 'forward';
    if (target === from) {
      return {
        to: 'user',
        reason: `${from} named itself as the next recipient`,
        error: { code: 'ROUTING_LOOP', message: `agent "${from}" routed a message to itself`, details: { reason: 'self', agentId: from } },
      };
    }
    if (!liveAgent(agents, target)) {
      return {
        to: 'user',
        reason: `${from} named an unknown agent "${target}"`,
        error: {
          code: 'INVALID_RECIPIENT',
          message: `agent "${from}" routed to "${target}", which is not a live agent; its answer goes to the user`,
          details: { recipient: target, agentId: from },
        },
      };
    }
  }
  if (hops >= maxHops) {
    return {
      to: 'user',
      reason: `hop limit ${maxHops} reached`,
      error: {
        code: 'ROUTING_LOOP',
        message: `stopped after ${hops} agent-to-agent hops (limit ${maxHops}); ${from} wanted to send to "${target}". The last answer is attached.`,
        details: { hops, maxHops, from, to: target },
      },
    };
  }
  return { to: 'agent', agentId: target, mode, reason: `${from} -> ${target}${mode === 'return' ? ' (back to sender)' : ''}${why}` };
}
