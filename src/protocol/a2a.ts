/**
 * A2A protocol v0.3 wire schemas. These zod schemas are the source of truth for what crosses the mesh;
 * `@a2a-js/sdk` types are mapped at the gateway.
 */
import { z } from 'zod';
import { ID_LIMITS, idSchema } from './ids.js';
import { LIMITS } from './limits.js';

const TASK_STATES = ['submitted', 'working', 'input-required', 'completed', 'canceled', 'failed', 'rejected', 'auth-required', 'unknown'] as const;
export const TaskStateSchema = z.enum(TASK_STATES);
export type TaskState = z.infer<typeof TaskStateSchema>;

/** States after which a task accepts no further messages. */
export const TERMINAL_TASK_STATES: readonly TaskState[] = ['completed', 'canceled', 'failed', 'rejected'];

const Metadata = z.record(z.string(), z.unknown());

const TextPartSchema = z.object({
  kind: z.literal('text'),
  text: z.string(),
  metadata: Metadata.optional(),
});

const FileWithBytesSchema = z.object({
  bytes: z.string(),
  name: z.string().optional(),
  mimeType: z.string().optional(),
});
const FileWithUriSchema = z.object({
  uri: z.string(),
  name: z.string().optional(),
  mimeType: z.string().optional(),
});
const FilePartSchema = z.object({
  kind: z.literal('file'),
  file: z.union([FileWithBytesSchema, FileWithUriSchema]),
  metadata: Metadata.optional(),
});

const DataPartSchema = z.object({
  kind: z.literal('data'),
  data: z.record(z.string(), z.unknown()),
  metadata: Metadata.optional(),
});

const PartSchema = z.discriminatedUnion('kind', [TextPartSchema, FilePartSchema, DataPartSchema]);
export type Part = z.infer<typeof PartSchema>;

const RoleSchema = z.enum(['user', 'agent']);

export const MessageSchema = z.object({
  kind: z.literal('message'),
  role: RoleSchema,
  parts: z.array(PartSchema).min(1, 'a message needs at least one part').max(LIMITS.parts, `a message may have at most ${LIMITS.parts} parts`),
  messageId: idSchema('message'),
  contextId: z.string().max(256).optional(),
  taskId: z.string().max(256).optional(),
  referenceTaskIds: z.array(z.string()).optional(),
  extensions: z.array(z.string()).optional(),
  metadata: Metadata.optional(),
});
export type Message = z.infer<typeof MessageSchema>;

/** The text of a message: its text parts, one per line ('' when it has none, or there is no message). */
export function messageText(message: Message | undefined): string {
  return (message?.parts ?? []).flatMap((p) => (p.kind === 'text' ? [p.text] : [])).join('\n');
}

const TaskStatusSchema = z.object({
  state: TaskStateSchema,
  message: MessageSchema.optional(),
  timestamp: z.string().optional(),
});
export type TaskStatus = z.infer<typeof TaskStatusSchema>;

const ArtifactSchema = z.object({
  artifactId: z.string(),
  name: z.string().optional(),
  description: z.string().optional(),
  parts: z.array(PartSchema),
  extensions: z.array(z.string()).optional(),
  metadata: Metadata.optional(),
});
export type Artifact = z.infer<typeof ArtifactSchema>;

export const TaskSchema = z.object({
  kind: z.literal('task'),
  id: z.string(),
  contextId: z.string(),
  status: TaskStatusSchema,
  history: z.array(MessageSchema).optional(),
  artifacts: z.array(ArtifactSchema).optional(),
  metadata: Metadata.optional(),
});
export type Task = z.infer<typeof TaskSchema>;

const TaskStatusUpdateEventSchema = z.object({
  kind: z.literal('status-update'),
  taskId: z.string(),
  contextId: z.string(),
  status: TaskStatusSchema,
  final: z.boolean(),
  metadata: Metadata.optional(),
});
export type TaskStatusUpdateEvent = z.infer<typeof TaskStatusUpdateEventSchema>;

export const TaskArtifactUpdateEventSchema = z.object({
  kind: z.literal('artifact-update'),
  taskId: z.string(),
  contextId: z.string(),
  artifact: ArtifactSchema,
  append: z.boolean().optional(),
  lastChunk: z.boolean().optional(),
  metadata: Metadata.optional(),
});
export type TaskArtifactUpdateEvent = z.infer<typeof TaskArtifactUpdateEventSchema>;

/** What a thread publishes on its `.out` subject. */
export const ThreadEventSchema = z.discriminatedUnion('kind', [TaskStatusUpdateEventSchema, TaskArtifactUpdateEventSchema]);
export type ThreadEvent = z.infer<typeof ThreadEventSchema>;

const AgentExtensionSchema = z.object({
  uri: z.string(),
  description: z.string().optional(),
  required: z.boolean().optional(),
  params: z.record(z.string(), z.unknown()).optional(),
});
export type AgentExtension = z.infer<typeof AgentExtensionSchema>;

const AgentCapabilitiesObjectSchema = z.object({
  streaming: z.boolean().optional(),
  pushNotifications: z.boolean().optional(),
  stateTransitionHistory: z.boolean().optional(),
  extensions: z.array(AgentExtensionSchema).optional(),
  /** Troupe addition: which handoffs the agent takes part in (absent: both allowed). */
  handoff: z.object({ canInitiate: z.boolean().optional(), canAccept: z.boolean().optional() }).optional(),
  /** Troupe addition: whether the agent may delegate to other agents, and to how many at once (absent: allowed, the team's limit). */
  orchestration: z.object({ canDelegate: z.boolean().optional(), maxParallel: z.int().min(1).max(100).optional() }).optional(),
  /**
   * Troupe addition: what the agent can do as the `ranch` runtime lists it (`["search", "summarize"]`,
   * seed 001's SimplifiedAgentCard.capabilities); emitted to peers in the client-routing request.
   */
  names: z.array(z.string().max(200)).max(100).optional(),
});

/**
 * An agent's capabilities: A2A's object, or ranch's list of strings (seed 001), read as that object — the
 * names kept in `names`, a URI among them (ranch lists the client-routing URI there) as an extension.
 */
export const AgentCapabilitiesSchema = z.union([AgentCapabilitiesObjectSchema, z.array(z.string().max(2048)).max(100).transform(capabilitiesOfList)]);
export type AgentCapabilities = z.infer<typeof AgentCapabilitiesObjectSchema>;

function capabilitiesOfList(list: string[]): AgentCapabilities {
  const uris = list.filter((name) => /^[a-z][a-z0-9+.-]*:\/\//i.test(name));
  const names = list.filter((name) => !uris.includes(name));
  return { ...(names.length ? { names } : {}), ...(uris.length ? { extensions: uris.map((uri) => ({ uri, required: false })) } : {}) };
}

const AgentSkillSchema = z.object({
  id: z.string(),
  name: z.string(),
  description: z.string(),
  tags: z.array(z.string()),
  examples: z.array(z.string()).optional(),
  inputModes: z.array(z.string()).optional(),
  outputModes: z.array(z.string()).optional(),
});
export type AgentSkill = z.infer<typeof AgentSkillSchema>;

/** Agent ids become NATS subject tokens, so they are restricted to a safe alphabet (the one rule in ids.ts). */
export const AgentIdSchema = z
  .string()
  .regex(new RegExp(`^[A-Za-z0-9_-]{1,${ID_LIMITS.agent}}$`), `agent ids are 1-${ID_LIMITS.agent} characters of A-Z, a-z, 0-9, _ and -`);

export const AgentCardSchema = z.object({
  /** Troupe addition: the mesh id of the agent (its inbox subject token). */
  id: AgentIdSchema,
  name: z.string().min(1),
  description: z.string(),
  url: z.string().optional(),
  version: z.string().default('0.0.0'),
  protocolVersion: z.string().default('0.3.0'),
  capabilities: AgentCapabilitiesSchema.default({}),
  defaultInputModes: z.array(z.string()).default(['text/plain']),
  defaultOutputModes: z.array(z.string()).default(['text/plain']),
  skills: z.array(AgentSkillSchema).default([]),
});
export type AgentCard = z.infer<typeof AgentCardSchema>;
export type AgentCardInput = z.input<typeof AgentCardSchema>;
