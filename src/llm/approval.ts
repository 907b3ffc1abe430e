/**
 * A YAML agent's side of tool approval (protocol/approval.ts, docs/conversation.md#tool-approval): the
 * reply that asks a person, and the model messages a turn resumes from once the person has answered.
 *
 * The request holds the turn's model messages so far and the round's calls, so the agent needs no
 * memory of its own: any instance, after any restart, resumes from the thread's history. On resume the
 * approved calls run (with the person's arguments when they edited them) together with the round's calls
 * that needed no approval; a refused call, one timed out (the thread's `timeout` decision at the deadline,
 * or a person's decision after it), and every waiting call when the person wrote something else instead,
 * reach the model as a tool error saying so.
 */
import { z } from 'zod';
import type { Message } from '../protocol/a2a.js';
import { META } from '../protocol/metadata.js';
import type { ApprovalDecision, ApprovalRequest, PendingCall } from '../protocol/approval.js';
import type { ChatMessage, ToolCall } from '../model/types.js';

/** Most bytes of JSON the turn's messages may take in a request; past it only the user's text is kept. */
const MAX_TURN_BYTES = 64 * 1024;

const ToolCallSchema = z.object({ id: z.string(), name: z.string(), arguments: z.string() });
const ChatMessageSchema: z.ZodType<ChatMessage> = z.union([
  z.object({ role: z.literal('system'), content: z.string() }),
  z.object({
    role: z.literal('user'),
    content: z.union([
      z.string(),
      z.array(
        z.union([z.object({ type: z.literal('text'), text: z.string() }), z.object({ type: z.literal('image'), mimeType: z.string(), data: z.string() })]),
      ),
    ]),
  }),
  z.object({ role: z.literal('assistant'), content: z.string(), toolCalls: z.array(ToolCallSchema).optional() }),
  z.object({ role: z.literal('tool'), toolCallId: z.string(), name: z.string(), content: z.string(), isError: z.boolean().optional() }),
]) as z.ZodType<ChatMessage>;

/** The request for a round the model wants to run: `turn` is the turn's messages after the history. */
export function approvalRequest(opts: {
  agent: string;
  answering: string;
  expiresAt: number;
  text: string;
  calls: ToolCall[];
  needsApproval: (name: string) => boolean;
  turn: ChatMessage[];
  userText: string;
}): ApprovalRequest {
  const fits = JSON.stringify(opts.turn).length <= MAX_TURN_BYTES;
  return {
    agent: opts.agent,
    answering: opts.answering,
    expiresAt: opts.expiresAt,
    text: opts.text,
    calls: opts.calls.map((c) => ({ callId: c.id, tool: c.name, arguments: c.arguments, needsApproval: opts.needsApproval(c.name) })),
    turn: fits ? opts.turn : [{ role: 'user', content: opts.userText }],
  };
}

/** What the person reads: the model's text, then each waiting call and how to answer. */
export function approvalText(request: ApprovalRequest): string {
  const waiting = request.calls.filter((c) => c.needsApproval);
  const lines = waiting.map((c) => `- ${c.tool}(${c.arguments}) [${c.callId}]`);
  return [
    ...(request.text.trim() ? [request.text.trim(), ''] : []),
    `Waiting for your approval before running ${waiting.length === 1 ? 'this tool' : 'these tools'}:`,
    ...lines,
    `Answer with a "troupe/approval" data part (decision approve or deny), or run troupe approve|deny <thread>, before ${new Date(request.expiresAt).toISOString()}.`,
  ].join('\n');
}

/** The reply's data part: the waiting calls for any A2A client. */
export function approvalData(request: ApprovalRequest): Record<string, unknown> {
  return { [META.approval]: { agent: request.agent, expiresAt: request.expiresAt, calls: request.calls.filter((c) => c.needsApproval) } };
}

/** The turn's model messages the request holds (those that do not parse are left out). */
export function turnMessages(request: ApprovalRequest): ChatMessage[] {
  return request.turn.flatMap((m) => {
    const parsed = ChatMessageSchema.safeParse(m);
    return parsed.success ? [parsed.data] : [];
  });
}

/** How one call was decided: run it (with these arguments), or tell the model why not. */
export type CallDecision = { run: true; call: ToolCall } | { run: false; call: ToolCall; why: string };

/**
 * Each call of the paused round, decided: a call that needed no approval runs; a waiting one runs when
 * the person approved it (all, or this one by `callId`) in time, with their arguments if they gave any.
 */
export function decideCalls(request: ApprovalRequest, decision: ApprovalDecision | undefined, now: number, wrote: string): CallDecision[] {
  return request.calls.map((c: PendingCall): CallDecision => {
    const call: ToolCall = { id: c.callId, name: c.tool, arguments: c.arguments };
    if (!c.needsApproval) return { run: true, call };
    // The thread's own decision at the deadline, or a person's that came after it.
    if (decision?.decision === 'timeout' || now > request.expiresAt)
      return { run: false, call, why: `the approval of "${c.tool}" timed out: nobody approved it in time; it did not run` };
    if (!decision) return { run: false, call, why: `the user did not approve "${c.tool}" and wrote instead: ${wrote.slice(0, 500)}; it did not run` };
    const mine = decision.callId === undefined || decision.callId === c.callId;
    if (!mine) return { run: false, call, why: `the user did not approve "${c.tool}"; it did not run` };
    if (decision.decision === 'deny')
      return { run: false, call, why: `the user refused "${c.tool}"${decision.reason ? `: ${decision.reason}` : ''}; it did not run` };
    return { run: true, call: decision.arguments ? { ...call, arguments: JSON.stringify(decision.arguments) } : call };
  });
}

/** Whether history message `m` belongs to the paused turn (the message it answered, or the request itself). */
export function ofPausedTurn(m: Message, self: string, request: ApprovalRequest, requestId: string): boolean {
  const a = request.answering;
  return m.messageId === requestId || m.messageId === a || a === `${m.messageId}>${self}` || a === `${m.messageId}>handoff>${self}`;
}
