/**
 * What the app reads from the studio server: inspection records (the wire types of
 * protocol/inspection.ts, imported as types only, so no schema code reaches the browser) and A2A shapes.
 */
import type { InspectionActorRecord, InspectionRecord, InspectionSnapshotRecord } from '../../protocol/inspection.js';
import { META, type RouteStep } from '../../protocol/metadata.js';

export type { InspectionActorRecord, InspectionRecord, InspectionSnapshotRecord, RouteStep };
export { META };

interface Part {
  kind: string;
  text?: string;
  data?: Record<string, unknown>;
}

export interface A2AMessage {
  kind: 'message';
  role: 'user' | 'agent';
  messageId: string;
  parts: Part[];
  taskId?: string;
  contextId?: string;
  metadata?: Record<string, unknown>;
}

interface TaskStatus {
  state: string;
  message?: A2AMessage;
  timestamp?: string;
}

export interface Task {
  kind: 'task';
  id: string;
  contextId: string;
  status: TaskStatus;
  history?: A2AMessage[];
  metadata?: Record<string, unknown>;
}

export type StreamEvent =
  | { kind: 'status-update'; taskId: string; contextId: string; status: TaskStatus; final: boolean; metadata?: Record<string, unknown> }
  | {
      kind: 'artifact-update';
      taskId: string;
      contextId: string;
      artifact: { artifactId: string; parts: Part[]; metadata?: Record<string, unknown> };
      append?: boolean;
    }
  | Task;

/** protocol/routing.ts has it too; that module brings zod, which the browser does not need. */
export const CLIENT_ROUTING_URI = 'https://ranch.woi.dev/extensions/client-routing/v1';
