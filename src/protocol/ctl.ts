/**
 * Control requests and replies: operator verbs on `troupe.<t>.ctl.<verb>` (ps, inspect, threads, thread,
 * rehydrate, cancel, dlq, history, checkpoint, fork) and a client's owner-checked requests on
 * `troupe.<t>.req.<P>.<verb>` (task, cancel, list, history, checkpoint, fork). The node, the CLI, the client SDK and the gateway all read these schemas.
 *
 * `CTL` lists the operator verbs one node answers (request in, reply out) with their schemas: the node
 * decodes requests with them, `TroupeClient.ctl(verb, body)` validates the reply and returns its type.
 * `ps`, `inspect` and `inspection` are answered by every node at once (the client gathers them).
 */
import { z } from 'zod';
import { TaskSchema, TaskStateSchema } from './a2a.js';
import { idSchema } from './ids.js';
import { CheckpointReplySchema, CheckpointRequestSchema, ForkReplySchema, ForkRequestSchema, HistoryReplySchema, HistoryRequestSchema } from './checkpoint.js';

/** One live actor as listed by `troupe ps`. */
const ActorInfoSchema = z.object({
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

/**
 * A node's registry actor lists, in `detail.instances`, every live agent instance as `[agentId,
 * instanceId]`: what the agents announced on their own `registry.<A>` subjects, which the broker lets only
 * A publish. An agent actor from a `hello` reply (which anyone subscribed to `hello` can send) counts only
 * when its id and `detail.instance` are there.
 */
export const RegistryInstancesSchema = z.array(z.tuple([z.string(), z.string()])).max(100_000);

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

/** One stored thread as `ctl.threads` lists it (a corrupt record: state `unknown` and why in `corrupt`). */
const ThreadRowSchema = z.object({
  threadId: z.string(),
  state: z.string(),
  updatedAt: z.string(),
  revision: z.number().int(),
  corrupt: z.string().optional(),
  owner: z.string().optional(),
  contextId: z.string().optional(),
  /** Seed 004's ThreadContext: when the thread began, who holds it, its open handoff, its messages. */
  createdAt: z.string().optional(),
  currentActiveAgent: z.string().optional(),
  isHandoffActive: z.boolean().optional(),
  handoffTargetAgent: z.string().optional(),
  totalMessages: z.number().int().optional(),
});
export type ThreadRow = z.infer<typeof ThreadRowSchema>;
/** `truncated`: the node stopped at the request's limit; there may be more. */
export const ThreadsReplySchema = z.object({ kind: z.literal('threads'), threads: z.array(ThreadRowSchema), truncated: z.boolean() });

/** A message of a stored thread as operators see it (redacted: text may be masked). */
const RecordMessageViewSchema = z.looseObject({
  role: z.string(),
  parts: z.array(z.looseObject({ kind: z.string(), text: z.string().optional() })),
  metadata: z.record(z.string(), z.unknown()).optional(),
});
/** `ctl.thread`: the stored record without its machine snapshot and outbox, redacted for operators. */
const ThreadReplySchema = z.object({
  kind: z.literal('thread'),
  revision: z.number().int(),
  /**
   * When the record expires unless written again (seed 003's TaskPersistenceRecord `expiresAtUtc`): its last
   * write plus the store's max age. Absent when records do not expire.
   */
  expiresAtUtc: z.string().optional(),
  record: z.looseObject({
    task: z.looseObject({
      status: z.looseObject({ state: z.string() }),
      history: z.array(RecordMessageViewSchema).optional(),
      metadata: z.record(z.string(), z.unknown()).optional(),
    }),
    updatedAt: z.string(),
    owner: z.string().optional(),
  }),
});

export const DlqRequestSchema = z.object({ limit: z.number().int().min(1).max(1000).optional() });
/** A message that exhausted its deliveries, as the dead-letter stream keeps it. */
const DeadLetterEntrySchema = z.object({
  seq: z.number().int(),
  at: z.string(),
  subject: z.string(),
  code: z.string(),
  error: z.string(),
  attempts: z.number().int(),
  /** The first bytes of the message as text. */
  preview: z.string(),
});
export type DeadLetterEntry = z.infer<typeof DeadLetterEntrySchema>;
const DlqReplySchema = z.object({ kind: z.literal('dlq'), entries: z.array(DeadLetterEntrySchema) });

/** `ctl.memory`: one process's memory; `gc: true` collects first in a process started with --expose-gc. */
export const MemoryRequestSchema = z.object({ gc: z.boolean().optional() });
const MemoryReplySchema = z.object({
  kind: z.literal('memory'),
  node: z.string(),
  collected: z.boolean(),
  rssBytes: z.number(),
  heapUsedBytes: z.number(),
  heapTotalBytes: z.number(),
  externalBytes: z.number(),
  liveThreads: z.number().int(),
  dormantThreads: z.number().int(),
});

/** The verbs one node answers on `troupe.<t>.ctl.<verb>`: what each takes and what it answers (or an ErrorReply). */
export const CTL = {
  threads: { request: ThreadsRequestSchema, reply: ThreadsReplySchema },
  thread: { request: ThreadCtlSchema, reply: ThreadReplySchema },
  cancel: { request: ThreadCtlSchema, reply: OkReplySchema },
  rehydrate: { request: ThreadCtlSchema, reply: OkReplySchema },
  delete: { request: ThreadCtlSchema, reply: DeleteReplySchema },
  dlq: { request: DlqRequestSchema, reply: DlqReplySchema },
  memory: { request: MemoryRequestSchema, reply: MemoryReplySchema },
  history: { request: HistoryRequestSchema, reply: HistoryReplySchema },
  checkpoint: { request: CheckpointRequestSchema, reply: CheckpointReplySchema },
  fork: { request: ForkRequestSchema, reply: ForkReplySchema },
} as const;

/**
 * A client's owner-checked requests on `troupe.<t>.req.<P>.<verb>` about one of its threads' checkpoints
 * (the Troupe-User header names the user): the same bodies as the operator verbs, only for the owner.
 * @public a wire table of the client verbs, read only as a type inside Troupe
 */
export const CLIENT_CHECKPOINT_VERBS = {
  history: CTL.history,
  checkpoint: CTL.checkpoint,
  fork: CTL.fork,
} as const;
export type ClientCheckpointVerb = keyof typeof CLIENT_CHECKPOINT_VERBS;
export type CtlVerb = keyof typeof CTL;
export type CtlRequest<V extends CtlVerb> = z.input<(typeof CTL)[V]['request']>;
export type CtlReply<V extends CtlVerb> = z.infer<(typeof CTL)[V]['reply']>;
