/**
 * The conversation an agent is given with each message, and what it gives back about it.
 *
 * An agent whose card carries the conversation extension (`CONVERSATION_URI`, `params.maxMessages`) gets,
 * with every message the thread sends it, the thread's earlier messages in `troupe/history` (oldest first,
 * the message it is answering left out) and the summary it wrote earlier of older turns in `troupe/memory`.
 * Both come from the thread's record, not from the agent's process: they survive a node restart, a
 * takeover and passivation. An agent that folds older turns into a summary sends the new one back in its
 * reply's `troupe/memory`; the thread keeps it in its record, per agent, and sends it back next time.
 *
 * The reply's `troupe/usage` says what the model calls of the turn cost in tokens (`TurnUsage`). The final
 * message of a turn carries the turn's: every agent that answered in it, summed, with each agent's share
 * (`agents`) and each call naming its agent (`threadUsage`).
 */
import { z } from 'zod';
import type { AgentCard, Message } from './a2a.js';
import { META } from './metadata.js';

/** Card extension: the agent wants the thread's conversation with each message. */
export const CONVERSATION_URI = 'https://troupe.dev/extensions/conversation/v1';

/** Earlier messages a TS agent gets when its card says no number. */
export const DEFAULT_HISTORY_MESSAGES = 20;
/** Most earlier messages any agent is sent (the thread keeps `historyLimit`, default 50, anyway). */
export const MAX_HISTORY_MESSAGES = 100;
/** Most bytes of JSON the earlier messages take in one request (the newest are kept). */
export const MAX_HISTORY_BYTES = 256 * 1024;
/** Longest summary a thread keeps for one agent. */
export const MAX_SUMMARY_CHARS = 8_000;

/** A summary an agent wrote of the conversation up to and including message `through`. */
const MemorySummarySchema = z.strictObject({
  text: z.string().max(MAX_SUMMARY_CHARS),
  /** The id of the last message the summary covers. */
  through: z.string().min(1).max(512),
  /** How many messages it covers in all (for diagnostics). */
  messages: z.int().nonnegative().optional(),
});
export type MemorySummary = z.infer<typeof MemorySummarySchema>;

/** How many earlier messages an agent's card asks for; undefined when it asks for none. */
export function historyWanted(card: Pick<AgentCard, 'capabilities'> | undefined): number | undefined {
  const ext = card?.capabilities.extensions?.find((e) => e.uri === CONVERSATION_URI);
  if (!ext) return undefined;
  const n = ext.params?.['maxMessages'];
  const wanted = typeof n === 'number' && Number.isInteger(n) && n >= 0 ? n : DEFAULT_HISTORY_MESSAGES;
  return Math.min(wanted, MAX_HISTORY_MESSAGES);
}

/** The summary a message or reply carries in `troupe/memory`, if it is a valid one. */
export function readMemorySummary(message: Pick<Message, 'metadata'> | undefined): MemorySummary | undefined {
  const raw = message?.metadata?.[META.memory];
  if (raw === undefined) return undefined;
  const parsed = MemorySummarySchema.safeParse(raw);
  return parsed.success ? parsed.data : undefined;
}

/** One model call's tokens. */
const CallUsageSchema = z.strictObject({
  model: z.string().max(200),
  /** `answer` (the model loop), `summary` (folding older turns), `repair` (a structured answer asked again). */
  purpose: z.enum(['answer', 'summary', 'repair']),
  inputTokens: z.int().nonnegative().optional(),
  outputTokens: z.int().nonnegative().optional(),
  /** On a turn's final message: the agent that made the call. */
  agent: z.string().max(100).optional(),
});
export type CallUsage = z.infer<typeof CallUsageSchema>;

/** One agent's share of a turn's tokens (all its answers in the turn). */
const AgentUsageSchema = z.strictObject({
  agent: z.string().min(1).max(100),
  inputTokens: z.int().nonnegative(),
  outputTokens: z.int().nonnegative(),
});
type AgentUsage = z.infer<typeof AgentUsageSchema>;

/** Model calls listed in one reply's usage (the sums count them all). */
const MAX_USAGE_CALLS = 64;
/** Agents listed in a turn's usage. */
const MAX_USAGE_AGENTS = 32;

/**
 * `troupe/usage` on an agent's reply: every model call of its turn and their sums. On a turn's final
 * message: the whole turn's, with `agents`, each agent's share in the order they first answered.
 */
const TurnUsageSchema = z.strictObject({
  inputTokens: z.int().nonnegative(),
  outputTokens: z.int().nonnegative(),
  calls: z.array(CallUsageSchema).max(MAX_USAGE_CALLS),
  agents: z.array(AgentUsageSchema).max(MAX_USAGE_AGENTS).optional(),
});
export type TurnUsage = z.infer<typeof TurnUsageSchema>;

/** The usage an agent's reply carries, if a valid one. */
export function readTurnUsage(message: Pick<Message, 'metadata'> | undefined): TurnUsage | undefined {
  const raw = message?.metadata?.[META.usage];
  if (raw === undefined) return undefined;
  const parsed = TurnUsageSchema.safeParse(raw);
  return parsed.success ? parsed.data : undefined;
}

/**
 * A turn's usage from the usage of each answer in it, in order (an agent may answer more than once):
 * the sums, each agent's share, and every call (the first MAX_USAGE_CALLS) with its agent.
 */
export function threadUsage(answers: ReadonlyArray<{ agent: string; usage: TurnUsage }>): TurnUsage {
  const agents: AgentUsage[] = [];
  const calls: CallUsage[] = [];
  let inputTokens = 0;
  let outputTokens = 0;
  for (const { agent, usage } of answers) {
    inputTokens += usage.inputTokens;
    outputTokens += usage.outputTokens;
    let share = agents.find((a) => a.agent === agent);
    if (!share && agents.length < MAX_USAGE_AGENTS) agents.push((share = { agent, inputTokens: 0, outputTokens: 0 }));
    if (share) {
      share.inputTokens += usage.inputTokens;
      share.outputTokens += usage.outputTokens;
    }
    for (const c of usage.calls) if (calls.length < MAX_USAGE_CALLS) calls.push({ ...c, agent });
  }
  return { inputTokens, outputTokens, calls, agents };
}

/** The sums and the (first MAX_USAGE_CALLS) calls of a turn. */
export function turnUsage(calls: readonly CallUsage[]): TurnUsage {
  let inputTokens = 0;
  let outputTokens = 0;
  for (const c of calls) {
    inputTokens += c.inputTokens ?? 0;
    outputTokens += c.outputTokens ?? 0;
  }
  return { inputTokens, outputTokens, calls: calls.slice(0, MAX_USAGE_CALLS) };
}
