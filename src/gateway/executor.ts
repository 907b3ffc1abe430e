/**
 * The SDK's AgentExecutor for the whole mesh: one `execute` is one turn of a thread, run through the
 * caller's TroupeClient. It publishes the Task first (so a streaming client learns the task id at once),
 * then `working`, then every event of the turn as it comes from the thread's output (route steps as
 * status updates, streamed chunks as artifact updates that accumulate into the Task's artifacts) and
 * last the turn's final status, which carries `agentsUsed`, `executionTimeMs` and `taskState`.
 */
import { AgentEvent, type AgentExecutor, type ExecutionEventBus, type RequestContext } from '@a2a-js/sdk/server';
import { TaskState as SdkTaskState, type Task as SdkTask, type TaskStatus as SdkTaskStatus } from '@a2a-js/sdk';
import type { Logger } from '../observability/logger.js';
import {
  META,
  RESULT_META,
  TERMINAL_TASK_STATES,
  isRefusal,
  TroupeError,
  type Message,
  type RouteStep,
  type TaskStatusUpdateEvent,
  type ThreadEvent,
} from '../protocol/index.js';
import { STATE, callerOf, type GatewayCaller } from './caller.js';
import { fromSdkMessage, toSdkArtifact, toSdkMessage, toSdkStatus } from '../sdk/a2a-model.js';
import type { MeshTaskStore } from './task-store.js';
import { metrics, outcomeLabel } from '../observability/metrics.js';
import { SpanKind, endSpan, startSpan, tracing, withSpan, type Span } from '../observability/tracing.js';

/** Turns that ended with the agent's answer to the user (done, or the conversation waits for the next message). */
const ANSWERED = new Set<SdkTaskState | undefined>([SdkTaskState.TASK_STATE_COMPLETED, SdkTaskState.TASK_STATE_INPUT_REQUIRED]);

export interface MeshExecutorOptions {
  store: MeshTaskStore;
  log: Logger;
  /** How long a turn may take before the gateway stops waiting for it. */
  turnTimeoutMs: number;
  /** Wall clock for executionTimeMs (the gateway is an I/O edge; tests may pin it). */
  now?: () => number;
}

export class MeshExecutor implements AgentExecutor {
  /** Who runs what: `cancelTask` gets only the bus, and must cancel as the caller who started the turn. */
  private readonly running = new WeakMap<ExecutionEventBus, { caller: GatewayCaller; taskId: string }>();
  private readonly now: () => number;

  constructor(private readonly opts: MeshExecutorOptions) {
    this.now = opts.now ?? Date.now;
  }

  execute = async (rc: RequestContext, bus: ExecutionEventBus): Promise<void> => {
    const caller = callerOf(rc.context);
    const started = this.now();
    const taskId = rc.taskId;
    const contextId = rc.contextId;
    const taskState = (rc.context.state.get(STATE.taskState) as 'fresh' | 'resumed' | undefined) ?? (rc.task ? 'resumed' : 'fresh');
    const userMessage: Message = { ...fromSdkMessage(rc.userMessage), taskId, contextId };
    const log = this.opts.log.child({ tenant: caller.tenant, thread: taskId });
    this.running.set(bus, { caller, taskId });

    const task: SdkTask = rc.task
      ? { ...rc.task, status: rc.task.status ?? status(SdkTaskState.TASK_STATE_SUBMITTED) }
      : { id: taskId, contextId, status: status(SdkTaskState.TASK_STATE_SUBMITTED), history: [rc.userMessage], artifacts: [], metadata: {} };
    this.opts.store.beginTurn(rc.context, task);
    let turnOpen = true;
    const endTurn = (committed = false) => {
      if (turnOpen) this.opts.store.endTurn(rc.context, taskId, committed);
      turnOpen = false;
    };
    // The gateway request starts the trace: the client's send and everything on the mesh are its children.
    const span: Span | undefined = tracing.on
      ? startSpan('troupe.gateway.turn', {
          kind: SpanKind.SERVER,
          attributes: { 'troupe.tenant': caller.tenant, 'troupe.thread': taskId, 'troupe.message': userMessage.messageId },
        })
      : undefined;
    let outcome = 'error';
    let failure: TroupeError | undefined;
    try {
      bus.publish(AgentEvent.task(task));
      bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: status(SdkTaskState.TASK_STATE_WORKING), metadata: undefined }));
      const send = () =>
        caller.client.send(userMessage, {
          threadId: taskId,
          ...caller.as,
          timeoutMs: this.opts.turnTimeoutMs,
          onEvent: (event) => this.relay(event, bus, taskId, contextId),
        });
      const result = await (span ? withSpan(span, send) : send());
      outcome = result.error ? result.error.code : result.final.status.state;
      const meta = {
        [RESULT_META.agentsUsed]: agentsUsed(result.final, result.route),
        [RESULT_META.executionTimeMs]: Math.max(0, this.now() - started),
        [RESULT_META.taskState]: TERMINAL_TASK_STATES.includes(result.final.status.state) ? result.final.status.state : taskState,
      };
      // Seed 003's controller log: routing confidence, agents used and the request's duration, per turn.
      const confidence = result.route.find((step) => step.confidence !== undefined)?.confidence;
      log.info({ state: result.final.status.state, ...meta, ...(confidence !== undefined ? { confidence } : {}) }, 'turn answered');
      endTurn(result.error === undefined);
      const update = finalUpdate(result.final, meta);
      const answer = update.status?.message;
      const asMessage = rc.context.state.get(STATE.messageAnswer);
      if (answer && ANSWERED.has(update.status?.state) && (asMessage === 'always' || (asMessage === true && answer.metadata?.[META.response] === 'message'))) {
        // The agent answered with a message that needs no task: a blocking send returns it as it is (the
        // thread stays, and the next message of the same contextId continues it).
        bus.publish(AgentEvent.message(answer));
      } else bus.publish(AgentEvent.statusUpdate(update));
    } catch (err) {
      const error = TroupeError.from(err, 'WORKFLOW_ERROR');
      outcome = error.code;
      failure = error;
      log.warn({ code: error.code }, `turn ended with an error: ${error.message}`);
      endTurn();
      // A refusal of the message itself: the task did not run, so the turn ends `rejected`, not `failed`.
      const state = isRefusal(error.code) ? SdkTaskState.TASK_STATE_REJECTED : SdkTaskState.TASK_STATE_FAILED;
      const meta = {
        [META.error]: error.toBody(),
        [RESULT_META.agentsUsed]: [],
        [RESULT_META.executionTimeMs]: Math.max(0, this.now() - started),
        [RESULT_META.taskState]: state === SdkTaskState.TASK_STATE_REJECTED ? 'rejected' : 'failed',
      };
      const message = toSdkMessage({
        kind: 'message',
        role: 'agent',
        messageId: `${userMessage.messageId}:${state === SdkTaskState.TASK_STATE_REJECTED ? 'rejected' : 'failed'}`.slice(0, 256),
        taskId,
        contextId,
        parts: [{ kind: 'text', text: `${error.code}: ${error.message}` }],
        metadata: { [META.agent]: 'troupe', [META.inReplyTo]: userMessage.messageId, ...meta },
      });
      bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state, message, timestamp: new Date(this.now()).toISOString() }, metadata: meta }));
    } finally {
      endTurn();
      this.running.delete(bus);
      metrics.gatewayTurns.inc({ outcome: outcomeLabel(outcome) });
      metrics.gatewayTurnSeconds.observe(Math.max(0, this.now() - started) / 1000);
      if (span) endSpan(span, failure);
    }
  };

  /** Cancels the thread of the turn running on `bus`, as the caller who started it. */
  cancelTask = async (taskId: string, bus: ExecutionEventBus): Promise<void> => {
    const run = this.running.get(bus);
    if (!run || run.taskId !== taskId) return;
    await run.caller.client.cancel(taskId, 'canceled by an A2A client', run.caller.as);
  };

  private relay(event: ThreadEvent, bus: ExecutionEventBus, taskId: string, contextId: string): void {
    if (event.kind === 'artifact-update') {
      bus.publish(
        AgentEvent.artifactUpdate({
          taskId,
          contextId,
          artifact: toSdkArtifact(event.artifact),
          append: event.append ?? true,
          lastChunk: event.lastChunk ?? false,
          metadata: event.metadata,
        }),
      );
      return;
    }
    // The final status is published by `execute` once the turn is over (with the result metadata).
    if (event.final) return;
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: toSdkStatus({ ...event.status, state: 'working' }), metadata: event.metadata }));
  }
}

function status(state: SdkTaskState): SdkTaskStatus {
  return { state, message: undefined, timestamp: new Date().toISOString() };
}

/** The agents that answered in the turn: a fan-out's own list, else every agent the route reached. */
function agentsUsed(final: TaskStatusUpdateEvent, route: RouteStep[]): string[] {
  const fromFanOut = final.status.message?.metadata?.[RESULT_META.agentsUsed];
  if (Array.isArray(fromFanOut) && fromFanOut.every((a) => typeof a === 'string')) return fromFanOut as string[];
  const agents = new Set(route.map((step) => step.to).filter((to) => to !== 'user'));
  const writer = final.status.message?.metadata?.[META.agent];
  if (typeof writer === 'string' && writer !== 'troupe') agents.add(writer);
  return [...agents];
}

function finalUpdate(final: TaskStatusUpdateEvent, meta: Record<string, unknown>) {
  const message = final.status.message ? { ...final.status.message, metadata: { ...final.status.message.metadata, ...meta } } : undefined;
  return {
    taskId: final.taskId,
    contextId: final.contextId,
    status: toSdkStatus({ ...final.status, ...(message ? { message } : {}) }),
    metadata: { ...final.metadata, ...meta },
  };
}
