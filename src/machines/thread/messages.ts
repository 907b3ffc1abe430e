/**
 * The messages a thread makes: what an agent receives (addressed from the thread's point of view, the
 * previous hop's routing metadata stripped), Troupe's own messages (errors, clarification), and the
 * bounded logs it keeps.
 */
import type { Message } from '../../protocol/a2a.js';
import { META } from '../../protocol/metadata.js';
import type { AgentCallOutput } from '../agent-call.js';
import type { ThreadContext } from './types.js';

/** Route steps kept across turns (the stored Task's route log). */
export const ROUTE_LOG_LIMIT = 50;

/** The last `limit` items (history and the route log are bounded). */
export function prune<T>(items: T[], limit: number): T[] {
  return items.length > limit ? items.slice(items.length - limit) : items;
}

/** An agent-authored message from Troupe itself (errors, clarification). */
export function systemMessage(context: ThreadContext, id: string, text: string, metadata: Record<string, unknown>): Message {
  return {
    kind: 'message',
    role: 'agent',
    messageId: id,
    contextId: context.contextId,
    taskId: context.threadId,
    parts: [{ kind: 'text', text }],
    metadata: { [META.agent]: 'troupe', ...metadata },
  };
}

/** The message an agent receives: the previous content, addressed from the thread's point of view. */
export function messageFor(context: ThreadContext, source: Message, id: string, from: string): Message {
  return {
    kind: 'message',
    role: 'user',
    messageId: id,
    contextId: context.contextId,
    taskId: context.threadId,
    parts: source.parts,
    ...(source.extensions ? { extensions: source.extensions } : {}),
    metadata: { ...stripRouting(source.metadata), [META.agent]: from },
  };
}

/** Metadata without the previous hop's route, error and client-routing slot (the next agent gets its own). */
function stripRouting(metadata: Record<string, unknown> | undefined): Record<string, unknown> {
  if (!metadata) return {};
  const { [META.route]: _r, [META.error]: _e, ...rest } = metadata;
  return Object.fromEntries(Object.entries(rest).filter(([k]) => !k.startsWith('https://ranch.woi.dev/extensions/client-routing')));
}

/** The message in an agent's reply: the message itself, or a task's status message. */
export function agentReplyMessage(output: Extract<AgentCallOutput, { ok: true }>): Message | undefined {
  const { reply } = output;
  if (reply.kind === 'message') return reply;
  if (reply.kind === 'task') return reply.status.message;
  return undefined;
}

/** The end user of an owner `<principal>/<user>`, or the principal itself. */
export function userOf(owner: string): string {
  const slash = owner.indexOf('/');
  return slash < 0 ? owner : owner.slice(slash + 1);
}
