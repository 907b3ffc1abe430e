/** Payloads specific to Troupe's subjects (agent replies, registry, control). */
import { z } from 'zod';
import { AgentCardSchema, MessageSchema, TaskSchema } from './a2a.js';
import { ErrorReplySchema } from './errors.js';

/** What an agent answers on its inbox: an A2A message, a task (to end it), or a typed error. */
export const AgentReplySchema = z.discriminatedUnion('kind', [MessageSchema, TaskSchema, ErrorReplySchema]);
export type AgentReply = z.infer<typeof AgentReplySchema>;

/** Published on `troupe.<tenant>.registry`. */
export const RegistryEventSchema = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('announce'),
    card: AgentCardSchema,
    /** One process (replica) of the agent. */
    instanceId: z.string(),
    /** The instance counts as gone when no announce arrives within this many ms. */
    ttlMs: z.number().int().positive().default(15_000),
  }),
  z.object({ kind: z.literal('goodbye'), agentId: z.string(), instanceId: z.string() }),
]);
export type RegistryEvent = z.infer<typeof RegistryEventSchema>;

/** Accepted reply to a message sent into a thread (`.in`). Errors come back as ErrorReply. */
export const ThreadAckSchema = z.object({
  kind: z.literal('ack'),
  threadId: z.string(),
  messageId: z.string(),
  duplicate: z.boolean().optional(),
});
export type ThreadAck = z.infer<typeof ThreadAckSchema>;

/** One live actor as listed by `troupe ps`. */
export const ActorInfoSchema = z.object({
  kind: z.enum(['node', 'thread', 'router', 'agent', 'handoff', 'orchestration', 'agent-call', 'registry']),
  id: z.string(),
  state: z.string(),
  node: z.string(),
  threadId: z.string().optional(),
  hops: z.number().optional(),
  parent: z.string().optional(),
  status: z.enum(['live', 'passivated']).default('live'),
  detail: z.record(z.string(), z.unknown()).optional(),
});
export type ActorInfo = z.infer<typeof ActorInfoSchema>;

export const PsReplySchema = z.object({ node: z.string(), actors: z.array(ActorInfoSchema), passivated: z.number().default(0) });
export type PsReply = z.infer<typeof PsReplySchema>;

export const InspectRequestSchema = z.object({ actorId: z.string() });
export const InspectReplySchema = z.object({
  found: z.boolean(),
  node: z.string(),
  actor: ActorInfoSchema.optional(),
  value: z.unknown().optional(),
  context: z.unknown().optional(),
  events: z.array(z.object({ at: z.string(), type: z.string(), summary: z.string().optional() })).default([]),
});
export type InspectReply = z.infer<typeof InspectReplySchema>;

export { TaskSchema };
