/**
 * Tool approval (a person in the loop), on the wire. An LLM agent whose model calls a tool marked
 * `requires_approval` runs none of that round's calls: it answers with the pending calls — a data part
 * `{ "troupe/approval": { calls, expiresAt } }` for any A2A client, and the whole request in the reply's
 * `troupe/approval` metadata — and the turn ends in `input-required`. The person answers with an ordinary
 * message to the same agent carrying a decision, as a data part or in metadata under `troupe/approval`:
 *
 *   { "kind": "data", "data": { "troupe/approval": { "decision": "approve" } } }
 *   { "kind": "data", "data": { "troupe/approval": { "decision": "approve", "callId": "call_1", "arguments": { "amount": 20 } } } }
 *   { "kind": "data", "data": { "troupe/approval": { "decision": "deny", "reason": "too much" } } }
 *
 * (`troupe approve|deny <thread>` sends one.) Both the request and the decision are messages of the thread,
 * so they are in its record: a node that takes the thread over after a crash sends the decision to the
 * agent with the request in its history, and the agent resumes from them.
 *
 * Nobody deciding by `expiresAt` is a refusal too: the thread keeps the deadline in its record and, when it
 * passes, sends the waiting agent `{ "troupe/approval": { "decision": "timeout" } }` itself
 * (`approvalTimeoutMessage`); the agent tells its model the calls timed out and answers the user.
 */
import { z } from 'zod';
import type { Message } from './a2a.js';
import { META } from './metadata.js';
import { CLIENT_ROUTING_URI } from './routing.js';

const MAX_PENDING_CALLS = 32;

const PendingCallSchema = z.strictObject({
  callId: z.string().min(1).max(256),
  tool: z.string().min(1).max(200),
  /** The arguments as the model wrote them (JSON text). */
  arguments: z.string().max(64 * 1024),
  /** Whether this call waits for the person (the round's other calls run with it once decided). */
  needsApproval: z.boolean(),
});
export type PendingCall = z.infer<typeof PendingCallSchema>;

/** `troupe/approval` on the agent's reply: what waits, until when, and what the agent needs to resume. */
const ApprovalRequestSchema = z.strictObject({
  agent: z.string().min(1).max(100),
  /** The message the paused turn answered. */
  answering: z.string().min(1).max(512),
  /** Epoch ms; a decision after it counts as a refusal (timed out). */
  expiresAt: z.number(),
  /** What the model wrote with the calls. */
  text: z.string().max(64 * 1024),
  calls: z.array(PendingCallSchema).min(1).max(MAX_PENDING_CALLS),
  /** The turn's model messages so far (the agent's own, model-neutral form), to resume from. */
  turn: z.array(z.unknown()).max(200),
});
export type ApprovalRequest = z.infer<typeof ApprovalRequestSchema>;

/**
 * A person's decision: on every waiting call, or on one (`callId`); `arguments` replaces the model's (an
 * edit). `timeout` is what the thread sends at the deadline: a refusal the model is told timed out.
 */
const ApprovalDecisionSchema = z.strictObject({
  decision: z.enum(['approve', 'deny', 'timeout']),
  callId: z.string().min(1).max(256).optional(),
  arguments: z.record(z.string(), z.unknown()).optional(),
  reason: z.string().max(1000).optional(),
});
export type ApprovalDecision = z.infer<typeof ApprovalDecisionSchema>;

/** The decision a message carries (a data part's `troupe/approval`, else its metadata's), if a valid one. */
export function readApprovalDecision(message: Pick<Message, 'parts' | 'metadata'>): ApprovalDecision | undefined {
  for (const part of message.parts) {
    if (part.kind !== 'data' || part.data[META.approval] === undefined) continue;
    const parsed = ApprovalDecisionSchema.safeParse(part.data[META.approval]);
    if (parsed.success) return parsed.data;
  }
  const parsed = ApprovalDecisionSchema.safeParse(message.metadata?.[META.approval]);
  return parsed.success ? parsed.data : undefined;
}

/** The approval request a message carries, if a valid one. */
export function readApprovalRequest(message: Pick<Message, 'metadata'>): ApprovalRequest | undefined {
  const raw = message.metadata?.[META.approval];
  if (raw === undefined) return undefined;
  const parsed = ApprovalRequestSchema.safeParse(raw);
  return parsed.success ? parsed.data : undefined;
}

/**
 * The request agent `agentId` is waiting on in a thread's history: its last message, when that message
 * asks for approval (any later answer of the agent settled it).
 */
export function pendingApproval(history: readonly Message[], agentId: string): { request: ApprovalRequest; messageId: string } | undefined {
  for (let i = history.length - 1; i >= 0; i--) {
    const m = history[i]!;
    if (m.role !== 'agent' || m.metadata?.[META.agent] !== agentId) continue;
    const request = readApprovalRequest(m);
    return request && request.agent === agentId ? { request, messageId: m.messageId } : undefined;
  }
  return undefined;
}

/**
 * Longest a thread waits for a decision, whatever deadline a request names (agent.yaml allows 7 days):
 * past it the thread refuses as at the deadline.
 */
export const MAX_APPROVAL_WAIT_MS = 7 * 24 * 3_600_000;

/** What a thread keeps of the approval it waits on: who asks, in which message, until when. */
export interface ApprovalWait {
  agent: string;
  /** The agent's message that asks. */
  messageId: string;
  /** Epoch ms. */
  expiresAt: number;
}

/**
 * The message a thread sends the waiting agent when `wait`'s deadline passes: a `timeout` decision
 * addressed to that agent (client routing), its id derived from the request's so a replayed deadline is
 * the same message.
 */
export function approvalTimeoutMessage(wait: ApprovalWait, ids: { contextId: string; taskId: string }): Message {
  return {
    kind: 'message',
    role: 'user',
    messageId: `${wait.messageId}:timeout`,
    contextId: ids.contextId,
    taskId: ids.taskId,
    parts: [
      { kind: 'text', text: `Nobody approved the waiting tool calls of ${wait.agent} by ${new Date(wait.expiresAt).toISOString()}: they are refused.` },
      { kind: 'data', data: { [META.approval]: { decision: 'timeout' } satisfies ApprovalDecision } },
    ],
    metadata: { [CLIENT_ROUTING_URI]: { recipient: wait.agent } },
  };
}
