/**
 * Control requests and replies: operator verbs on `troupe.<t>.ctl.<verb>` (ps, inspect, threads, thread,
 * rehydrate, cancel, dlq) and a client's owner-checked requests on `troupe.<t>.req.<P>.<verb>` (task,
 * cancel, list). The node, the CLI, the client SDK and the gateway all read these schemas.
 */
import { z } from 'zod';
import { TaskSchema, TaskStateSchema } from './a2a.js';
import { idSchema } from './ids.js';

/** One live actor as listed by `troupe ps`. */
export const ActorInfoSchema = z.object({
  kind: z.enum(['node', 'thread', 'router', 'agent', 'handoff', 'orchestration', 'agent-call', 'registry', 'llm-agent']),
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

export const InspectRequestSchema = z.object({ actorId: z.string().min(1).max(300) });
export const InspectReplySchema = z.object({
  found: z.boolean(),
  node: z.string(),
  actor: ActorInfoSchema.optional(),
  value: z.unknown().optional(),
  context: z.unknown().optional(),
  events: z.array(z.object({ at: z.string(), type: z.string(), summary: z.string().optional() })).default([]),
});
export type InspectReply = z.infer<typeof InspectReplySchema>;

/** Operator requests about one thread (cancel, rehydrate, thread). */
export const ThreadCtlSchema = z.object({
  threadId: idSchema('thread'),
  reason: z.string().max(500).optional(),
});

export const ThreadsRequestSchema = z.object({
  state: z.string().max(32).optional(),
  limit: z.number().int().min(1).max(10_000).optional(),
  /** Only the threads of this owner: `<principal>` or `<principal>/<user>` (`troupe delete --owner`). */
  owner: z.string().min(1).max(300).optional(),
});

/** A client's owner-checked request about one of its threads. The user comes from the Troupe-User header. */
export const ClientThreadRequestSchema = z.object({
  threadId: idSchema('thread'),
  reason: z.string().max(500).optional(),
  /** `task`: trim the history to the last N messages. */
  historyLength: z.number().int().min(0).max(1000).optional(),
});

/**
 * `req.<P>.list`: the principal's own threads (or its user's, with the Troupe-User header), newest update
 * first, a page at a time. `pageToken` is the `nextPageToken` of the page before.
 */
export const ClientListRequestSchema = z.object({
  contextId: idSchema('thread').optional(),
  state: TaskStateSchema.optional(),
  pageSize: z.number().int().min(1).max(100).default(50),
  pageToken: z.string().max(200).optional(),
  historyLength: z.number().int().min(0).max(1000).optional(),
  /** Only threads whose last update is at or after this ISO 8601 time. */
  updatedAfter: z.iso.datetime({ offset: true }).optional(),
});
export type ClientListRequest = z.input<typeof ClientListRequestSchema>;
export const TaskListReplySchema = z.object({
  kind: z.literal('tasks'),
  tasks: z.array(TaskSchema),
  nextPageToken: z.string(),
  totalSize: z.number().int(),
  pageSize: z.number().int(),
});
export type TaskListReply = z.infer<typeof TaskListReplySchema>;

/** Between nodes (`nodes.answered.<node>`): did the node asked publish the answer to this message? */
export const AnsweredAskSchema = z.object({ threadId: idSchema('thread'), messageId: idSchema('message') });
export const AnsweredReplySchema = z.object({ published: z.boolean() });

export const OkReplySchema = z.object({ kind: z.literal('ok'), threadId: z.string(), state: z.string(), node: z.string() });
/** The owner's answer to `ctl.delete`: the thread erased, and how many of its dead letters went with it. */
export const DeleteReplySchema = OkReplySchema.extend({ deadLetters: z.number().int().min(0).default(0) });
export const TaskReplySchema = z.object({ kind: z.literal('task'), task: TaskSchema, revision: z.number() });

/** Accepted reply to a message sent into a thread without durable ingress. Errors come back as ErrorReply. */
export const ThreadAckSchema = z.object({
  kind: z.literal('ack'),
  threadId: z.string(),
  messageId: z.string(),
  duplicate: z.boolean().optional(),
});
export type ThreadAck = z.infer<typeof ThreadAckSchema>;
