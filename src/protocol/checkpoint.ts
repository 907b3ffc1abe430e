/**
 * Checkpoints of a thread (time travel): after each committed turn a thread keeps its state as it was —
 * the record (task, history, routing state, the machine snapshot, handoff and delegation state) and what
 * the turn did (the message it took, each hop with sender, recipient and reason, the answer, the error,
 * when it started and ended). These are the shapes on the wire: what a node answers to `history`,
 * `checkpoint` and `fork` (ctl for operators, req for a thread's owner) and what the gateway serves.
 */
import { z } from 'zod';
import { TaskStateSchema } from './a2a.js';
import { ErrorBodySchema } from './errors.js';
import { idSchema } from './ids.js';

/** Most checkpoints a thread may keep (`checkpoints` in team.yaml; 0 turns them off). */
export const MAX_CHECKPOINTS_KEPT = 1000;
/** Checkpoints a thread keeps unless its team says otherwise. */
export const DEFAULT_CHECKPOINTS_KEPT = 50;
/** Characters of an answer a checkpoint listing shows. */
export const ANSWER_EXCERPT_CHARS = 120;

/** One routing step of a turn: who sent the message to whom, at which hop, and why. */
const RouteStepSchema = z.object({
  from: z.string(),
  to: z.string(),
  hop: z.number().int(),
  reason: z.string(),
  at: z.number(),
  confidence: z.number().optional(),
  outcome: z.enum(['clarify', 'failure']).optional(),
});

/** What one turn did, as its checkpoint keeps it. Messages are named by id: the record's history holds them. */
export const CheckpointTurnSchema = z.object({
  /** The user message the turn answered (in the record's history, unless history was pruned past it). */
  messageId: z.string().max(256).optional(),
  /** The turn's answer (its last agent message). */
  answerId: z.string().max(256).optional(),
  /** Each hop of the turn: sender, recipient, reason. */
  hops: z.array(RouteStepSchema).max(1000),
  /** The typed error the turn ended with, if any. */
  error: ErrorBodySchema.optional(),
  /** When the turn started (epoch ms), when the node running it saw it start. */
  startedAt: z.number().optional(),
  /** When its state was committed (epoch ms). */
  endedAt: z.number(),
});
export type CheckpointTurn = z.infer<typeof CheckpointTurnSchema>;

/** A checkpoint as `troupe history` lists it. */
const CheckpointSummarySchema = z.object({
  /** Its number in the thread: 1 for the first turn's, counting up (kept across nodes). */
  n: z.number().int().min(1),
  at: z.string(),
  /** Turns the thread had taken by then. */
  turns: z.number().int().min(0),
  state: z.string(),
  /** The agents the turn's message went through, in order. */
  route: z.array(z.string()),
  /** The first characters of the answer. */
  answer: z.string(),
  error: z.string().optional(),
  messages: z.number().int().min(0),
  durationMs: z.number().optional(),
});
export type CheckpointSummary = z.infer<typeof CheckpointSummarySchema>;

/** A message of a checkpoint's history as clients read it (an operator's view may be redacted). */
const HistoryMessageSchema = z.looseObject({
  role: z.string(),
  messageId: z.string().optional(),
  parts: z.array(z.looseObject({ kind: z.string(), text: z.string().optional() })),
  metadata: z.record(z.string(), z.unknown()).optional(),
});

/** One checkpoint whole: the thread as it was after the turn. */
const CheckpointViewSchema = z.object({
  n: z.number().int().min(1),
  threadId: z.string(),
  at: z.string(),
  /** The store revision of the record it copies. */
  revision: z.number().int(),
  state: z.string(),
  /** The thread machine's state value (which states were active). */
  value: z.unknown(),
  /** The machine's context without history and the catalog of agents: routing state, handoff, memory, turns. */
  context: z.record(z.string(), z.unknown()),
  history: z.array(HistoryMessageSchema),
  turn: CheckpointTurnSchema,
  /** Set on a forked thread's checkpoints: where it came from. */
  forkedFrom: z.object({ threadId: z.string(), checkpoint: z.number().int() }).optional(),
});
export type CheckpointView = z.infer<typeof CheckpointViewSchema>;

/** `history`: the checkpoints a thread keeps, oldest first. */
export const HistoryRequestSchema = z.object({ threadId: idSchema('thread') });
export const HistoryReplySchema = z.object({
  kind: z.literal('history'),
  threadId: z.string(),
  /** How many the thread keeps at most (the team's setting; 0: checkpoints are off). */
  keep: z.number().int().min(0),
  checkpoints: z.array(CheckpointSummarySchema),
});
export type HistoryReply = z.infer<typeof HistoryReplySchema>;

/** `checkpoint`: one checkpoint whole. */
export const CheckpointRequestSchema = z.object({ threadId: idSchema('thread'), n: z.number().int().min(1) });
export const CheckpointReplySchema = z.object({ kind: z.literal('checkpoint'), checkpoint: CheckpointViewSchema });

/**
 * `fork`: a new thread (a new A2A context) whose state is checkpoint `n` of `threadId`. `newThreadId`
 * names it (else the node picks one). A checkpoint where the task had ended forks into an open thread
 * that starts with its conversation.
 */
export const ForkRequestSchema = z.object({ threadId: idSchema('thread'), n: z.number().int().min(1), newThreadId: idSchema('thread').optional() });
export const ForkReplySchema = z.object({
  kind: z.literal('fork'),
  threadId: z.string(),
  contextId: z.string(),
  state: TaskStateSchema,
  forkedFrom: z.object({ threadId: z.string(), checkpoint: z.number().int() }),
});
export type ForkReply = z.infer<typeof ForkReplySchema>;

/** A message as a checkpoint diff shows it. */
const DiffMessageSchema = z.object({ messageId: z.string().optional(), role: z.string(), from: z.string(), text: z.string() });

/**
 * What changed from one checkpoint to another (`troupe history --diff a..b`).
 * @public a wire schema of the checkpoint verbs, read only as a type inside Troupe
 */
export const CheckpointDiffSchema = z.object({
  from: z.number().int(),
  to: z.number().int(),
  state: z.object({ from: z.string(), to: z.string() }).optional(),
  /** The machine's state value, when it changed. */
  value: z.object({ from: z.unknown(), to: z.unknown() }).optional(),
  /** Messages in `to`'s history that `from`'s did not have. */
  added: z.array(DiffMessageSchema),
  /** Messages of `from`'s history gone from `to`'s (pruned at the history limit). */
  removed: z.array(DiffMessageSchema),
  /** Context fields that differ (compared as JSON). */
  context: z.array(z.object({ field: z.string(), from: z.unknown(), to: z.unknown() })),
  /** What the turn that made `to` did. */
  turn: CheckpointTurnSchema,
});
export type CheckpointDiff = z.infer<typeof CheckpointDiffSchema>;
