/**
 * The thread's side of an agent's conversation memory (protocol/conversation.ts): which earlier messages
 * an agent is sent with a message, and the summaries agents write of older turns, kept per agent in the
 * thread's context (and so in its record, across restarts and passivation).
 */
import type { Message } from '../../protocol/a2a.js';
import { MAX_HISTORY_BYTES, readMemorySummary, type MemorySummary } from '../../protocol/conversation.js';
import { META } from '../../protocol/metadata.js';
import type { ThreadContext } from './types.js';

/** What an agent is sent about the conversation with one message. */
export interface AgentConversation {
  /** The thread's earlier messages, oldest first. */
  history: Message[];
  /** The summary this agent wrote of older turns, if any. */
  memory?: MemorySummary;
}

/**
 * Whether history message `m` is the message being sent to `agentId`: the same message, the answer it was
 * made from when one agent's reply is forwarded to the next (`<id>><agent>`, routing.ts), or the user's
 * message passed to a handoff's target (`<id>>handoff><agent>`, handoff.ts).
 */
function isCurrent(m: Message, outgoingId: string, agentId: string): boolean {
  return m.messageId === outgoingId || outgoingId === `${m.messageId}>${agentId}` || outgoingId === `${m.messageId}>handoff>${agentId}`;
}

/**
 * The earlier messages an agent gets with `outgoing`: the newest `maxMessages` of the history without the
 * message being sent, fewer when their JSON would pass MAX_HISTORY_BYTES, and without the conversation
 * metadata of their own (nothing nests). With a summary of the agent's own, the messages it covers are
 * left out. A handoff's target is sent the user's message again: what came after it (the source's
 * answer) stays in the history, before the message it answers.
 */
export function conversationFor(
  context: Pick<ThreadContext, 'history' | 'memory'>,
  agentId: string,
  outgoing: Message,
  maxMessages: number,
): AgentConversation {
  const memory = context.memory?.[agentId];
  const history = context.history;
  let start = 0;
  if (memory) {
    const covered = history.findIndex((m) => m.messageId === memory.through);
    if (covered >= 0) start = covered + 1;
  }
  const out: Message[] = [];
  let bytes = 0;
  for (let i = history.length - 1; i >= start && out.length < maxMessages; i--) {
    const m = history[i]!;
    if (isCurrent(m, outgoing.messageId, agentId)) continue;
    const clean = withoutConversation(m);
    bytes += JSON.stringify(clean).length;
    if (bytes > MAX_HISTORY_BYTES) break;
    out.push(clean);
  }
  out.reverse();
  return { history: out, ...(memory ? { memory } : {}) };
}

function withoutConversation(m: Message): Message {
  const meta = m.metadata;
  if (!meta || (meta[META.history] === undefined && meta[META.memory] === undefined && meta[META.recentMessages] === undefined)) return m;
  const { [META.history]: _h, [META.memory]: _m, [META.recentMessages]: _r, ...rest } = meta;
  return { ...m, metadata: rest };
}

/**
 * The thread's summaries after `agentId` answered with `reply`: its new summary kept when the reply
 * carries a valid one, the map unchanged otherwise. A null-prototype map: keys are agent ids.
 */
export function keepSummary(memory: ThreadContext['memory'], agentId: string, reply: Message): ThreadContext['memory'] {
  const summary = readMemorySummary(reply);
  if (!summary) return memory;
  const next = Object.assign(Object.create(null) as Record<string, MemorySummary>, memory);
  next[agentId] = summary;
  return next;
}

/** The reply as the thread keeps and shows it: without the summary, which goes to the thread's memory. */
export function withoutSummary(reply: Message): Message {
  if (reply.metadata?.[META.memory] === undefined) return reply;
  const { [META.memory]: _m, ...rest } = reply.metadata;
  return { ...reply, metadata: rest };
}
