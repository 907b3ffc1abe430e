/**
 * The router policy contract: what picks an agent for a message that names no recipient. A policy returns
 * a RouterDecision (the best agent, a confidence in [0, 1], a reasoning, and `additionalAgents` to fan out
 * to); the router machine compares the confidence with the threshold. The scoring policy (`scoring.ts`) and
 * the LLM policy (`llm-policy.ts`) implement it.
 */
import { TroupeError, type AgentCard, type Message, type RouterDecision } from '../protocol/index.js';

export const DEFAULT_CONFIDENCE_THRESHOLD = 0.7;

export interface RouterPolicyInput {
  /** The message to route (no explicit recipient). */
  message: Message;
  /** The candidate agents (live, minus the sender if the router excludes it). */
  agents: AgentCard[];
  /** Earlier messages of the thread, oldest first; policies may use them as context for short follow-ups. */
  history?: Message[];
  /** Aborts a policy that does I/O (the LLM policy); the scoring policy ignores it. */
  signal?: AbortSignal;
}

export interface RouterPolicy {
  readonly name: string;
  decide(input: RouterPolicyInput): Promise<RouterDecision>;
}

/** What the policies score and prompt with: the message's text parts plus its file names, in part order (data parts carry no prose). */
export function routingText(message: Message): string {
  const pieces: string[] = [];
  for (const part of message.parts) {
    if (part.kind === 'text') pieces.push(part.text);
    else if (part.kind === 'file' && part.file.name) pieces.push(part.file.name);
  }
  return pieces.join('\n');
}

export function requireAgents(agents: AgentCard[], policy: string): void {
  if (agents.length === 0) {
    throw new TroupeError('ROUTER_FAILURE', `router policy "${policy}" has no agents to choose from`);
  }
}
