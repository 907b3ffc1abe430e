/**
 * The chat's A2A client: JSON-RPC 2.0 to the studio's `/a2a` (passed through to the mesh's gateway):
 * `message/stream` read as server-sent events, `tasks/get`, `tasks/cancel`; a tool approval's decision.
 */
import { CLIENT_ROUTING_URI, META, type A2AMessage, type StreamEvent, type Task } from './types.js';

let nextId = 1;

export class A2AError extends Error {
  constructor(
    message: string,
    readonly code?: number,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

async function rpc<T>(method: string, params: unknown): Promise<T> {
  const res = await fetch('/a2a', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params }),
  });
  const body = (await res.json()) as { result?: T; error?: { code: number; message: string; data?: unknown } };
  if (body.error) throw new A2AError(body.error.message, body.error.code, body.error.data);
  if (!res.ok) throw new A2AError(`HTTP ${res.status}`);
  return body.result as T;
}

export function userMessage(text: string, opts: { taskId?: string; to?: string }): A2AMessage {
  return {
    kind: 'message',
    role: 'user',
    messageId: crypto.randomUUID(),
    parts: [{ kind: 'text', text }],
    ...(opts.taskId ? { taskId: opts.taskId } : {}),
    ...(opts.to ? { metadata: { [CLIENT_ROUTING_URI]: { recipient: opts.to } } } : {}),
  };
}

/**
 * A person's decision on the tool calls an agent waits on (protocol/approval.ts): a `troupe/approval`
 * data part, addressed to that agent.
 */
export function approvalMessage(decision: 'approve' | 'deny', agent: string, taskId: string): A2AMessage {
  return {
    kind: 'message',
    role: 'user',
    messageId: crypto.randomUUID(),
    parts: [{ kind: 'data', data: { [META.approval]: { decision } } }],
    taskId,
    metadata: { [CLIENT_ROUTING_URI]: { recipient: agent } },
  };
}

/** Sends a message and calls `onEvent` for each streamed event until the turn's final status. */
export async function streamMessage(message: A2AMessage, onEvent: (event: StreamEvent) => void, signal?: AbortSignal): Promise<void> {
  const res = await fetch('/a2a', {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method: 'message/stream', params: { message } }),
    ...(signal ? { signal } : {}),
  });
  const type = res.headers.get('content-type') ?? '';
  if (!type.includes('text/event-stream')) {
    const body = (await res.json().catch(() => ({}))) as { error?: { code: number; message: string; data?: unknown } };
    throw new A2AError(body.error?.message ?? `HTTP ${res.status}`, body.error?.code, body.error?.data);
  }
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).trimStart())
        .join('\n');
      if (!data) continue;
      const msg = JSON.parse(data) as { result?: StreamEvent; error?: { code: number; message: string; data?: unknown } };
      if (msg.error) throw new A2AError(msg.error.message, msg.error.code, msg.error.data);
      if (msg.result) onEvent(msg.result);
    }
  }
}

export const getTask = (id: string) => rpc<Task>('tasks/get', { id });
export const cancelTask = (id: string) => rpc<Task>('tasks/cancel', { id });
