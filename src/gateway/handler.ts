/**
 * The A2A request handler the SDK's transports call: the SDK's DefaultRequestHandler (task lifecycle,
 * history length, push notifications, stream ordering) with what Troupe adds in front of it:
 *
 * - every input is checked at the edge (ids by the one rule of protocol/ids.ts, message size, parts,
 *   metadata depth) and refused as invalid params before anything reaches the mesh;
 * - a message with a contextId and no taskId continues the context's open task (one open task per
 *   context and owner): task ids of new tasks derive from (tenant, user, contextId, generation), so the
 *   node's owner-checked store answers "which task is open in this context" without a gateway-side index;
 * - cancel goes to the node (owner-checked), which is where the task lives;
 * - resubscribe follows the thread's output on the mesh (TroupeClient.follow), so it works for a turn
 *   started by another gateway or the CLI, and after this gateway restarted.
 */
import { createHash, randomUUID } from 'node:crypto';
import {
  TaskState as SdkTaskState,
  type AgentCard,
  type CancelTaskRequest,
  type DeleteTaskPushNotificationConfigRequest,
  type GetExtendedAgentCardRequest,
  type GetTaskPushNotificationConfigRequest,
  type GetTaskRequest,
  type ListTaskPushNotificationConfigsRequest,
  type ListTaskPushNotificationConfigsResponse,
  type ListTasksRequest,
  type ListTasksResponse,
  type Message as SdkMessage,
  type SendMessageRequest,
  type StreamResponse,
  type SubscribeToTaskRequest,
  type Task as SdkTask,
  type TaskPushNotificationConfig,
} from '@a2a-js/sdk';
import { TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError } from '@a2a-js/sdk/errors';
import type { A2ARequestHandler, DefaultRequestHandler, ServerCallContext } from '@a2a-js/sdk/server';
import {
  CLIENT_ROUTING_URI,
  LIMITS,
  MessageSchema,
  TERMINAL_TASK_STATES,
  TroupeError,
  checkDepth,
  checkSize,
  describeZodError,
  idProblem,
  type ThreadEvent,
} from '../protocol/index.js';
import { STATE, callerOf, type GatewayCaller } from './caller.js';
import { fromSdkMessage, isTerminalSdkState, toSdkArtifact, toSdkStatus } from '../sdk/a2a-model.js';
import { invalidParams, taskNotFoundMessage, toA2AError } from './errors.js';
import type { MeshTaskStore } from './task-store.js';

/** Ended tasks one context may hold before a message without taskId is refused (bounds the lookup). */
const MAX_CONTEXT_GENERATIONS = 64;
const MAX_REFERENCE_TASKS = 16;
const MAX_PUSH_URL = 2048;

export interface TroupeRequestHandlerOptions {
  sdk: DefaultRequestHandler;
  store: MeshTaskStore;
  /** Longest a resubscribe stream follows a turn. */
  followTimeoutMs: number;
}

export class TroupeRequestHandler implements A2ARequestHandler {
  private readonly sdk: DefaultRequestHandler;
  /** Last generation seen per context (a hint that saves lookups; the node's store is the truth). */
  private readonly generations = new Map<string, number>();

  constructor(private readonly opts: TroupeRequestHandlerOptions) {
    this.sdk = opts.sdk;
  }

  getAgentCard(): Promise<AgentCard> {
    return this.sdk.getAgentCard();
  }

  getAuthenticatedExtendedAgentCard(params: GetExtendedAgentCardRequest, context: ServerCallContext): Promise<AgentCard> {
    return this.sdk.getAuthenticatedExtendedAgentCard(params, context);
  }

  async sendMessage(params: SendMessageRequest, context: ServerCallContext): Promise<SdkMessage | SdkTask> {
    try {
      const prepared = await this.prepare(params, context);
      activateExtensions(prepared, context);
      // Only a blocking send waits for the answer, so only its answer may be a Message (META.response).
      if (prepared.configuration?.returnImmediately !== true) context.state.set(STATE.messageAnswer, callerOf(context).answersWithMessage ? 'always' : true);
      return await this.sdk.sendMessage(prepared, context);
    } catch (err) {
      throw toA2AError(err, { taskId: params.message?.taskId });
    }
  }

  async *sendMessageStream(params: SendMessageRequest, context: ServerCallContext): AsyncGenerator<StreamResponse, void, undefined> {
    let prepared: SendMessageRequest;
    try {
      prepared = await this.prepare(params, context);
    } catch (err) {
      throw toA2AError(err, { taskId: params.message?.taskId });
    }
    activateExtensions(prepared, context);
    yield* this.sdk.sendMessageStream(prepared, context);
  }

  async getTask(params: GetTaskRequest, context: ServerCallContext): Promise<SdkTask> {
    checkTaskId(params.id);
    checkHistoryLength(params.historyLength);
    return this.sdk.getTask(params, context);
  }

  /** The caller's own tasks (MeshTaskStore.list over the node's owner-checked listing); historyLength as GetTask checks it. */
  async listTasks(params: ListTasksRequest, context: ServerCallContext): Promise<ListTasksResponse> {
    checkHistoryLength(params.historyLength);
    return this.sdk.listTasks(params, context);
  }

  /** Cancels on the node, as the caller: another user's task is "not found", an ended one "not cancelable". */
  async cancelTask(params: CancelTaskRequest, context: ServerCallContext): Promise<SdkTask> {
    const taskId = checkTaskId(params.id);
    const caller = callerOf(context);
    try {
      await caller.client.cancel(taskId, 'canceled by an A2A client', caller.as);
    } catch (err) {
      if (err instanceof TroupeError && err.code === 'THREAD_CLOSED') throw new TaskNotCancelableError({ message: `Task not cancelable: ${taskId} has ended` });
      if (err instanceof TroupeError && err.code === 'THREAD_NOT_FOUND') throw new TaskNotFoundError({ message: taskNotFoundMessage(taskId) });
      throw toA2AError(err, { taskId });
    }
    const task = await this.opts.store.load(taskId, context);
    if (!task) throw new TaskNotFoundError({ message: taskNotFoundMessage(taskId) });
    return task;
  }

  /**
   * A config without an id gets the task's id, and a get without one reads that config: what A2A 0.3's
   * reference servers do (a 0.3 client sets `{ url }` and gets with `{ id: taskId }`), for both versions.
   */
  createTaskPushNotificationConfig(params: TaskPushNotificationConfig, context: ServerCallContext): Promise<TaskPushNotificationConfig> {
    checkTaskId(params.taskId);
    checkPushUrl(params.url);
    if (params.id) checkConfigId(params.id);
    return this.sdk.createTaskPushNotificationConfig(params.id ? params : { ...params, id: params.taskId }, context);
  }

  /**
   * A 0.3 get that names a config the task does not have, of a task with exactly one config, reads that
   * one: 0.3's Python reference server answers every get with the task's first config, and 0.3 clients
   * (the 0.3 TCK among them) ask for `"default"` after setting a config without an id. 1.0 gets are exact.
   */
  async getTaskPushNotificationConfig(params: GetTaskPushNotificationConfigRequest, context: ServerCallContext): Promise<TaskPushNotificationConfig> {
    checkTaskId(params.taskId);
    if (params.id) checkConfigId(params.id);
    try {
      return await this.sdk.getTaskPushNotificationConfig(params.id ? params : { ...params, id: params.taskId }, context);
    } catch (err) {
      if (!params.id || !context.requestedVersion.startsWith('0.')) throw err;
      const { configs } = await this.sdk.listTaskPushNotificationConfigs({ tenant: params.tenant, taskId: params.taskId, pageSize: 2, pageToken: '' }, context);
      if (configs.length !== 1) throw err;
      return configs[0]!;
    }
  }

  listTaskPushNotificationConfigs(
    params: ListTaskPushNotificationConfigsRequest,
    context: ServerCallContext,
  ): Promise<ListTaskPushNotificationConfigsResponse> {
    checkTaskId(params.taskId);
    return this.sdk.listTaskPushNotificationConfigs(params, context);
  }

  deleteTaskPushNotificationConfig(params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext): Promise<void> {
    checkTaskId(params.taskId);
    checkConfigId(params.id);
    return this.sdk.deleteTaskPushNotificationConfig(params, context);
  }

  /**
   * The task, then every event of its thread as the mesh publishes it (turns started by anyone, through
   * any gateway) until the task reaches a terminal state, the client leaves, or the follow timeout
   * passes (then the stream ends without a terminal event; subscribe again to keep following).
   */
  async *resubscribe(params: SubscribeToTaskRequest, context: ServerCallContext): AsyncGenerator<StreamResponse, void, undefined> {
    const taskId = checkTaskId(params.id);
    const caller = callerOf(context);
    const events = new EventQueue<ThreadEvent>(1_000);
    // Subscribed before the task is read, so nothing published in between is missed.
    const sub = caller.client.follow(taskId, (event) => events.push(event));
    const stop = () => events.close();
    caller.signal.addEventListener('abort', stop, { once: true });
    const timer = setTimeout(stop, this.opts.followTimeoutMs);
    try {
      const task = await this.opts.store.load(taskId, context);
      if (!task) throw new TaskNotFoundError({ message: taskNotFoundMessage(taskId) });
      if (isTerminalSdkState(task.status?.state)) {
        throw new UnsupportedOperationError({ message: `Task ${taskId} has ended: there is nothing to subscribe to; read it with GetTask` });
      }
      yield { payload: { $case: 'task', value: task } };
      for await (const event of events) {
        if (event.kind === 'artifact-update') {
          yield {
            payload: {
              $case: 'artifactUpdate',
              value: {
                taskId,
                contextId: task.contextId,
                artifact: toSdkArtifact(event.artifact),
                append: event.append ?? true,
                lastChunk: event.lastChunk ?? false,
                metadata: event.metadata,
              },
            },
          };
          continue;
        }
        yield { payload: { $case: 'statusUpdate', value: { taskId, contextId: task.contextId, status: toSdkStatus(event.status), metadata: event.metadata } } };
        if (TERMINAL_TASK_STATES.includes(event.status.state)) return;
      }
    } finally {
      clearTimeout(timer);
      caller.signal.removeEventListener('abort', stop);
      sub.unsubscribe();
    }
  }

  // ---- the edge -----------------------------------------------------------------------------------

  /**
   * Checks a message at the edge and settles which task it goes to: the task it names, the open task of
   * its context, or a new one (whose id and context the SDK then uses).
   */
  private async prepare(params: SendMessageRequest, context: ServerCallContext): Promise<SendMessageRequest> {
    const message = params.message;
    if (!message) throw invalidParams('message is required');
    checkMessage(message);
    if (params.configuration?.historyLength !== undefined && params.configuration.historyLength < 0)
      throw invalidParams('configuration.historyLength must be 0 or more');
    const push = params.configuration?.taskPushNotificationConfig;
    if (push) checkPushUrl(push.url);
    if (message.taskId) {
      checkTaskId(message.taskId);
      context.state.set(STATE.taskState, 'resumed');
      return params;
    }
    const caller = callerOf(context);
    const contextId = message.contextId || randomUUID();
    const { taskId, fresh, previous } = await this.taskOfContext(caller, contextId);
    context.state.set(STATE.taskState, fresh ? 'fresh' : 'resumed');
    if (fresh) {
      const planned: SdkTask = {
        id: taskId,
        contextId,
        status: { state: SdkTaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: new Date().toISOString() },
        history: [],
        artifacts: [],
        metadata: {},
      };
      context.state.set(STATE.newTask, planned);
    }
    // A new task of a context whose last task ended names that task, as A2A's references do: it continues it.
    const referenceTaskIds =
      previous && !message.referenceTaskIds.includes(previous) && message.referenceTaskIds.length < MAX_REFERENCE_TASKS
        ? [...message.referenceTaskIds, previous]
        : message.referenceTaskIds;
    return { ...params, message: { ...message, taskId, contextId, referenceTaskIds } };
  }

  /** The open task of a context for this caller, or the id of the new one to start. */
  private async taskOfContext(caller: GatewayCaller, contextId: string): Promise<{ taskId: string; fresh: boolean; previous?: string }> {
    const key = `${caller.userName}\u0000${contextId}`;
    const first = this.generations.get(key) ?? 0;
    for (let generation = first; generation < MAX_CONTEXT_GENERATIONS; generation++) {
      const taskId = contextTaskId(caller, contextId, generation);
      let state: string;
      try {
        state = (await caller.client.task(taskId, { ...caller.as, historyLength: 0 })).status.state;
      } catch (err) {
        if (err instanceof TroupeError && err.code === 'THREAD_NOT_FOUND') {
          this.remember(key, generation);
          return { taskId, fresh: true, ...(generation > 0 ? { previous: contextTaskId(caller, contextId, generation - 1) } : {}) };
        }
        throw err;
      }
      if (!['completed', 'canceled', 'failed', 'rejected'].includes(state)) {
        this.remember(key, generation);
        return { taskId, fresh: false };
      }
    }
    throw new TroupeError('THREAD_CLOSED', `context ${contextId} has ended ${MAX_CONTEXT_GENERATIONS} tasks: start a new context (send without contextId)`);
  }

  private remember(key: string, generation: number): void {
    this.generations.delete(key);
    this.generations.set(key, generation);
    if (this.generations.size > 100_000) this.generations.delete(this.generations.keys().next().value as string);
  }
}

/**
 * The task id of a context's n-th task: `c-` and 32 characters of a SHA-256 over tenant, user, context
 * and generation. One user's context never names another user's thread, and the id fits the thread rule.
 */
function contextTaskId(caller: Pick<GatewayCaller, 'userName'>, contextId: string, generation: number): string {
  const digest = createHash('sha256').update(`${caller.userName}\n${contextId}\n${generation}`).digest('base64url');
  return `c-${digest.slice(0, 32)}`;
}

function checkTaskId(taskId: string | undefined): string {
  const problem = idProblem('thread', taskId);
  if (problem) throw invalidParams(`task id: ${problem.replace('thread id', 'the task id')}; use the id this gateway returned`);
  return taskId as string;
}

/** `historyLength`, where a request may give it: a whole number of 0 or more (-32602 otherwise). */
function checkHistoryLength(historyLength: number | undefined): void {
  if (historyLength !== undefined && (!Number.isInteger(historyLength) || historyLength < 0)) {
    throw invalidParams('historyLength must be a whole number of 0 or more');
  }
}

function checkConfigId(id: string | undefined): void {
  const problem = idProblem('message', id);
  if (problem) throw invalidParams(`push notification config id: ${problem.replace('message id', 'the config id')}`);
}

function checkPushUrl(url: string | undefined): void {
  if (!url || url.length > MAX_PUSH_URL) throw invalidParams(`a push notification url is required and at most ${MAX_PUSH_URL} characters`);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw invalidParams('the push notification url is not a URL');
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw invalidParams('the push notification url must be http or https');
}

/** The message as the mesh would take it: the same schema, caps and id rules the node applies. */
function checkMessage(message: SdkMessage): void {
  if (message.role !== 1) throw invalidParams('message.role: a client sends messages with role user (ROLE_USER / "user")');
  if (message.parts.length === 0) throw invalidParams('message.parts: a message needs at least one part');
  if (message.parts.some((p) => !p.content)) throw invalidParams('message.parts: every part needs text, raw bytes, a url or data');
  if (message.contextId) {
    const problem = idProblem('message', message.contextId);
    if (problem) throw invalidParams(`message.contextId: ${problem.replace('message id', 'the context id')}`);
  }
  if (message.referenceTaskIds.length > MAX_REFERENCE_TASKS) throw invalidParams(`message.referenceTaskIds: at most ${MAX_REFERENCE_TASKS} references`);
  for (const ref of message.referenceTaskIds) checkTaskId(ref);
  try {
    checkDepth(message.metadata, 'message.metadata');
    for (const part of message.parts) checkDepth(part.metadata, "a part's metadata");
    checkSize(JSON.stringify(message.metadata ?? {}).length, LIMITS.metadataBytes, 'message.metadata');
  } catch (err) {
    throw toA2AError(err);
  }
  const troupe = fromSdkMessage(message);
  const parsed = MessageSchema.safeParse(troupe);
  if (!parsed.success) throw invalidParams(`message: ${describeZodError(parsed.error)}`);
  try {
    checkSize(Buffer.byteLength(JSON.stringify(troupe)), LIMITS.userMessageBytes, 'the message');
  } catch (err) {
    throw toA2AError(err);
  }
}

/** A bounded queue an async iterator drains; `close` ends the iteration. Overflow drops the oldest event. */
class EventQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private wake?: () => void;
  private closed = false;

  constructor(private readonly cap: number) {}

  push(item: T): void {
    if (this.closed) return;
    this.items.push(item);
    if (this.items.length > this.cap) this.items.shift();
    this.wake?.();
  }

  close(): void {
    this.closed = true;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      const item = this.items.shift();
      if (item !== undefined) {
        yield item;
        continue;
      }
      if (this.closed) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }
}

/**
 * The client-routing extension is active on a send that asks for it (the `A2A-Extensions` request header)
 * or uses it (the message declares it, or carries its metadata slot: `{ recipient }` addresses an agent):
 * the gateway honours it, and its reply says so in the `A2A-Extensions` response header, which the SDK
 * writes from the context's activated extensions (A2A: extensions are activated per request).
 */
function activateExtensions(params: SendMessageRequest, context: ServerCallContext): void {
  const message = params.message;
  const used = message !== undefined && (message.extensions.includes(CLIENT_ROUTING_URI) || message.metadata?.[CLIENT_ROUTING_URI] !== undefined);
  if (used || context.requestedExtensions?.includes(CLIENT_ROUTING_URI)) context.addActivatedExtension(CLIENT_ROUTING_URI);
}
