/**
 * Orchestration: fan one message out to the router's primary agent and its additional agents, then
 * aggregate the answers into one agent message.
 *
 *   running.dispatching --(strategy)--> running.parallel | running.sequential | running.firstSuccess
 *   running --(all calls settled, or first success in firstSuccess)--> aggregating --> done (final)
 *
 * - `parallel`: every agent at once (at most `maxParallelAgents`; the rest are reported as skipped).
 * - `sequential`: one after another, each with the original message; all answers are collected.
 * - `first_success`: every agent at once (same limit); the first success wins, the other calls are
 *   stopped (their AbortSignal fires) and reported as cancelled. The answer is the winner's content;
 *   agents that failed before it are listed in `failures` only.
 *
 * Each attempt is a child spawned from the injected `callAgent` actor, with id `call:<agentId>:<attempt>`.
 * A per-attempt timeout (named delay `agentTimeout`) fails it with AGENT_TIMEOUT and stops it; failures
 * and timeouts are retried `retries` times after the named delay `retryDelay`.
 *
 * Pure: the clock comes in from `startedAt` and `troupe.orchestration.tick { now }`; `execution_time_ms`
 * is `now - startedAt`. A host keeps it exact by sending a tick from its `callAgent` implementation just
 * before the promise settles (the tick is processed before the call's done / error event).
 *
 * Timers: per-attempt timeouts and retry delays are relative to the start of the attempt / the failure.
 * An attempt's promise re-runs when a snapshot is restored (XState restarts restored children), so after
 * a restore the host sends `troupe.orchestration.restored { now }`, which re-arms a full timeout for each
 * running (re-run) attempt and the retry delay for each waiting call (XState does not persist delays).
 * The agent call's idempotency key is the message's messageId (plus the agent id).
 */
import { assign, enqueueActions, fromPromise, setup, type SnapshotFrom } from 'xstate';
import { messageText, type Message, type Part } from '../protocol/a2a.js';
import { ErrorCodeSchema, type ErrorCode } from '../protocol/errors.js';
import type { RouterDecision } from '../protocol/routing.js';

export type OrchestrationStrategy = 'parallel' | 'sequential' | 'first_success';

export interface CallAgentInput {
  agentId: string;
  /** The original message; its messageId (with the agent id) is the call's idempotency key. */
  message: Message;
  /** 1-based; retries count up. */
  attempt: number;
}

/**
 * What `callAgent` resolves with: the agent's reply. It rejects with a TroupeError (or `{ code, message }`)
 * for an error reply or a transport failure.
 */
export type CallAgentOutput = Message;

export interface OrchestrationInput {
  decision: RouterDecision;
  message: Message;
  strategy: OrchestrationStrategy;
  /** Limit for `parallel` and `first_success` (default 3). */
  maxParallelAgents?: number;
  /** Per attempt (default 30000). */
  agentTimeoutMs?: number;
  /** Retries after the first attempt (default 2). */
  retries?: number;
  retryDelayMs?: number;
  /** Epoch ms. */
  startedAt: number;
  /** Answer when every agent failed; `{failureMessage}` is replaced. */
  fallbackMessage?: string;
  /** Answer when some agents failed; default `{successMessage} However, {failureMessage}`. */
  partialFailureTemplate?: string;
}

export interface AgentFailure {
  agentId: string;
  code: ErrorCode;
  message: string;
}

export type AgentCallStatus = 'queued' | 'running' | 'waiting' | 'succeeded' | 'failed' | 'cancelled';

export interface AgentCallRecord {
  agentId: string;
  status: AgentCallStatus;
  /** Attempts started so far. */
  attempts: number;
  /** Child actor id of the current (or last) attempt. */
  actorId?: string;
  reply?: Message;
  /** Final failure, or (while `waiting`) the failure that caused the retry. */
  error?: { code: ErrorCode; message: string };
  /** The machine's `now` when the call settled. */
  finishedAt?: number;
}

export interface OrchestrationMetadata {
  /** Agents that answered, in agent order. */
  agents_used: string[];
  execution_time_ms: number;
  task_state: 'completed' | 'failed';
  strategy: OrchestrationStrategy;
  failures: AgentFailure[];
  /** first_success: calls stopped because another agent answered first. */
  cancelled: string[];
  /** Agents left out by `maxParallelAgents`. */
  skipped: string[];
}

export interface OrchestrationOutput {
  message: Message;
  metadata: OrchestrationMetadata;
}

export interface OrchestrationContext {
  decision: RouterDecision;
  message: Message;
  strategy: OrchestrationStrategy;
  /** The agents called, in order (primary first, deduplicated, limited for parallel strategies). */
  agents: string[];
  skipped: string[];
  maxParallelAgents: number;
  agentTimeoutMs: number;
  retries: number;
  retryDelayMs: number;
  startedAt: number;
  now: number;
  fallbackMessage?: string;
  partialFailureTemplate?: string;
  calls: AgentCallRecord[];
  result?: OrchestrationOutput;
}

const DONE_PREFIX = 'xstate.done.actor.';
const ERROR_PREFIX = 'xstate.error.actor.';

export type CallDoneEvent = { type: `xstate.done.actor.${string}`; output: CallAgentOutput; actorId?: string };
export type CallErrorEvent = { type: `xstate.error.actor.${string}`; error: unknown; actorId?: string };

export type OrchestrationEvent =
  | CallDoneEvent
  | CallErrorEvent
  /** Raised (delayed) by the machine itself. */
  | { type: 'troupe.orchestration.callTimeout'; agentId: string; attempt: number }
  /** Raised (delayed) by the machine itself: start the next attempt. */
  | { type: 'troupe.orchestration.retry'; agentId: string; attempt: number }
  /** From the host: the current time. */
  | { type: 'troupe.orchestration.tick'; now: number }
  /** From the host right after restoring a snapshot: re-arm timers. */
  | { type: 'troupe.orchestration.restored'; now: number };

export const DEFAULT_PARTIAL_FAILURE_TEMPLATE = '{successMessage} However, {failureMessage}';
export const DEFAULT_FALLBACK_MESSAGE =
  "Sorry, I couldn't get an answer from any of the agents: {failureMessage} Please try again in a moment.";

/* ------------------------------------------------------------------------------------------------ */
/* Aggregation (pure)                                                                               */
/* ------------------------------------------------------------------------------------------------ */

export interface AgentResult {
  agentId: string;
  status: 'succeeded' | 'failed' | 'cancelled';
  reply?: Message;
  error?: { code: ErrorCode; message: string };
}

export interface AggregateOptions {
  /** Used when every agent failed; `{failureMessage}` is replaced. */
  fallbackMessage?: string;
  /** Used when some failed; `{successMessage}` and `{failureMessage}` are replaced. */
  partialFailureTemplate?: string;
}

export interface Aggregation {
  text: string;
  /** Parts of the aggregated message: the single answer's own parts, or the text plus the answers' non-text parts. */
  parts: Part[];
  agentsUsed: string[];
  failures: AgentFailure[];
  cancelled: string[];
  taskState: 'completed' | 'failed';
}

function fill(template: string, values: Record<string, string>): string {
  return template.replace(/\{(\w+)\}/g, (whole, key: string) => values[key] ?? whole);
}

/** One sentence naming the failed agents and why, e.g. `writer did not answer in time; coder failed (boom).` */
export function describeFailures(failures: readonly AgentFailure[]): string {
  const reasons = failures.map((f) =>
    f.code === 'AGENT_TIMEOUT' ? `${f.agentId} did not answer in time` : `${f.agentId} failed (${f.message})`,
  );
  return reasons.length ? `${reasons.join('; ')}.` : '';
}

export function failuresOf(results: readonly AgentResult[]): AgentFailure[] {
  return results
    .filter((r) => r.status === 'failed')
    .map((r) => ({ agentId: r.agentId, code: r.error?.code ?? 'AGENT_ERROR', message: r.error?.message ?? 'unknown error' }));
}

/**
 * Combines the agents' results (given in agent order): one success -> its content; several ->
 * `**<agentId>**: text` blocks; some failed -> the partial-failure template; all failed -> the fallback.
 */
export function aggregate(results: readonly AgentResult[], opts: AggregateOptions = {}): Aggregation {
  const successes = results.filter((r): r is AgentResult & { reply: Message } => r.status === 'succeeded' && r.reply !== undefined);
  const failures = failuresOf(results);
  const cancelled = results.filter((r) => r.status === 'cancelled').map((r) => r.agentId);
  const agentsUsed = successes.map((r) => r.agentId);
  const failureMessage = describeFailures(failures);

  if (successes.length === 0) {
    const text = fill(opts.fallbackMessage ?? DEFAULT_FALLBACK_MESSAGE, { failureMessage }).trim();
    return { text, parts: [{ kind: 'text', text }], agentsUsed, failures, cancelled, taskState: 'failed' };
  }

  const successMessage =
    successes.length === 1
      ? messageText(successes[0]!.reply)
      : successes.map((r) => `**${r.agentId}**: ${messageText(r.reply)}`).join('\n\n');
  const text = failures.length
    ? fill(opts.partialFailureTemplate ?? DEFAULT_PARTIAL_FAILURE_TEMPLATE, { successMessage, failureMessage })
    : successMessage;
  const parts: Part[] =
    successes.length === 1 && failures.length === 0
      ? successes[0]!.reply.parts
      : [{ kind: 'text', text }, ...successes.flatMap((r) => r.reply.parts.filter((p) => p.kind !== 'text'))];
  return { text, parts, agentsUsed, failures, cancelled, taskState: 'completed' };
}

/* ------------------------------------------------------------------------------------------------ */
/* Helpers over context and events                                                                  */
/* ------------------------------------------------------------------------------------------------ */

/** Agents in order: the primary, then the additional ones, without duplicates or blanks. */
export function orchestrationAgents(decision: RouterDecision): string[] {
  return Array.from(new Set([decision.agentId, ...(decision.additionalAgents ?? [])].filter((id) => id.length > 0)));
}

export function callActorId(agentId: string, attempt: number): string {
  return `call:${agentId}:${attempt}`;
}
const timeoutTimerId = (agentId: string) => `timeout:${agentId}`;
const retryTimerId = (agentId: string) => `retry:${agentId}`;

function isDoneEvent(event: OrchestrationEvent): event is CallDoneEvent {
  return event.type.startsWith(DONE_PREFIX);
}
function isErrorEvent(event: OrchestrationEvent): event is CallErrorEvent {
  return event.type.startsWith(ERROR_PREFIX);
}

/** The running call an event is about (done / error of its current attempt, or its current timeout). */
function runningCallFor(context: OrchestrationContext, event: OrchestrationEvent): AgentCallRecord | undefined {
  if (isDoneEvent(event) || isErrorEvent(event)) {
    const actorId = event.type.slice(isDoneEvent(event) ? DONE_PREFIX.length : ERROR_PREFIX.length);
    return context.calls.find((c) => c.status === 'running' && c.actorId === actorId);
  }
  if (event.type === 'troupe.orchestration.callTimeout') {
    return context.calls.find((c) => c.status === 'running' && c.agentId === event.agentId && c.attempts === event.attempt);
  }
  return undefined;
}

function canRetry(context: OrchestrationContext, call: AgentCallRecord | undefined): boolean {
  return call !== undefined && call.attempts <= context.retries;
}

/** Turns what a call rejected with into `{ code, message }` (TroupeError / ErrorBody codes are kept). */
export function toCallFailure(err: unknown, agentId: string): { code: ErrorCode; message: string } {
  if (err && typeof err === 'object' && 'code' in err) {
    const code = (err as { code: unknown }).code;
    const message = 'message' in err ? String((err as { message: unknown }).message) : String(code);
    if (code === 'TIMEOUT') return { code: 'AGENT_TIMEOUT', message: `agent "${agentId}" did not answer in time` };
    if (code === 'NO_RESPONDERS') return { code: 'AGENT_NOT_FOUND', message: `agent "${agentId}" is not on the mesh` };
    const parsed = ErrorCodeSchema.safeParse(code);
    if (parsed.success) return { code: parsed.data, message };
  }
  return { code: 'AGENT_ERROR', message: err instanceof Error ? err.message : String(err) };
}

function updateCall(calls: AgentCallRecord[], agentId: string, patch: Partial<AgentCallRecord>): AgentCallRecord[] {
  return calls.map((c) => (c.agentId === agentId ? { ...c, ...patch } : c));
}

/** The output for a context whose calls have settled. */
export function orchestrationOutputOf(context: OrchestrationContext): OrchestrationOutput {
  const results: AgentResult[] = context.calls.map((c) => ({
    agentId: c.agentId,
    status: c.status === 'succeeded' ? 'succeeded' : c.status === 'failed' ? 'failed' : 'cancelled',
    ...(c.reply ? { reply: c.reply } : {}),
    ...(c.error ? { error: c.error } : {}),
  }));
  // first_success: once an agent has answered, the others' earlier failures do not change the answer
  // (they are still reported in the metadata).
  const winnerOnly = context.strategy === 'first_success' && results.some((r) => r.status === 'succeeded');
  const agg = aggregate(winnerOnly ? results.filter((r) => r.status !== 'failed') : results, {
    ...(context.fallbackMessage !== undefined ? { fallbackMessage: context.fallbackMessage } : {}),
    ...(context.partialFailureTemplate !== undefined ? { partialFailureTemplate: context.partialFailureTemplate } : {}),
  });
  const original = context.message;
  return {
    message: {
      kind: 'message',
      role: 'agent',
      messageId: `${original.messageId}-orchestrated`,
      ...(original.contextId !== undefined ? { contextId: original.contextId } : {}),
      ...(original.taskId !== undefined ? { taskId: original.taskId } : {}),
      parts: agg.parts,
    },
    metadata: {
      agents_used: agg.agentsUsed,
      execution_time_ms: Math.max(0, context.now - context.startedAt),
      task_state: agg.taskState,
      strategy: context.strategy,
      failures: failuresOf(results),
      cancelled: agg.cancelled,
      skipped: context.skipped,
    },
  };
}

function nonNegativeInt(value: number | undefined, fallback: number): number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? Math.floor(value) : fallback;
}

export function orchestrationContextOf(input: OrchestrationInput): OrchestrationContext {
  const maxParallelAgents = Math.max(1, nonNegativeInt(input.maxParallelAgents, 3));
  const all = orchestrationAgents(input.decision);
  const agents = input.strategy === 'sequential' ? all : all.slice(0, maxParallelAgents);
  return {
    decision: input.decision,
    message: input.message,
    strategy: input.strategy,
    agents,
    skipped: all.slice(agents.length),
    maxParallelAgents,
    agentTimeoutMs: nonNegativeInt(input.agentTimeoutMs, 30_000),
    retries: nonNegativeInt(input.retries, 2),
    retryDelayMs: nonNegativeInt(input.retryDelayMs, 1_000),
    startedAt: input.startedAt,
    now: input.startedAt,
    ...(input.fallbackMessage !== undefined ? { fallbackMessage: input.fallbackMessage } : {}),
    ...(input.partialFailureTemplate !== undefined ? { partialFailureTemplate: input.partialFailureTemplate } : {}),
    calls: agents.map((agentId) => ({ agentId, status: 'queued', attempts: 0 })),
  };
}

/* ------------------------------------------------------------------------------------------------ */
/* Machine                                                                                          */
/* ------------------------------------------------------------------------------------------------ */

export const orchestrationSetup = setup({
  types: {
    input: {} as OrchestrationInput,
    context: {} as OrchestrationContext,
    events: {} as OrchestrationEvent,
    output: {} as OrchestrationOutput,
  },
  actors: {
    /** One attempt of one agent call. Hosts `.provide()` the real one; it should honour `signal`. */
    callAgent: fromPromise<Message, CallAgentInput>(async () => {
      throw new Error('orchestration: callAgent not provided');
    }),
  },
  delays: {
    agentTimeout: ({ context }) => context.agentTimeoutMs,
    retryDelay: ({ context }) => context.retryDelayMs,
  },
  guards: {
    isSequential: ({ context }) => context.strategy === 'sequential',
    isFirstSuccess: ({ context }) => context.strategy === 'first_success',
    /** A done / error event of a call's current attempt. */
    isCurrentCall: ({ context, event }) => runningCallFor(context, event) !== undefined,
    /** A current attempt failed and has retries left. */
    currentCallCanRetry: ({ context, event }) => canRetry(context, runningCallFor(context, event)),
    /** The timeout of a call's current attempt. */
    isCurrentTimeout: ({ context, event }) =>
      event.type === 'troupe.orchestration.callTimeout' && runningCallFor(context, event) !== undefined,
    timedOutCallCanRetry: ({ context, event }) =>
      event.type === 'troupe.orchestration.callTimeout' && canRetry(context, runningCallFor(context, event)),
    isAwaitingRetry: ({ context, event }) =>
      event.type === 'troupe.orchestration.retry' &&
      context.calls.some((c) => c.agentId === event.agentId && c.status === 'waiting' && c.attempts + 1 === event.attempt),
    allCallsSettled: ({ context }) =>
      context.calls.every((c) => c.status === 'succeeded' || c.status === 'failed' || c.status === 'cancelled'),
  },
  actions: {
    /** Starts queued calls: all of them (parallel, first_success) or the next one when none is in flight (sequential). */
    startQueuedCalls: enqueueActions(({ context, enqueue }) => {
      const inFlight = context.calls.filter((c) => c.status === 'running' || c.status === 'waiting').length;
      let slots = (context.strategy === 'sequential' ? 1 : context.agents.length) - inFlight;
      for (const call of context.calls) {
        if (slots <= 0) break;
        if (call.status !== 'queued') continue;
        slots -= 1;
        const { agentId } = call;
        const id = callActorId(agentId, 1);
        enqueue.assign(({ context: ctx }) => ({ calls: updateCall(ctx.calls, agentId, { status: 'running', attempts: 1, actorId: id }) }));
        enqueue.spawnChild('callAgent', { id, input: { agentId, message: context.message, attempt: 1 } });
        enqueue.raise({ type: 'troupe.orchestration.callTimeout', agentId, attempt: 1 }, { id: timeoutTimerId(agentId), delay: 'agentTimeout' });
      }
    }),
    /** Starts the next attempt of a call that waited out its retry delay. */
    startRetry: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'troupe.orchestration.retry') return;
      const { agentId, attempt } = event;
      const id = callActorId(agentId, attempt);
      enqueue.assign(({ context: ctx }) => ({ calls: updateCall(ctx.calls, agentId, { status: 'running', attempts: attempt, actorId: id }) }));
      enqueue.spawnChild('callAgent', { id, input: { agentId, message: context.message, attempt } });
      enqueue.raise({ type: 'troupe.orchestration.callTimeout', agentId, attempt }, { id: timeoutTimerId(agentId), delay: 'agentTimeout' });
    }),
    recordSuccess: enqueueActions(({ context, event, enqueue }) => {
      const call = runningCallFor(context, event);
      if (!call || !isDoneEvent(event)) return;
      enqueue.cancel(timeoutTimerId(call.agentId));
      enqueue.assign({
        calls: updateCall(context.calls, call.agentId, { status: 'succeeded', reply: event.output, error: undefined, finishedAt: context.now }),
      });
    }),
    /** Stops the child of an attempt that timed out (its AbortSignal fires). */
    stopTimedOutCall: enqueueActions(({ context, event, enqueue }) => {
      const call = runningCallFor(context, event);
      if (call?.actorId && event.type === 'troupe.orchestration.callTimeout') enqueue.stopChild(call.actorId);
    }),
    /** The current attempt failed (error or timeout) and retries are left: wait `retryDelay`, then retry. */
    scheduleRetry: enqueueActions(({ context, event, enqueue }) => {
      const call = runningCallFor(context, event);
      if (!call) return;
      const failure = failureOf(context, call, event);
      enqueue.cancel(timeoutTimerId(call.agentId));
      enqueue.assign({ calls: updateCall(context.calls, call.agentId, { status: 'waiting', error: failure }) });
      enqueue.raise(
        { type: 'troupe.orchestration.retry', agentId: call.agentId, attempt: call.attempts + 1 },
        { id: retryTimerId(call.agentId), delay: 'retryDelay' },
      );
    }),
    /** The current attempt failed (error or timeout) and no retries are left. */
    recordFailure: enqueueActions(({ context, event, enqueue }) => {
      const call = runningCallFor(context, event);
      if (!call) return;
      const failure = failureOf(context, call, event);
      enqueue.cancel(timeoutTimerId(call.agentId));
      enqueue.assign({ calls: updateCall(context.calls, call.agentId, { status: 'failed', error: failure, finishedAt: context.now }) });
    }),
    /** first_success: stop every other call in flight and mark it cancelled. */
    cancelOtherCalls: enqueueActions(({ context, enqueue }) => {
      let calls = context.calls;
      for (const call of context.calls) {
        if (call.status === 'succeeded' || call.status === 'failed' || call.status === 'cancelled') continue;
        if (call.status === 'running' && call.actorId) enqueue.stopChild(call.actorId);
        enqueue.cancel(timeoutTimerId(call.agentId));
        enqueue.cancel(retryTimerId(call.agentId));
        calls = updateCall(calls, call.agentId, { status: 'cancelled' });
      }
      enqueue.assign({ calls });
    }),
    recordNow: assign({
      now: ({ context, event }) =>
        'now' in event && typeof event.now === 'number' && Number.isFinite(event.now) ? Math.max(context.now, event.now) : context.now,
    }),
    /** After a restore: the running attempts re-run, so their timeouts restart; pending retries are re-armed. */
    rearmTimers: enqueueActions(({ context, enqueue }) => {
      for (const call of context.calls) {
        if (call.status === 'running') {
          enqueue.cancel(timeoutTimerId(call.agentId));
          enqueue.raise(
            { type: 'troupe.orchestration.callTimeout', agentId: call.agentId, attempt: call.attempts },
            { id: timeoutTimerId(call.agentId), delay: 'agentTimeout' },
          );
        } else if (call.status === 'waiting') {
          enqueue.cancel(retryTimerId(call.agentId));
          enqueue.raise(
            { type: 'troupe.orchestration.retry', agentId: call.agentId, attempt: call.attempts + 1 },
            { id: retryTimerId(call.agentId), delay: 'retryDelay' },
          );
        }
      }
    }),
    aggregateResults: assign({ result: ({ context }) => orchestrationOutputOf(context) }),
  },
});

function failureOf(context: OrchestrationContext, call: AgentCallRecord, event: OrchestrationEvent): { code: ErrorCode; message: string } {
  if (event.type === 'troupe.orchestration.callTimeout') {
    return { code: 'AGENT_TIMEOUT', message: `agent "${call.agentId}" did not answer within ${context.agentTimeoutMs} ms` };
  }
  if (isErrorEvent(event)) return toCallFailure(event.error, call.agentId);
  return { code: 'AGENT_ERROR', message: `agent "${call.agentId}" failed` };
}

export const orchestrationMachine = orchestrationSetup.createMachine({
  id: 'orchestration',
  initial: 'running',
  context: ({ input }) => orchestrationContextOf(input),
  on: {
    'troupe.orchestration.tick': { actions: 'recordNow' },
  },
  states: {
    running: {
      initial: 'dispatching',
      always: { guard: 'allCallsSettled', target: 'aggregating' },
      on: {
        'xstate.done.actor.*': { guard: 'isCurrentCall', actions: ['recordSuccess', 'startQueuedCalls'] },
        'xstate.error.actor.*': [
          { guard: 'currentCallCanRetry', actions: 'scheduleRetry' },
          { guard: 'isCurrentCall', actions: ['recordFailure', 'startQueuedCalls'] },
        ],
        'troupe.orchestration.callTimeout': [
          { guard: 'timedOutCallCanRetry', actions: ['stopTimedOutCall', 'scheduleRetry'] },
          { guard: 'isCurrentTimeout', actions: ['stopTimedOutCall', 'recordFailure', 'startQueuedCalls'] },
        ],
        'troupe.orchestration.retry': { guard: 'isAwaitingRetry', actions: 'startRetry' },
        'troupe.orchestration.restored': { actions: ['recordNow', 'rearmTimers'] },
      },
      states: {
        dispatching: {
          always: [
            { guard: 'isSequential', target: 'sequential' },
            { guard: 'isFirstSuccess', target: 'firstSuccess' },
            { target: 'parallel' },
          ],
        },
        parallel: {
          description: 'Every agent at once; collect all answers.',
          entry: 'startQueuedCalls',
        },
        sequential: {
          description: 'One agent after another, each with the original message.',
          entry: 'startQueuedCalls',
        },
        firstSuccess: {
          description: 'Every agent at once; the first answer wins and the others are stopped.',
          entry: 'startQueuedCalls',
          on: {
            'xstate.done.actor.*': {
              guard: 'isCurrentCall',
              target: '#orchestration.aggregating',
              actions: ['recordSuccess', 'cancelOtherCalls'],
            },
          },
        },
      },
    },
    aggregating: {
      entry: 'aggregateResults',
      always: { target: 'done' },
    },
    done: { type: 'final' },
  },
  output: ({ context }) => context.result ?? orchestrationOutputOf(context),
});

export type OrchestrationMachine = typeof orchestrationMachine;
export type OrchestrationSnapshot = SnapshotFrom<typeof orchestrationMachine>;
