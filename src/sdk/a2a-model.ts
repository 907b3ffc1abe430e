/**
 * Troupe's wire speaks A2A in its v0.3 JSON shape (`kind`, `parts[].kind`, state strings: src/protocol/a2a.ts);
 * `@a2a-js/sdk` 1.x works on the v1.0 model (protobuf-style objects: `Role`/`TaskState` enums, parts with a
 * `content.$case`). The SDK translates either model to the wire version a client asked for; this module is
 * the one place where Troupe's shapes and the SDK's meet, in both directions. Pure functions, no I/O.
 */
import {
  Role,
  TaskState as SdkTaskState,
  type Artifact as SdkArtifact,
  type Message as SdkMessage,
  type Part as SdkPart,
  type Task as SdkTask,
  type TaskStatus as SdkTaskStatus,
} from '@a2a-js/sdk';
import type { Artifact, Message, Part, Task, TaskState, TaskStatus } from '../protocol/index.js';

const STATE_TO_SDK: Record<TaskState, SdkTaskState> = {
  submitted: SdkTaskState.TASK_STATE_SUBMITTED,
  working: SdkTaskState.TASK_STATE_WORKING,
  'input-required': SdkTaskState.TASK_STATE_INPUT_REQUIRED,
  completed: SdkTaskState.TASK_STATE_COMPLETED,
  canceled: SdkTaskState.TASK_STATE_CANCELED,
  failed: SdkTaskState.TASK_STATE_FAILED,
  rejected: SdkTaskState.TASK_STATE_REJECTED,
  'auth-required': SdkTaskState.TASK_STATE_AUTH_REQUIRED,
  unknown: SdkTaskState.TASK_STATE_UNSPECIFIED,
};

const SDK_TO_STATE = new Map<SdkTaskState, TaskState>(Object.entries(STATE_TO_SDK).map(([state, sdk]) => [sdk, state as TaskState]));

function toSdkState(state: TaskState): SdkTaskState {
  return STATE_TO_SDK[state];
}

export function fromSdkState(state: SdkTaskState | undefined): TaskState {
  return (state !== undefined && SDK_TO_STATE.get(state)) || 'unknown';
}

/** States after which a task takes no more messages (A2A's terminal states). */
export function isTerminalSdkState(state: SdkTaskState | undefined): boolean {
  return (
    state === SdkTaskState.TASK_STATE_COMPLETED ||
    state === SdkTaskState.TASK_STATE_CANCELED ||
    state === SdkTaskState.TASK_STATE_FAILED ||
    state === SdkTaskState.TASK_STATE_REJECTED
  );
}

function toSdkPart(part: Part): SdkPart {
  const metadata = part.metadata;
  switch (part.kind) {
    case 'text':
      return { content: { $case: 'text', value: part.text }, metadata, filename: '', mediaType: 'text/plain' };
    case 'data':
      return { content: { $case: 'data', value: part.data }, metadata, filename: '', mediaType: 'application/json' };
    case 'file': {
      const file = part.file;
      const common = { metadata, filename: file.name ?? '', mediaType: file.mimeType ?? '' };
      return 'bytes' in file
        ? { content: { $case: 'raw', value: Buffer.from(file.bytes, 'base64') }, ...common }
        : { content: { $case: 'url', value: file.uri }, ...common };
    }
  }
}

/** A v1.0 part as Troupe's: raw bytes become base64, a non-object data value is wrapped as `{ value }`. */
export function fromSdkPart(part: SdkPart): Part {
  const metadata = part.metadata && Object.keys(part.metadata).length > 0 ? { metadata: part.metadata as Record<string, unknown> } : {};
  const named = { ...(part.filename ? { name: part.filename } : {}), ...(part.mediaType ? { mimeType: part.mediaType } : {}) };
  const content = part.content;
  switch (content?.$case) {
    case 'text':
      return { kind: 'text', text: content.value, ...metadata };
    case 'raw':
      return { kind: 'file', file: { bytes: Buffer.from(content.value).toString('base64'), ...named }, ...metadata };
    case 'url':
      return { kind: 'file', file: { uri: content.value, ...named }, ...metadata };
    case 'data': {
      const value: unknown = content.value;
      const data = value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : { value };
      return { kind: 'data', data, ...metadata };
    }
    default:
      // A part with no content: an empty text part keeps the message well-formed; the edge refuses it first.
      return { kind: 'text', text: '', ...metadata };
  }
}

export function toSdkMessage(message: Message): SdkMessage {
  return {
    messageId: message.messageId,
    contextId: message.contextId ?? '',
    taskId: message.taskId ?? '',
    role: message.role === 'user' ? Role.ROLE_USER : Role.ROLE_AGENT,
    parts: message.parts.map(toSdkPart),
    metadata: message.metadata,
    extensions: message.extensions ?? [],
    referenceTaskIds: message.referenceTaskIds ?? [],
  };
}

export function fromSdkMessage(message: SdkMessage): Message {
  return {
    kind: 'message',
    role: message.role === Role.ROLE_AGENT ? 'agent' : 'user',
    messageId: message.messageId,
    parts: message.parts.map(fromSdkPart),
    ...(message.contextId ? { contextId: message.contextId } : {}),
    ...(message.taskId ? { taskId: message.taskId } : {}),
    ...(message.referenceTaskIds.length ? { referenceTaskIds: message.referenceTaskIds } : {}),
    ...(message.extensions.length ? { extensions: message.extensions } : {}),
    ...(message.metadata && Object.keys(message.metadata).length ? { metadata: message.metadata as Record<string, unknown> } : {}),
  };
}

export function toSdkStatus(status: TaskStatus): SdkTaskStatus {
  return { state: toSdkState(status.state), message: status.message ? toSdkMessage(status.message) : undefined, timestamp: status.timestamp };
}

export function toSdkArtifact(artifact: Artifact): SdkArtifact {
  return {
    artifactId: artifact.artifactId,
    name: artifact.name ?? '',
    description: artifact.description ?? '',
    parts: artifact.parts.map(toSdkPart),
    metadata: artifact.metadata,
    extensions: artifact.extensions ?? [],
  };
}

export function toSdkTask(task: Task): SdkTask {
  return {
    id: task.id,
    contextId: task.contextId,
    status: toSdkStatus(task.status),
    artifacts: (task.artifacts ?? []).map(toSdkArtifact),
    history: (task.history ?? []).map(toSdkMessage),
    metadata: task.metadata,
  };
}
