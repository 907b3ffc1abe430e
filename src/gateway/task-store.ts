/**
 * The SDK's TaskStore over the mesh's thread store. A task is a thread (task id = thread id) and the
 * node keeps its history, status, owner and route log; `load` asks the node through TroupeClient.task,
 * which is owner-checked, so another user's task loads exactly like a missing one (undefined, and the
 * SDK answers "Task not found").
 *
 * The SDK also writes: its ResultManager loads, changes and saves the task on every event of a turn.
 * Those writes land in a bounded per-owner overlay held by this gateway, for what the node does not keep
 * (yet): the streamed chunks accumulated as artifacts and the gateway's own metadata (agentsUsed,
 * executionTimeMs, taskState). While a turn runs here the overlay is the task (one node round trip per
 * streamed chunk would cost more than the chunk); when the turn ends the node's stored task is read again
 * and the overlay only adds artifacts and metadata to it. Persisting artifacts with the thread needs the
 * node (see docs/gateway.md, "What the node keeps").
 */
import { TaskState as SdkTaskState, type Artifact as SdkArtifact, type ListTasksRequest, type ListTasksResponse, type Task as SdkTask } from '@a2a-js/sdk';
import type { ServerCallContext, TaskStore } from '@a2a-js/sdk/server';
import { META, TroupeError, isValidId } from '../protocol/index.js';
import { STATE, callerOf } from './caller.js';
import { fromSdkState, toSdkTask } from '../sdk/a2a-model.js';
import { toA2AError } from './errors.js';

export interface MeshTaskStoreOptions {
  /** Tasks whose overlay is kept (least recently used ones go first). Default 10,000. */
  maxTasks?: number;
  /** Bytes of streamed artifact parts kept per task; later chunks are counted, not kept. Default 512 KiB. */
  maxArtifactBytes?: number;
}

interface Overlay {
  task: SdkTask;
  /** Turns running on this gateway now: while > 0 the overlay is the task. */
  live: number;
  artifactBytes: number;
  /**
   * The node has stored the task (a turn of it ended there, or it was read from there). Once it has, the
   * overlay only adds to the node's task: when the node no longer has it (deleted, `troupe delete`; or aged
   * out of the bucket) the overlay goes too, and the task is not found.
   */
  onMesh?: boolean;
}

export class MeshTaskStore implements TaskStore {
  private readonly overlays = new Map<string, Overlay>();
  private readonly maxTasks: number;
  private readonly maxArtifactBytes: number;

  constructor(opts: MeshTaskStoreOptions = {}) {
    this.maxTasks = opts.maxTasks ?? 10_000;
    this.maxArtifactBytes = opts.maxArtifactBytes ?? 512 * 1024;
  }

  async load(taskId: string, context: ServerCallContext): Promise<SdkTask | undefined> {
    if (!isValidId('thread', taskId)) return undefined;
    const caller = callerOf(context);
    const key = caller.scope(taskId);
    const overlay = this.touch(key);
    if (overlay && overlay.live > 0) return structuredClone(overlay.task);
    let stored: SdkTask | undefined;
    try {
      stored = toSdkTask(await caller.client.task(taskId, caller.as));
    } catch (err) {
      if (!(err instanceof TroupeError && err.code === 'THREAD_NOT_FOUND')) throw toA2AError(err, { taskId });
    }
    if (stored && overlay) overlay.onMesh = true;
    if (stored) return overlay ? withOverlay(stored, overlay.task) : stored;
    if (overlay?.onMesh) {
      this.overlays.delete(key);
      return undefined;
    }
    if (overlay) return structuredClone(overlay.task);
    // A task the handler decided to start in this request, not on the mesh until its first message is.
    const planned = context.state.get(STATE.newTask) as SdkTask | undefined;
    return planned?.id === taskId ? structuredClone(planned) : undefined;
  }

  async save(task: SdkTask, context: ServerCallContext): Promise<void> {
    if (!isValidId('thread', task.id)) return;
    const caller = callerOf(context);
    const key = caller.scope(task.id);
    const overlay = this.touch(key) ?? { task, live: 0, artifactBytes: 0 };
    overlay.task = structuredClone(task);
    this.capArtifacts(overlay);
    this.overlays.set(key, overlay);
    this.evict();
  }

  /**
   * The caller's tasks, from the node's owner-checked listing (newest update first). The SDK has
   * validated pageSize, status and statusTimestampAfter, applies historyLength and drops artifacts unless
   * asked for.
   */
  async list(params: ListTasksRequest, context: ServerCallContext): Promise<ListTasksResponse> {
    const caller = callerOf(context);
    if (params.contextId && !isValidId('thread', params.contextId)) return { tasks: [], nextPageToken: '', pageSize: params.pageSize ?? 50, totalSize: 0 };
    try {
      const page = await caller.client.list({
        ...caller.as,
        ...(params.contextId ? { contextId: params.contextId } : {}),
        ...(params.status ? { state: fromSdkState(params.status) } : {}),
        ...(params.pageSize !== undefined ? { pageSize: params.pageSize } : {}),
        ...(params.pageToken ? { pageToken: params.pageToken } : {}),
        ...(params.statusTimestampAfter ? { updatedAfter: new Date(params.statusTimestampAfter).toISOString() } : {}),
      });
      return { tasks: page.tasks.map((t) => toSdkTask(t)), nextPageToken: page.nextPageToken, pageSize: page.pageSize, totalSize: page.totalSize };
    } catch (err) {
      throw toA2AError(err);
    }
  }

  /** A turn starts on this gateway: until `endTurn`, the overlay (starting as `task`) is the task. */
  beginTurn(context: ServerCallContext, task: SdkTask): void {
    const key = callerOf(context).scope(task.id);
    const overlay = this.touch(key) ?? { task, live: 0, artifactBytes: 0 };
    overlay.task = structuredClone(task);
    overlay.live++;
    this.overlays.set(key, overlay);
    this.evict();
  }

  /** The turn ended; `committed`: with its final answer committed on the node, so read the task from there again. */
  endTurn(context: ServerCallContext, taskId: string, committed = false): void {
    const overlay = this.overlays.get(callerOf(context).scope(taskId));
    if (overlay && overlay.live > 0) overlay.live--;
    if (overlay && committed) overlay.onMesh = true;
  }

  /** Tasks with an overlay now (for diagnostics and tests). */
  get size(): number {
    return this.overlays.size;
  }

  private touch(key: string): Overlay | undefined {
    const overlay = this.overlays.get(key);
    if (overlay) {
      // Re-insert: a Map iterates in insertion order, so the first key is the least recently used.
      this.overlays.delete(key);
      this.overlays.set(key, overlay);
    }
    return overlay;
  }

  private evict(): void {
    for (const [key, overlay] of this.overlays) {
      if (this.overlays.size <= this.maxTasks) return;
      if (overlay.live === 0) this.overlays.delete(key);
    }
  }

  /** Keeps streamed parts up to the byte cap; parts past it are dropped and the task says so. */
  private capArtifacts(overlay: Overlay): void {
    let bytes = 0;
    let truncated = false;
    const artifacts: SdkArtifact[] = [];
    for (const artifact of overlay.task.artifacts) {
      const parts = [];
      for (const part of artifact.parts) {
        const size = partBytes(part);
        if (bytes + size > this.maxArtifactBytes) {
          truncated = true;
          continue;
        }
        bytes += size;
        parts.push(part);
      }
      artifacts.push({ ...artifact, parts });
    }
    overlay.task.artifacts = artifacts;
    overlay.artifactBytes = bytes;
    if (truncated) overlay.task.metadata = { ...overlay.task.metadata, [META.artifactsTruncated]: true };
  }
}

function partBytes(part: SdkArtifact['parts'][number]): number {
  const content = part.content;
  if (!content) return 0;
  if (content.$case === 'raw') return content.value.length;
  if (content.$case === 'data') return JSON.stringify(content.value ?? null).length;
  return content.value.length;
}

/**
 * The node's task with what only this gateway knows: the accumulated artifacts (when the node keeps none)
 * and the gateway's metadata. History, status and Troupe's own metadata are the node's.
 */
function withOverlay(stored: SdkTask, overlay: SdkTask): SdkTask {
  const artifacts = stored.artifacts.length > 0 ? stored.artifacts : structuredClone(overlay.artifacts);
  const metadata = { ...structuredClone(overlay.metadata ?? {}), ...stored.metadata };
  // The node's state wins over one the gateway recorded (e.g. a turn the gateway stopped waiting for).
  return {
    ...stored,
    artifacts,
    metadata,
    status: stored.status ?? overlay.status ?? { state: SdkTaskState.TASK_STATE_UNSPECIFIED, message: undefined, timestamp: undefined },
  };
}
