/** Payloads specific to Troupe's subjects (agent replies, registry, control). */
import { z } from 'zod';
import { AgentCardSchema, MessageSchema, TaskSchema } from './a2a.js';
import { ErrorReplySchema } from './errors.js';
import { idSchema } from './ids.js';

/**
 * What an agent answers on its inbox: an A2A message, a task (to end it), or a typed error. Whatever an
 * agent says has role `agent`: a message with role `user` would speak for the user, and is refused.
 */
export const AgentReplySchema = z.discriminatedUnion('kind', [MessageSchema, TaskSchema, ErrorReplySchema]).superRefine((reply, ctx) => {
  const message = reply.kind === 'message' ? reply : reply.kind === 'task' ? reply.status.message : undefined;
  if (message && message.role !== 'agent') {
    ctx.addIssue({
      code: 'custom',
      path: reply.kind === 'task' ? ['status', 'message', 'role'] : ['role'],
      message: `an agent answers with role "agent", not "${message.role}"`,
    });
  }
});
export type AgentReply = z.infer<typeof AgentReplySchema>;

/** What an agent instance reports about itself with each announce (shown by `troupe ps`). */
const AgentStatusSchema = z.object({
  state: z.string().max(64),
  inFlight: z.number().int().nonnegative().optional(),
  handled: z.number().int().nonnegative().optional(),
  failed: z.number().int().nonnegative().optional(),
  /** Free-form, small: e.g. where an LLM agent's loop is. */
  detail: z.record(z.string(), z.unknown()).optional(),
});
export type AgentStatus = z.infer<typeof AgentStatusSchema>;

/**
 * Published by agent A on `troupe.<tenant>.registry.<A>`. The broker lets only A publish there, so the
 * registry takes the agent id from the subject and refuses a card whose id differs.
 */
export const RegistryEventSchema = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('announce'),
    card: AgentCardSchema,
    /** One process (replica) of the agent. */
    instanceId: idSchema('principal'),
    /** The instance counts as gone when no announce arrives within this many ms (1 s .. 60 s). */
    ttlMs: z.number().int().min(1_000).max(60_000).default(15_000),
    status: AgentStatusSchema.optional(),
  }),
  z.object({ kind: z.literal('goodbye'), instanceId: idSchema('principal'), agentId: z.string().optional() }),
]);
export type RegistryEvent = z.infer<typeof RegistryEventSchema>;

export { TaskSchema };
