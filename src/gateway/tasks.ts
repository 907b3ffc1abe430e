/**
 * The A2A methods on top of a tenant's TroupeClient: a task is a thread (task id = thread id), a
 * message/send is one turn, the stored Task comes from the thread record. No HTTP here.
 */
import { randomUUID } from 'node:crypto';
import type { TroupeClient } from '../sdk/client.js';
import type { Logger } from '../observability/logger.js';
import {
  TERMINAL_TASK_STATES,

  TroupeError,
  type Message,
  type Task,
  type TaskStatusUpdateEvent,
  type ThreadEvent,
} from '../protocol/index.js';
import { RPC_CODES, RpcError, type MessageSendParams, type TaskIdParams, type TaskQueryParams } from './rpc.js';

/** What a method call runs with: the caller's tenant and the clients of the others (to tell "forbidden" from "missing"). */
export interface CallContext {
  tenant: string;
  client: TroupeClient;
  otherTenants: TroupeClient[];
  log: Logger;
  turnTimeoutMs: number;
}


/** A2A `message/send`: one turn; resolves with the Task once the turn's final status is out. */
export async function sendMessage(ctx: CallContext, params: MessageSendParams): Promise<Task> {
  const { threadId, message } = await openTurn(ctx, params);
  const result = await ctx.client.send(message, { threadId, timeoutMs: ctx.turnTimeoutMs });
  return taskAfterTurn(ctx, threadId, result.final, params.configuration?.historyLength);
}

/**
 * A2A `message/stream`: every event of the turn as it comes (route steps, streamed chunks), then its
 * final status. Finals that answer other messages in flight on the same thread are not this turn's end.
 */
export async function streamMessage(ctx: CallContext, params: MessageSendParams, emit: (event: ThreadEvent) => void): Promise<void> {
  const { threadId, message } = await openTurn(ctx, params);
  const result = await ctx.client.send(message, {
    threadId,
    timeoutMs: ctx.turnTimeoutMs,
    onEvent: (event) => {
      if (!(event.kind === 'status-update' && event.final)) emit(event);
    },
  });
  emit(result.final);
}

/** A2A `tasks/get`: the stored Task. */
export async function getTask(ctx: CallContext, params: TaskQueryParams): Promise<Task> {
  return withHistory(await storedTask(ctx, params.id), params.historyLength);
}

/** A2A `tasks/cancel`: cancels the thread and returns its Task (state `canceled`). */
export async function cancelTask(ctx: CallContext, params: TaskIdParams): Promise<Task> {
  try {
    await ctx.client.cancel(params.id, 'canceled by an A2A client');
  } catch (err) {
    if (err instanceof TroupeError && err.code === 'THREAD_CLOSED') {
      throw new TroupeError('THREAD_CLOSED', `Task cannot be canceled: ${err.message}`);
    }
    if (err instanceof TroupeError && err.code === 'THREAD_NOT_FOUND') {
      throw new TroupeError('THREAD_NOT_FOUND', `Task not found: no task ${params.id} here; start one with message/send without taskId`);
    }
    throw err;
  }
  return storedTask(ctx, params.id);
}

/** The thread a message goes to: the task it continues (which must be this tenant's and open), or a new one. */
async function openTurn(ctx: CallContext, params: MessageSendParams): Promise<{ threadId: string; message: Message }> {
  if (params.configuration?.pushNotificationConfig !== undefined) {
    throw new RpcError(RPC_CODES.PUSH_NOT_SUPPORTED, 'push notifications are not supported: follow the task with message/stream or poll tasks/get');
  }
  const taskId = params.message.taskId;
  if (taskId) {
    const task = await storedTask(ctx, taskId);
    if (TERMINAL_TASK_STATES.includes(task.status.state)) {
      throw new TroupeError('THREAD_CLOSED', `task ${taskId} is ${task.status.state}: send the message without taskId to start a new task`);
    }
  }
  return { threadId: taskId ?? `t-${randomUUID()}`, message: params.message };
}

/** The stored Task with this turn's final status (the record may already hold a later turn's). */
async function taskAfterTurn(ctx: CallContext, threadId: string, final: TaskStatusUpdateEvent, historyLength?: number): Promise<Task> {
  const stored = await storedTask(ctx, threadId).catch((err: unknown) => {
    ctx.log.warn({ thread: threadId, err: (err as Error).message }, 'answering without history: the stored task could not be read');
    return undefined;
  });
  const task: Task = stored ?? { kind: 'task', id: threadId, contextId: final.contextId, status: final.status };
  return withHistory({ ...task, status: final.status, ...(final.metadata ? { metadata: { ...task.metadata, ...final.metadata } } : {}) }, historyLength);
}

async function storedTask(ctx: CallContext, taskId: string): Promise<Task> {
  try {
    return await ctx.client.task(taskId);
  } catch (err) {
    // Another tenant's task and no task at all get the same answer: a caller cannot probe which ids exist.
    if (err instanceof TroupeError && err.code === 'THREAD_NOT_FOUND') {
      throw new TroupeError('THREAD_NOT_FOUND', `Task not found: no task ${taskId} here; start one with message/send without taskId`);
    }
    throw err;
  }
}

function withHistory(task: Task, historyLength?: number): Task {
  if (historyLength === undefined || !task.history) return task;
  return { ...task, history: historyLength === 0 ? [] : task.history.slice(-historyLength) };
}
