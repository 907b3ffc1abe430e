/**
 * Handoff wire schemas. A handoff passes a conversation from a source agent to a target agent, which
 * talks to the user directly until it returns control (with a result summary) to the source.
 *
 * Everything rides in the client-routing extension's metadata slot (`metadata[CLIENT_ROUTING_URI]`),
 * next to `recipient` / `reason`, so agents that already speak the extension need nothing new:
 *
 * | who -> whom                         | field in `metadata[URI]` | schema                   |
 * |-------------------------------------|--------------------------|--------------------------|
 * | source agent's reply (starts it)    | `handoff`                | HandoffDirectiveSchema   |
 * | thread -> target (the request)      | `handoffRequest`         | HandoffRequestSchema     |
 * | target's first reply (accept/reject)| `handoffAccept`          | HandoffAcceptSchema      |
 * | target's reply that ends it         | `handoffReturn`          | HandoffReturnSchema      |
 *
 * A missing `handoffAccept` in the target's first reply means "accepted". A `handoffReturn` may come
 * in that same first reply (the target finished in one turn).
 */
import { z } from 'zod';
import { AgentIdSchema, type Message } from './a2a.js';
import { TroupeError, describeZodError } from './errors.js';
import { CLIENT_ROUTING_URI } from './routing.js';

export const HandoffRequestSchema = z
  .object({
    threadId: z.string().min(1),
    tenantId: z.string().min(1),
    userId: z.string().min(1),
    sourceAgentId: AgentIdSchema,
    targetAgentId: AgentIdSchema,
    /** What the target needs to know; the thread also forwards the last `recentMessageCount` messages. */
    contextSummary: z.string().min(1).max(2000),
    handoffReason: z.string().min(1).max(500),
    recentMessageCount: z.number().int().min(1).max(20).default(5),
    /** Keep the source agent's state (its place in the conversation) for when control comes back. */
    preserveState: z.boolean().default(true),
    /** Control comes back to the source when the target returns. When false the source is not re-invoked. */
    returnExpected: z.boolean().default(true),
    metadata: z.record(z.string(), z.unknown()).optional(),
  })
  .refine((r) => r.sourceAgentId !== r.targetAgentId, {
    message: 'an agent cannot hand off to itself',
    path: ['targetAgentId'],
  });
export type HandoffRequest = z.infer<typeof HandoffRequestSchema>;

export const HandoffAcceptSchema = z.object({
  accepted: z.boolean(),
  rejectionReason: z.string().optional(),
  estimatedDurationSeconds: z.number().nonnegative().optional(),
});
export type HandoffAccept = z.infer<typeof HandoffAcceptSchema>;

const HANDOFF_COMPLETION_STATUSES = ['completed', 'cancelled', 'error'] as const;
export const HandoffReturnSchema = z.object({
  completionStatus: z.enum(HANDOFF_COMPLETION_STATUSES),
  resultSummary: z.string().optional(),
  artifactsCreated: z.array(z.string()).default([]),
});
export type HandoffReturn = z.infer<typeof HandoffReturnSchema>;
export type HandoffReturnInput = z.input<typeof HandoffReturnSchema>;

/** What an agent puts in its reply's `metadata[URI].handoff` to start a handoff. */
export const HandoffDirectiveSchema = z.object({
  targetAgentId: AgentIdSchema,
  contextSummary: z.string().min(1).max(2000),
  handoffReason: z.string().min(1).max(500),
  recentMessageCount: z.number().int().min(1).max(20).optional(),
  returnExpected: z.boolean().optional(),
});
export type HandoffDirective = z.infer<typeof HandoffDirectiveSchema>;

/** Field names inside `metadata[CLIENT_ROUTING_URI]`. */
const HANDOFF_FIELDS = {
  directive: 'handoff',
  request: 'handoffRequest',
  accept: 'handoffAccept',
  return: 'handoffReturn',
} as const;

type HandoffField = (typeof HANDOFF_FIELDS)[keyof typeof HANDOFF_FIELDS];

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Reads one handoff field from `message.metadata[URI]`. Undefined when the slot or the field is absent;
 * EXTENSION_PARSE_ERROR when the slot is not an object or the field does not match its schema.
 */
function readField<S extends z.ZodType>(message: Message, field: HandoffField, schema: S): z.infer<S> | undefined {
  const slot = message.metadata?.[CLIENT_ROUTING_URI];
  if (slot === undefined) return undefined;
  if (!isRecord(slot)) {
    throw new TroupeError('EXTENSION_PARSE_ERROR', `message ${message.messageId} carries client-routing metadata that is not an object`);
  }
  const raw = slot[field];
  if (raw === undefined) return undefined;
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    throw new TroupeError(
      'EXTENSION_PARSE_ERROR',
      `message ${message.messageId} carries an invalid client-routing "${field}": ${describeZodError(parsed.error)}`,
      { field },
    );
  }
  return parsed.data;
}

/** Returns a copy of the message with `value` at `metadata[URI][field]`, keeping what else is there. */
function withField(message: Message, field: HandoffField, value: unknown): Message {
  const slot = message.metadata?.[CLIENT_ROUTING_URI];
  return {
    ...message,
    extensions: Array.from(new Set([...(message.extensions ?? []), CLIENT_ROUTING_URI])),
    metadata: { ...message.metadata, [CLIENT_ROUTING_URI]: { ...(isRecord(slot) ? slot : {}), [field]: value } },
  };
}

/** The handoff an agent asks for in its reply; undefined if none; throws EXTENSION_PARSE_ERROR if malformed. */
export function readHandoffDirective(message: Message): HandoffDirective | undefined {
  return readField(message, HANDOFF_FIELDS.directive, HandoffDirectiveSchema);
}

/** The target's return (ends the handoff); undefined if none; throws EXTENSION_PARSE_ERROR if malformed. */
export function readHandoffReturn(message: Message): HandoffReturn | undefined {
  return readField(message, HANDOFF_FIELDS.return, HandoffReturnSchema);
}

/** The target's accept/reject answer; undefined if absent (which, in its first reply, means accepted). */
export function readHandoffAccept(message: Message): HandoffAccept | undefined {
  return readField(message, HANDOFF_FIELDS.accept, HandoffAcceptSchema);
}

/** The handoff request the thread attached to the message it sent the target. */
export function readHandoffRequest(message: Message): HandoffRequest | undefined {
  return readField(message, HANDOFF_FIELDS.request, HandoffRequestSchema);
}

export function withHandoffDirective(message: Message, directive: HandoffDirective): Message {
  return withField(message, HANDOFF_FIELDS.directive, directive);
}

export function withHandoffRequest(message: Message, request: HandoffRequest): Message {
  return withField(message, HANDOFF_FIELDS.request, request);
}

export function withHandoffAccept(message: Message, accept: HandoffAccept): Message {
  return withField(message, HANDOFF_FIELDS.accept, accept);
}

export function withHandoffReturn(message: Message, ret: HandoffReturnInput): Message {
  return withField(message, HANDOFF_FIELDS.return, ret);
}

/**
 * Builds the full request from an agent's directive plus what the thread knows. Throws INVALID_MESSAGE
 * (e.g. an agent handing off to itself) when the result does not validate.
 */
export function handoffRequestFromDirective(
  directive: HandoffDirective,
  thread: { threadId: string; tenantId: string; userId: string; sourceAgentId: string; metadata?: Record<string, unknown> },
): HandoffRequest {
  const parsed = HandoffRequestSchema.safeParse({ ...thread, ...directive });
  if (!parsed.success) {
    throw new TroupeError('INVALID_MESSAGE', `the handoff request is invalid: ${describeZodError(parsed.error)}`);
  }
  return parsed.data;
}
