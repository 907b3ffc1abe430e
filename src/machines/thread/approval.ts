/**
 * The approval a thread waits on (protocol/approval.ts): when an agent's answer asks a person to approve
 * tool calls, the thread keeps who asks and until when (`context.approval`, so in its record), and while
 * it waits in `input-required` a delayed event fires at that deadline. Then the thread sends the waiting
 * agent a `timeout` decision itself, as the next turn's message: the agent tells its model the calls were
 * refused, and its answer goes to the user like any other.
 *
 * Pure: the deadline is an absolute time in context and the delay is computed from the thread's clock
 * (`context.now`). XState does not keep delayed events in a snapshot, so a restored thread re-arms it
 * (`troupe.restored`); a deadline that passed while no node held the thread fires at once.
 */
import { assign, cancel, enqueueActions } from 'xstate';
import type { Message } from '../../protocol/a2a.js';
import { MAX_APPROVAL_WAIT_MS, approvalTimeoutMessage, readApprovalRequest, type ApprovalWait } from '../../protocol/approval.js';
import { META } from '../../protocol/metadata.js';
import { threadWithHandoff } from './handoff.js';
import type { ThreadContext } from './types.js';

/** The id of the delayed event (one per thread: a thread waits on one approval at a time). */
const APPROVAL_DEADLINE = 'approvalDeadline';

/**
 * What the thread waits on after a turn answered with `answer`: the answer's own request (its writer
 * asks again, or anew); nothing when the agent that was waiting answered otherwise; else what it waited on.
 * The deadline kept is never further than MAX_APPROVAL_WAIT_MS from `now`, whatever the request says.
 */
export function approvalWaitAfter(current: ApprovalWait | undefined, answer: Message | undefined, now: number): ApprovalWait | undefined {
  if (!answer) return current;
  const from = answer.metadata?.[META.agent];
  const request = readApprovalRequest(answer);
  if (request && request.agent === from) {
    return { agent: request.agent, messageId: answer.messageId, expiresAt: Math.min(request.expiresAt, now + MAX_APPROVAL_WAIT_MS) };
  }
  return current && current.agent === from ? undefined : current;
}

/** Time left to the deadline on the thread's clock. */
function approvalDelay(context: Pick<ThreadContext, 'approval' | 'now'>): number | undefined {
  return context.approval ? Math.max(0, context.approval.expiresAt - context.now) : undefined;
}

export const threadWithApproval = threadWithHandoff.extend({
  guards: {
    /** The deadline that fired is the one the thread still waits on (a decision may have come first). */
    approvalDue: ({ context, event }) => event.type === 'troupe.approval.timeout' && context.approval?.messageId === event.messageId,
  },
  actions: {
    /** (Re)schedules the deadline event of the approval the thread waits on; none when it waits on none. */
    armApprovalDeadline: enqueueActions(({ context, enqueue }) => {
      enqueue.cancel(APPROVAL_DEADLINE);
      const delay = approvalDelay(context);
      if (!context.approval || delay === undefined) return;
      enqueue.raise({ type: 'troupe.approval.timeout', messageId: context.approval.messageId }, { id: APPROVAL_DEADLINE, delay });
    }),
    cancelApprovalDeadline: cancel(APPROVAL_DEADLINE),
    /** The deadline passed: the thread's own `timeout` decision to the waiting agent starts the next turn. */
    queueApprovalTimeout: assign(({ context }) => {
      const wait = context.approval;
      if (!wait) return {};
      return {
        approval: undefined,
        pending: [approvalTimeoutMessage(wait, { contextId: context.contextId, taskId: context.threadId }), ...context.pending],
      };
    }),
  },
});
