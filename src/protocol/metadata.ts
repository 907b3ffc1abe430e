/**
 * Every `troupe/*` key Troupe puts in A2A metadata (messages, status events, the stored Task), in one
 * place, with what it carries. Agents in other languages read the same names (README, wire contract).
 */
export const META = {
  /** Message: the agent that wrote it (`troupe` for messages of the runtime itself). */
  agent: 'troupe/agent',
  /** Status event: one route step; final message: the whole route of the turn (RouteStep[]). */
  route: 'troupe/route',
  /** Final message / status event: the typed error the turn ended with (ErrorBody). */
  error: 'troupe/error',
  /** Final message: agent-to-agent hops of the turn. */
  hops: 'troupe/hops',
  /** Final message: the user messageId it answers (several messages may be in flight on one thread). */
  inReplyTo: 'troupe/inReplyTo',
  /** Stored Task: the route log across turns (RouteStep[]). */
  routes: 'troupe/routes',
  /** Stored Task: turns so far. */
  turns: 'troupe/turns',
  /** Stored Task: who owns the thread (`<principal>` or `<principal>/<user>`). */
  owner: 'troupe/owner',
  /** Stored Task / message: the open handoff or what became of one ({ targetAgentId, sourceAgentId, phase } / { status, reason }). */
  handoff: 'troupe/handoff',
  /** Message to a handoff's source when control comes back ({ targetAgentId, status }). */
  handoffResume: 'troupe/handoffResume',
  /** Message to a handoff's target: the last messages of the thread (Message[]). */
  recentMessages: 'troupe/recentMessages',
  /** Message to a handoff's target: the source's summary. */
  contextSummary: 'troupe/contextSummary',
  /** Clarification message: why the router asked ({ reason, confidence }). */
  clarify: 'troupe/clarify',
} as const;
export type MetaKey = (typeof META)[keyof typeof META];

/** One step of a turn's route, kept in the task metadata and shown by `troupe send`. */
export interface RouteStep {
  from: string;
  to: string;
  hop: number;
  reason: string;
  at: number;
  confidence?: number;
  /** A routing decision that sent the message to no agent: the user was asked to clarify, or the router failed. */
  outcome?: 'clarify' | 'failure';
}

/**
 * The answer a history holds for user message `messageId`: the last agent message after it and before
 * the next user message (every hop's reply is kept; the turn's answer is the last), marked with
 * `troupe/inReplyTo` as the final event carried it. Undefined while it is unanswered: when it is the
 * last user message of a thread that is still `working`, its replies so far are not the answer yet.
 */
export function answerIn<M extends { role: string; messageId: string; metadata?: Record<string, unknown> }>(
  history: readonly M[],
  messageId: string,
  working: boolean,
): M | undefined {
  const at = history.findIndex((m) => m.role === 'user' && m.messageId === messageId);
  if (at < 0) return undefined;
  let answer: M | undefined;
  let i = at + 1;
  for (; i < history.length && history[i]!.role !== 'user'; i++) answer = history[i];
  if (working && i >= history.length) return undefined;
  return answer ? { ...answer, metadata: { ...answer.metadata, [META.inReplyTo]: messageId } } : undefined;
}
