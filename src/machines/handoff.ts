/**
 * One handoff: the source agent passes the conversation to a target agent, which talks to the user
 * directly until it returns control with a result summary. This machine is where a handoff's rules
 * live; the thread (thread/handoff.ts) tells it what happened and acts on its output.
 *
 *   pending --accepted--> active --returned--> returning --(the target's completionStatus)--> completed | cancelled | error
 *      |                    '--userMessage (counted once per message)
 *      |--rejected--> rejected (control never left the source)
 *      |--cancel----> cancelled    (pending or active)
 *      |--failed----> error        (pending or active: target crashed / error reply)
 *      '--deadline--> error        (AGENT_TIMEOUT; pending or active)
 *
 * The output says how it ended, what the source is told (`handoffReturn`: the target's summary and
 * artifacts, or why it ended) and whether control goes back to the source now (`returnsToSource`:
 * not when the target declined, nor when the request said `returnExpected: false`).
 *
 * Pure: no clock and no timers of its own. The current time comes in on events (`now`), the deadline is
 * an absolute epoch-ms value in context, and the `after` timer's length is the named delay
 * `handoffDeadline = max(0, deadline - now)`. XState does not persist pending delays, so after restoring
 * a snapshot the host sends `troupe.handoff.tick { now }`: pending/active re-enter and re-arm the
 * remaining time (or fire at once when the deadline has passed).
 */
import { assign, setup, type SnapshotFrom } from 'xstate';
import type { Message } from '../protocol/a2a.js';
import { ErrorCodeSchema, TroupeError, type ErrorBody, type ErrorCode } from '../protocol/errors.js';
import { readHandoffAccept, readHandoffReturn, type HandoffRequest, type HandoffReturn } from '../protocol/handoff.js';

export interface HandoffInput {
  /** A parsed request (`HandoffRequestSchema.parse(...)` or `handoffRequestFromDirective(...)`). */
  request: HandoffRequest;
  /** Epoch ms when the handoff starts. */
  now: number;
  /** Budget for the whole handoff (acceptance included); the deadline is `now + maxDurationMs`. */
  maxDurationMs: number;
}

type HandoffFinalStatus = 'completed' | 'rejected' | 'cancelled' | 'error';

/**
 * @inDeclarations the declaration of the machines built on it names this type (knip.jsonc).
 */
export interface HandoffError {
  code: ErrorCode;
  message: string;
}

/**
 * @inDeclarations the declaration of the machines built on it names this type (knip.jsonc).
 */
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
  /** User messages the target got while it held the conversation. */
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
  /** Control goes back to the source agent now, which is re-invoked with `handoffReturn`. */
  returnsToSource: boolean;
  /** What the source is told (absent when the target declined): how it ended, the summary, the artifacts. */
  handoffReturn?: HandoffReturn;
  error?: HandoffError;
  rejectionReason?: string;
  /** User messages the target got while it held the conversation. */
  turns: number;
}

/**
 * Events the thread sends. `now` (epoch ms) keeps the machine's clock current; it is required where a
 * timer is (re)armed. `rejected`, `returned`, `cancel` and `failed` end the handoff.
 */
export type HandoffEvent =
  | { type: 'troupe.handoff.accepted'; now: number; estimatedDurationSeconds?: number }
  | { type: 'troupe.handoff.rejected'; rejectionReason?: string; now?: number }
  | { type: 'troupe.handoff.userMessage'; message: Message; now?: number }
  | { type: 'troupe.handoff.returned'; result: HandoffReturn; now?: number }
  | { type: 'troupe.handoff.cancel'; reason?: string; now?: number }
  | { type: 'troupe.handoff.failed'; error: HandoffError; now?: number }
  | { type: 'troupe.handoff.tick'; now: number };

function nowOf(context: HandoffContext, event: { now?: number }): number {
  return typeof event.now === 'number' && Number.isFinite(event.now) ? Math.max(context.now, event.now) : context.now;
}

/** Ends that can come from the thread's events (the rest end the handoff by themselves). */
const ENDING_EVENTS: ReadonlySet<HandoffEvent['type']> = new Set([
  'troupe.handoff.rejected',
  'troupe.handoff.returned',
  'troupe.handoff.cancel',
  'troupe.handoff.failed',
]);

/** Whether an event ends the handoff (the thread then waits for the handoff's output). */
export function endsHandoff(event: HandoffEvent): boolean {
  return ENDING_EVENTS.has(event.type);
}

/** What the source is told when control comes back: the target's own return, or why the handoff ended. */
function handoffReturnOf(context: HandoffContext): HandoffReturn | undefined {
  if (context.status === 'rejected') return undefined;
  if (context.result) return context.result;
  if (context.status === 'cancelled')
    return { completionStatus: 'cancelled', resultSummary: context.cancelReason ?? 'cancelled by the user', artifactsCreated: [] };
  const error = context.error ?? { code: 'AGENT_ERROR', message: 'the handoff failed' };
  return { completionStatus: 'error', resultSummary: `${error.code}: ${error.message}`, artifactsCreated: [] };
}

function handoffOutputOf(context: HandoffContext): HandoffOutput {
  const status = context.status ?? 'error';
  const handoffReturn = handoffReturnOf(context);
  return {
    status,
    returnsToSource: status !== 'rejected' && context.request.returnExpected,
    ...(handoffReturn ? { handoffReturn } : {}),
    ...(context.error ? { error: context.error } : {}),
    ...(context.rejectionReason !== undefined ? { rejectionReason: context.rejectionReason } : {}),
    turns: context.turns,
  };
}

const handoffSetup = setup({
  types: {
    input: {} as HandoffInput,
    context: {} as HandoffContext,
    events: {} as HandoffEvent,
    output: {} as HandoffOutput,
  },
  delays: {
    /** Remaining time to the absolute deadline, from the machine's last known `now`. */
    handoffDeadline: ({ context }) => Math.max(0, context.deadline - context.now),
  },
  guards: {
    /** Redelivered messages (same messageId as the last one) are not forwarded twice. */
    isNewUserMessage: ({ context, event }) => event.type === 'troupe.handoff.userMessage' && event.message.messageId !== context.lastMessageId,
    returnedCompleted: ({ context }) => context.result?.completionStatus === 'completed',
    returnedCancelled: ({ context }) => context.result?.completionStatus === 'cancelled',
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
    recordReturn: assign(({ context, event }) => {
      if (event.type !== 'troupe.handoff.returned') return {};
      return { now: nowOf(context, event), result: { ...event.result, artifactsCreated: event.result.artifactsCreated ?? [] } };
    }),
    markCompleted: assign({ status: 'completed' as const }),
    markCancelled: assign({ status: 'cancelled' as const }),
    /** The target returned, saying it failed: the handoff ends in error with its summary as the reason. */
    markReturnedError: assign(({ context }) => ({
      status: 'error' as const,
      error: { code: 'AGENT_ERROR' as const, message: context.result?.resultSummary ?? `"${context.request.targetAgentId}" returned with an error` },
    })),
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
        'troupe.handoff.userMessage': { guard: 'isNewUserMessage', actions: 'recordUserMessage' },
        'troupe.handoff.returned': { target: 'returning', actions: 'recordReturn' },
        'troupe.handoff.cancel': { target: 'cancelled', actions: 'recordCancel' },
        'troupe.handoff.failed': { target: 'error', actions: 'recordFailure' },
        'troupe.handoff.tick': { target: 'active', reenter: true, actions: 'recordNow' },
      },
    },
    returning: {
      description: 'The target returned control; its completionStatus says how the handoff ended.',
      always: [
        { guard: 'returnedCompleted', target: 'completed', actions: 'markCompleted' },
        { guard: 'returnedCancelled', target: 'cancelled', actions: 'markCancelled' },
        { target: 'error', actions: 'markReturnedError' },
      ],
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

export type HandoffSnapshot = SnapshotFrom<typeof handoffMachine>;

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
