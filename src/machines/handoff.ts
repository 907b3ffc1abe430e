/**
 * One handoff: the source agent passes the conversation to a target agent, which talks to the user
 * directly until it returns control with a result summary.
 *
 *   pending --accepted--> active --returned--> returning --(emit resume)--> completed
 *      |                    |  \--userMessage (emit forward)--/
 *      |--rejected--> rejected (control never left the source)
 *      |--cancel----> cancelled    (pending or active)
 *      |--failed----> error        (pending or active: target crashed / error reply)
 *      '--deadline--> error        (AGENT_TIMEOUT; pending or active)
 *
 * Pure: no clock and no timers of its own. The current time comes in on events (`now`), the deadline is
 * an absolute epoch-ms value in context, and the `after` timer's length is the named delay
 * `handoffDeadline = max(0, deadline - now)`. XState does not persist pending delays, so after restoring
 * a snapshot the host sends `troupe.handoff.tick { now }`: pending/active re-enter and re-arm the
 * remaining time (or fire at once when the deadline has passed).
 *
 * One active handoff per thread is the thread's rule: it checks `canStartHandoff()` and answers a second
 * request with HANDOFF_CONFLICT.
 */
import { assign, emit, setup, type Snapshot, type SnapshotFrom, type StateValue } from 'xstate';
import type { Message } from '../protocol/a2a.js';
import { ErrorCodeSchema, TroupeError, type ErrorBody, type ErrorCode } from '../protocol/errors.js';
import {
  readHandoffAccept,
  readHandoffReturn,
  type HandoffRequest,
  type HandoffReturn,
} from '../protocol/handoff.js';

export interface HandoffInput {
  /** A parsed request (`HandoffRequestSchema.parse(...)` or `handoffRequestFromDirective(...)`). */
  request: HandoffRequest;
  /** Epoch ms when the handoff starts. */
  now: number;
  /** Budget for the whole handoff (acceptance included); the deadline is `now + maxDurationMs`. */
  maxDurationMs: number;
}

export type HandoffFinalStatus = 'completed' | 'rejected' | 'cancelled' | 'error';

export interface HandoffError {
  code: ErrorCode;
  message: string;
}

export interface HandoffContext {
  request: HandoffRequest;
  startedAt: number;
  /** Last known time (from input, then from events that carry `now`). */
  now: number;
  /** Absolute epoch ms after which the handoff fails with AGENT_TIMEOUT. */
  deadline: number;
  maxDurationMs: number;
  acceptedAt?: number;
  estimatedDurationSeconds?: number;
  /** User messages forwarded to the target. */
  turns: number;
  lastMessageId?: string;
  result?: HandoffReturn;
  rejectionReason?: string;
  cancelReason?: string;
  error?: HandoffError;
  /** Set when a final state is reached. */
  status?: HandoffFinalStatus;
}

export interface HandoffOutput {
  status: HandoffFinalStatus;
  /** What the target reported when it returned (only for `completed`). */
  completionStatus?: HandoffReturn['completionStatus'];
  resultSummary?: string;
  artifactsCreated: string[];
  error?: HandoffError;
  rejectionReason?: string;
  turns: number;
}

/** Events the host sends. `now` (epoch ms) keeps the machine's clock current; it is required where a timer is (re)armed. */
export type HandoffEvent =
  | { type: 'troupe.handoff.accepted'; now: number; estimatedDurationSeconds?: number }
  | { type: 'troupe.handoff.rejected'; rejectionReason?: string; now?: number }
  | { type: 'troupe.handoff.userMessage'; message: Message; now?: number }
  | { type: 'troupe.handoff.returned'; result: HandoffReturn; now?: number }
  | { type: 'troupe.handoff.cancel'; reason?: string; now?: number }
  | { type: 'troupe.handoff.failed'; error: HandoffError; now?: number }
  | { type: 'troupe.handoff.tick'; now: number };

/** Send this user message to the target agent (with the last `recentMessageCount` messages and the summary). */
export interface HandoffForwardEmitted {
  type: 'troupe.handoff.forward';
  threadId: string;
  targetAgentId: string;
  message: Message;
  recentMessageCount: number;
  contextSummary: string;
  handoffReason: string;
  /** 1-based count of forwarded user messages, this one included. */
  turn: number;
}

/** The target returned: give control back to the source agent with this result. */
export interface HandoffResumeEmitted {
  type: 'troupe.handoff.resume';
  threadId: string;
  sourceAgentId: string;
  targetAgentId: string;
  /** When false the source is not re-invoked; the thread just routes the next message to it again. */
  returnExpected: boolean;
  completionStatus: HandoffReturn['completionStatus'];
  resultSummary?: string;
  artifactsCreated: string[];
}

export type HandoffEmitted = HandoffForwardEmitted | HandoffResumeEmitted;

function nowOf(context: HandoffContext, event: { now?: number }): number {
  return typeof event.now === 'number' && Number.isFinite(event.now) ? Math.max(context.now, event.now) : context.now;
}

/** The resume event for a context that holds a result (also usable by a host that restored `returning`). */
export function handoffResumeOf(context: HandoffContext): HandoffResumeEmitted {
  const result = context.result ?? { completionStatus: 'completed' as const, artifactsCreated: [] };
  return {
    type: 'troupe.handoff.resume',
    threadId: context.request.threadId,
    sourceAgentId: context.request.sourceAgentId,
    targetAgentId: context.request.targetAgentId,
    returnExpected: context.request.returnExpected,
    completionStatus: result.completionStatus,
    ...(result.resultSummary !== undefined ? { resultSummary: result.resultSummary } : {}),
    artifactsCreated: result.artifactsCreated,
  };
}

export function handoffOutputOf(context: HandoffContext): HandoffOutput {
  return {
    status: context.status ?? 'error',
    ...(context.result ? { completionStatus: context.result.completionStatus } : {}),
    ...(context.result?.resultSummary !== undefined ? { resultSummary: context.result.resultSummary } : {}),
    artifactsCreated: context.result?.artifactsCreated ?? [],
    ...(context.error ? { error: context.error } : {}),
    ...(context.rejectionReason !== undefined ? { rejectionReason: context.rejectionReason } : {}),
    turns: context.turns,
  };
}

export const handoffSetup = setup({
  types: {
    input: {} as HandoffInput,
    context: {} as HandoffContext,
    events: {} as HandoffEvent,
    emitted: {} as HandoffEmitted,
    output: {} as HandoffOutput,
  },
  delays: {
    /** Remaining time to the absolute deadline, from the machine's last known `now`. */
    handoffDeadline: ({ context }) => Math.max(0, context.deadline - context.now),
  },
  guards: {
    /** Redelivered messages (same messageId as the last one) are not forwarded twice. */
    isNewUserMessage: ({ context, event }) =>
      event.type === 'troupe.handoff.userMessage' && event.message.messageId !== context.lastMessageId,
  },
  actions: {
    recordNow: assign({ now: ({ context, event }) => nowOf(context, event) }),
    recordAcceptance: assign(({ context, event }) => {
      if (event.type !== 'troupe.handoff.accepted') return {};
      const now = nowOf(context, event);
      return {
        now,
        acceptedAt: now,
        ...(event.estimatedDurationSeconds !== undefined ? { estimatedDurationSeconds: event.estimatedDurationSeconds } : {}),
      };
    }),
    recordRejection: assign(({ context, event }) => {
      if (event.type !== 'troupe.handoff.rejected') return {};
      return {
        now: nowOf(context, event),
        status: 'rejected' as const,
        rejectionReason: event.rejectionReason ?? `agent "${context.request.targetAgentId}" declined the handoff`,
      };
    }),
    recordUserMessage: assign(({ context, event }) => {
      if (event.type !== 'troupe.handoff.userMessage') return {};
      return { now: nowOf(context, event), turns: context.turns + 1, lastMessageId: event.message.messageId };
    }),
    forwardToTarget: emit(({ context, event }): HandoffForwardEmitted => {
      if (event.type !== 'troupe.handoff.userMessage') throw new Error('forwardToTarget runs on troupe.handoff.userMessage');
      return {
        type: 'troupe.handoff.forward',
        threadId: context.request.threadId,
        targetAgentId: context.request.targetAgentId,
        message: event.message,
        recentMessageCount: context.request.recentMessageCount,
        contextSummary: context.request.contextSummary,
        handoffReason: context.request.handoffReason,
        turn: context.turns,
      };
    }),
    recordReturn: assign(({ context, event }) => {
      if (event.type !== 'troupe.handoff.returned') return {};
      return { now: nowOf(context, event), result: { ...event.result, artifactsCreated: event.result.artifactsCreated ?? [] } };
    }),
    emitResume: emit(({ context }) => handoffResumeOf(context)),
    markCompleted: assign({ status: 'completed' as const }),
    recordCancel: assign(({ context, event }) => {
      if (event.type !== 'troupe.handoff.cancel') return {};
      return { now: nowOf(context, event), status: 'cancelled' as const, ...(event.reason !== undefined ? { cancelReason: event.reason } : {}) };
    }),
    recordFailure: assign(({ context, event }) => {
      if (event.type !== 'troupe.handoff.failed') return {};
      return { now: nowOf(context, event), status: 'error' as const, error: event.error };
    }),
    recordTimeout: assign(({ context }) => ({
      now: Math.max(context.now, context.deadline),
      status: 'error' as const,
      error: {
        code: 'AGENT_TIMEOUT' as const,
        message: `the handoff to "${context.request.targetAgentId}" did not finish within ${context.maxDurationMs} ms`,
      },
    })),
  },
});

export const handoffMachine = handoffSetup.createMachine({
  id: 'handoff',
  initial: 'pending',
  context: ({ input }) => ({
    request: input.request,
    startedAt: input.now,
    now: input.now,
    deadline: input.now + input.maxDurationMs,
    maxDurationMs: input.maxDurationMs,
    turns: 0,
  }),
  states: {
    pending: {
      description: 'The request went to the target; waiting for its accept/reject answer. The source keeps control.',
      after: { handoffDeadline: { target: 'error', actions: 'recordTimeout' } },
      on: {
        'troupe.handoff.accepted': { target: 'active', actions: 'recordAcceptance' },
        'troupe.handoff.rejected': { target: 'rejected', actions: 'recordRejection' },
        'troupe.handoff.cancel': { target: 'cancelled', actions: 'recordCancel' },
        'troupe.handoff.failed': { target: 'error', actions: 'recordFailure' },
        'troupe.handoff.tick': { target: 'pending', reenter: true, actions: 'recordNow' },
      },
    },
    active: {
      description: 'The target talks to the user; user messages go straight to it.',
      after: { handoffDeadline: { target: 'error', actions: 'recordTimeout' } },
      on: {
        'troupe.handoff.userMessage': { guard: 'isNewUserMessage', actions: ['recordUserMessage', 'forwardToTarget'] },
        'troupe.handoff.returned': { target: 'returning', actions: 'recordReturn' },
        'troupe.handoff.cancel': { target: 'cancelled', actions: 'recordCancel' },
        'troupe.handoff.failed': { target: 'error', actions: 'recordFailure' },
        'troupe.handoff.tick': { target: 'active', reenter: true, actions: 'recordNow' },
      },
    },
    returning: {
      description: 'The target returned; the source agent resumes with the result summary.',
      entry: 'emitResume',
      always: { target: 'completed', actions: 'markCompleted' },
    },
    completed: { type: 'final' },
    rejected: {
      type: 'final',
      description: 'The target declined; control never left the source agent.',
    },
    cancelled: { type: 'final' },
    error: { type: 'final' },
  },
  output: ({ context }) => handoffOutputOf(context),
});

export type HandoffMachine = typeof handoffMachine;
export type HandoffSnapshot = SnapshotFrom<typeof handoffMachine>;

export const HANDOFF_FINAL_STATES: readonly HandoffFinalStatus[] = ['completed', 'rejected', 'cancelled', 'error'];
/** States in which a handoff holds the thread (one per thread). */
export const HANDOFF_OPEN_STATES = ['pending', 'active', 'returning'] as const;

/**
 * What the thread holds about its current handoff: nothing, the live snapshot, the persisted snapshot
 * (`actor.getPersistedSnapshot()`, as stored with the thread), or just the state value.
 */
export type ActiveHandoffState = HandoffSnapshot | Snapshot<unknown> | { value: StateValue; status?: string } | StateValue | null | undefined;

function valueOf(state: ActiveHandoffState): StateValue | undefined {
  if (state === null || state === undefined) return undefined;
  if (typeof state === 'string') return state;
  if (typeof state === 'object' && 'value' in state) return state.value as StateValue;
  return undefined;
}

/**
 * The thread's guard: may a new handoff start while `activeHandoffState` is what the thread holds?
 * True when there is none or it has ended (completed / rejected / cancelled / error, or the actor
 * crashed). A stopped (passivated) actor whose state is still open counts as open.
 */
export function canStartHandoff(activeHandoffState: ActiveHandoffState): boolean {
  if (activeHandoffState === null || activeHandoffState === undefined) return true;
  if (typeof activeHandoffState === 'object' && 'status' in activeHandoffState) {
    const status = (activeHandoffState as { status?: unknown }).status;
    if (status === 'done' || status === 'error') return true;
  }
  const value = valueOf(activeHandoffState);
  return typeof value === 'string' && (HANDOFF_FINAL_STATES as readonly string[]).includes(value);
}

/** Throws HANDOFF_CONFLICT when `canStartHandoff` says no. */
export function assertCanStartHandoff(activeHandoffState: ActiveHandoffState, threadId?: string): void {
  if (canStartHandoff(activeHandoffState)) return;
  throw new TroupeError(
    'HANDOFF_CONFLICT',
    `thread${threadId ? ` ${threadId}` : ''} already has an active handoff (${JSON.stringify(valueOf(activeHandoffState))}); finish or cancel it first`,
    threadId ? { threadId } : undefined,
  );
}

/**
 * Maps a reply from the handoff's target agent to the events for the machine, in order:
 * in `pending`, its `handoffAccept` (absent = accepted) becomes `accepted` / `rejected`; in `pending` or
 * `active`, a `handoffReturn` becomes `returned`. Throws EXTENSION_PARSE_ERROR for malformed metadata.
 */
export function handoffEventsForTargetReply(reply: Message, state: 'pending' | 'active', now: number): HandoffEvent[] {
  const events: HandoffEvent[] = [];
  if (state === 'pending') {
    const accept = readHandoffAccept(reply);
    if (accept && !accept.accepted) {
      events.push({
        type: 'troupe.handoff.rejected',
        now,
        ...(accept.rejectionReason !== undefined ? { rejectionReason: accept.rejectionReason } : {}),
      });
      return events;
    }
    events.push({
      type: 'troupe.handoff.accepted',
      now,
      ...(accept?.estimatedDurationSeconds !== undefined ? { estimatedDurationSeconds: accept.estimatedDurationSeconds } : {}),
    });
  }
  const ret = readHandoffReturn(reply);
  if (ret) events.push({ type: 'troupe.handoff.returned', result: ret, now });
  return events;
}

/** The `failed` event for an error reply or a thrown error from the target. */
export function handoffFailedEvent(err: unknown, now?: number): HandoffEvent {
  const body: ErrorBody =
    err && typeof err === 'object' && !(err instanceof Error) && 'code' in err && 'message' in err && ErrorCodeSchema.safeParse(err.code).success
      ? { code: err.code as ErrorCode, message: String(err.message) }
      : TroupeError.from(err, 'AGENT_ERROR').toBody();
  return { type: 'troupe.handoff.failed', error: { code: body.code, message: body.message }, ...(now !== undefined ? { now } : {}) };
}
