/**
 * One call to an agent: `calling -> (waiting -> calling)* -> succeeded | failed`, with a per-attempt
 * timeout (AGENT_TIMEOUT) and retries with a delay. Pure: the request itself is the injected `request`
 * actor, and the clock-aware timeout is an injected delay (the default uses the configured duration).
 *
 * Every attempt reuses the message's messageId as the idempotency key, so an agent that already
 * answered a retried (or, after a restart, re-run) call can answer it again without redoing the work.
 */
import { assign, fromPromise, setup, type ErrorActorEvent } from 'xstate';
import type { Message } from '../protocol/a2a.js';
import { ErrorCodeSchema, type ErrorBody } from '../protocol/errors.js';
import type { AgentReply } from '../protocol/wire.js';

export interface AgentCallInput {
  agentId: string;
  message: Message;
  /** Who the message comes from: `user` or an agent id. */
  sender: string;
  hop: number;
  timeoutMs: number;
  retries: number;
  retryDelayMs: number;
  /** Epoch ms when the call was made; deadlines are kept as absolute times so a restore can re-arm them. */
  now: number;
  /** One call of a fan-out (an orchestration's): the host sanitises what the agent sees on that path. */
  fanOut?: boolean;
}

export interface AgentRequestInput {
  agentId: string;
  message: Message;
  sender: string;
  hop: number;
  attempt: number;
  timeoutMs: number;
  /** Set for the calls of a fan-out (see AgentCallInput.fanOut). */
  fanOut?: boolean;
}

/**
 * What the `request` actor resolves with: the agent's reply, or the reply with the time it came (epoch
 * ms, the host's clock), which the call's output carries to the thread so that its clock moves with the
 * answer itself rather than with an event of its own.
 */
export type AgentRequestOutput = AgentReply | TimedReply;
interface TimedReply {
  kind: 'troupe.timedReply';
  reply: AgentReply;
  at: number;
}

export type AgentCallOutput =
  { ok: true; agentId: string; reply: AgentReply; attempts: number; at?: number } | { ok: false; agentId: string; error: ErrorBody; attempts: number };

/**
 * @inDeclarations the declaration of the machines built on it names this type (knip.jsonc).
 */
export interface AgentCallContext extends AgentCallInput {
  attempt: number;
  deadline: number;
  reply?: AgentReply;
  /** When the reply came, if the request said. */
  repliedAt?: number;
  error?: ErrorBody;
}

/**
 * What a failed request rejected with, as a typed error: the transport's NO_RESPONDERS / TIMEOUT become
 * AGENT_NOT_FOUND / AGENT_TIMEOUT, Troupe's own codes are kept, anything else is AGENT_ERROR.
 */
export function toErrorBody(err: unknown, agentId: string): ErrorBody {
  if (err && typeof err === 'object' && 'code' in err) {
    // A transport error says which failure in `reason` (its code is TRANSPORT_ERROR).
    const reason = 'reason' in err ? err.reason : undefined;
    const code = err.code;
    const message = 'message' in err ? String(err.message) : String(code);
    if (reason === 'NO_RESPONDERS') return { code: 'AGENT_NOT_FOUND', message: `agent "${agentId}" is not on the mesh` };
    if (reason === 'TIMEOUT') return { code: 'AGENT_TIMEOUT', message: `agent "${agentId}" did not answer in time` };
    const known = ErrorCodeSchema.safeParse(code);
    if (known.success) return { code: known.data, message };
  }
  return { code: 'AGENT_ERROR', message: err instanceof Error ? err.message : String(err) };
}

const agentCallSetup = setup({
  types: {
    input: {} as AgentCallInput,
    context: {} as AgentCallContext,
    output: {} as AgentCallOutput,
    events: {} as { type: 'troupe.agentCall.restored' },
  },
  actors: {
    request: fromPromise<AgentRequestOutput, AgentRequestInput>(async () => {
      throw new Error('agentCall: the host must provide the `request` actor');
    }),
  },
  delays: {
    callTimeout: ({ context }) => context.timeoutMs,
    retryDelay: ({ context }) => context.retryDelayMs,
  },
  guards: {
    canRetry: ({ context }) => context.attempt < context.retries,
  },
  actions: {
    recordReply: assign((_, output: AgentRequestOutput) =>
      output.kind === 'troupe.timedReply' ? { reply: output.reply, repliedAt: output.at, error: undefined } : { reply: output, error: undefined },
    ),
    recordFailure: assign({ error: ({ context }, err: unknown) => toErrorBody(err, context.agentId) }),
    recordTimeout: assign({
      error: ({ context }) => ({
        code: 'AGENT_TIMEOUT' as const,
        message: `agent "${context.agentId}" did not answer within ${context.timeoutMs} ms (attempt ${context.attempt + 1} of ${context.retries + 1})`,
      }),
    }),
    nextAttempt: assign({
      attempt: ({ context }) => context.attempt + 1,
      deadline: ({ context }) => context.deadline + context.retryDelayMs + context.timeoutMs,
    }),
  },
});

export const agentCallMachine = agentCallSetup.createMachine({
  id: 'agentCall',
  initial: 'calling',
  context: ({ input }) => ({ ...input, attempt: 0, deadline: input.now + input.timeoutMs }),
  states: {
    calling: {
      // After a restore: timers are not persisted, so start the attempt again (same idempotency key).
      on: { 'troupe.agentCall.restored': { target: 'calling', reenter: true } },
      invoke: {
        id: 'request',
        src: 'request',
        input: ({ context }) => ({
          agentId: context.agentId,
          message: context.message,
          sender: context.sender,
          hop: context.hop,
          attempt: context.attempt,
          timeoutMs: context.timeoutMs,
          ...(context.fanOut ? { fanOut: true } : {}),
        }),
        onDone: { target: 'succeeded', actions: { type: 'recordReply', params: ({ event }) => event.output } },
        onError: [
          { guard: 'canRetry', target: 'waiting', actions: { type: 'recordFailure', params: ({ event }: { event: ErrorActorEvent }) => event.error } },
          { target: 'failed', actions: { type: 'recordFailure', params: ({ event }: { event: ErrorActorEvent }) => event.error } },
        ],
      },
      after: {
        callTimeout: [
          { guard: 'canRetry', target: 'waiting', actions: 'recordTimeout' },
          { target: 'failed', actions: 'recordTimeout' },
        ],
      },
    },
    waiting: {
      after: { retryDelay: { target: 'calling', actions: 'nextAttempt' } },
      // After a restore the retry delay is gone with the process that set it: retry now.
      on: { 'troupe.agentCall.restored': { target: 'calling', actions: 'nextAttempt' } },
    },
    succeeded: { type: 'final' },
    failed: { type: 'final' },
  },
  output: ({ context }): AgentCallOutput =>
    context.reply
      ? {
          ok: true,
          agentId: context.agentId,
          reply: context.reply,
          attempts: context.attempt + 1,
          ...(context.repliedAt !== undefined ? { at: context.repliedAt } : {}),
        }
      : {
          ok: false,
          agentId: context.agentId,
          error: context.error ?? { code: 'AGENT_ERROR', message: 'agent call failed' },
          attempts: context.attempt + 1,
        },
});
