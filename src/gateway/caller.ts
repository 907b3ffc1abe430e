/**
 * The caller of one request, as the SDK carries it: the `User` its transports build for every request
 * (`ServerCallContext.user`). It holds what the gateway's stores and executor need and the SDK does not
 * know: the tenant's TroupeClient, the end user (threads belong to `<principal>/<user>`) and a signal that
 * fires when the HTTP client goes away. The SDK's own stores (push-notification configs, event buses)
 * scope by `userName`, which is unique per tenant and user.
 */
import type { ServerCallContext, User } from '@a2a-js/sdk/server';
import type { TroupeClient } from '../sdk/client.js';
import { TroupeError } from '../protocol/index.js';

export class GatewayCaller implements User {
  /**
   * The client wants a blocking send answered with the agent's Message rather than the Task (the seed's
   * orchestrator path, src/gateway/orchestrator-api.ts).
   */
  answersWithMessage = false;

  constructor(
    readonly tenant: string,
    readonly user: string | undefined,
    readonly client: TroupeClient,
    /** Aborted when the HTTP request's connection closes (a streaming client left). */
    readonly signal: AbortSignal,
  ) {}

  get isAuthenticated(): boolean {
    return true;
  }

  /** `<tenant>/<user>`, or `<tenant>` for the principal's own threads: the SDK scopes its stores by it. */
  get userName(): string {
    return this.user === undefined ? this.tenant : `${this.tenant}/${this.user}`;
  }

  /** Options for TroupeClient calls made for this caller. */
  get as(): { user?: string } {
    return this.user === undefined ? {} : { user: this.user };
  }

  /** A key for per-caller gateway state about one task (tasks of different owners never share one). */
  scope(taskId: string): string {
    return `${this.userName}\u0000${taskId}`;
  }
}

export function callerOf(context: ServerCallContext): GatewayCaller {
  const user = context.user;
  if (user instanceof GatewayCaller) return user;
  // Only reachable if a route were mounted without the gateway's authentication in front of it.
  throw new TroupeError('TENANT_FORBIDDEN', 'the request reached the A2A handler without an authenticated caller');
}

/** Keys of what one request carries in `ServerCallContext.state` from the handler to the store and executor. */
export const STATE = {
  /** The Task the handler decided to start for a message without taskId (its id derives from the context). */
  newTask: 'troupe/newTask',
  /** `fresh` (a new task) or `resumed` (a continued one), for the final answer's `taskState`. */
  taskState: 'troupe/taskState',
  /**
   * Set for a blocking, non-streaming send: `true`, its answer may be a bare Message (when the agent asks
   * for it, META.response); `always`, an answer is a Message (the caller asked for it).
   */
  messageAnswer: 'troupe/messageAnswer',
} as const;
