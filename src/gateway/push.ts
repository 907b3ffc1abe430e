/**
 * Push notifications: every event of a task with push configs goes to each config's URL by HTTP POST,
 * in the body the config's protocol version expects (the SDK's v1.0 and v0.3 serializers). The SDK's own
 * sender tries once; this one retries a failed delivery (network error, 408, 429, 5xx) with a growing
 * delay, keeps one task's notifications in order, follows no redirects, and never logs credentials.
 */
import { V1PushNotificationSerializer, type PushNotificationSender, type PushNotificationStore, type ServerCallContext } from '@a2a-js/sdk/server';
import { V03PushNotificationSerializer } from '@a2a-js/sdk/compat/v0_3/server';
import type { StreamResponse, Task as SdkTask, TaskPushNotificationConfig } from '@a2a-js/sdk';
import type { Logger } from '../observability/logger.js';

export interface PushDeliveryOptions {
  /** Tries per notification and URL. Default 4. */
  attempts?: number;
  /** Delay before the first retry; it doubles each time. Default 200 ms. */
  retryDelayMs?: number;
  /** Per-attempt timeout. Default 5 s. */
  timeoutMs?: number;
}

const TOKEN_HEADER = 'X-A2A-Notification-Token';

export class RetryingPushSender implements PushNotificationSender {
  private readonly serializers = { '1.0': new V1PushNotificationSerializer(), '0.3': new V03PushNotificationSerializer() };
  /** Per task, the delivery in progress: the next one waits for it, so a receiver sees events in order. */
  private readonly chains = new Map<string, Promise<void>>();
  private readonly attempts: number;
  private readonly retryDelayMs: number;
  private readonly timeoutMs: number;

  constructor(
    private readonly store: PushNotificationStore,
    private readonly log: Logger,
    opts: PushDeliveryOptions = {},
  ) {
    this.attempts = Math.max(1, opts.attempts ?? 4);
    this.retryDelayMs = opts.retryDelayMs ?? 200;
    this.timeoutMs = opts.timeoutMs ?? 5_000;
  }

  async send(response: StreamResponse, context: ServerCallContext, task?: SdkTask): Promise<void> {
    const payload = response.payload;
    if (!payload) return;
    const taskId = payload.$case === 'task' ? payload.value.id : payload.value.taskId;
    if (!taskId) return;
    const configs = this.store.loadWithMetadata
      ? await this.store.loadWithMetadata(taskId, context)
      : (await this.store.load(taskId, context)).map((config) => ({ config, wireVersion: context.requestedVersion }));
    if (configs.length === 0) return;
    const previous = this.chains.get(taskId) ?? Promise.resolve();
    const next = previous.then(() =>
      Promise.all(
        configs.map(({ config, wireVersion }) => {
          const serializer = wireVersion === '0.3' ? this.serializers['0.3'] : this.serializers['1.0'];
          const { body, contentType } = serializer.serialize(response, task);
          return this.deliver(config, body, contentType, taskId);
        }),
      ).then(() => undefined),
    );
    this.chains.set(taskId, next);
    try {
      await next;
    } finally {
      if (this.chains.get(taskId) === next) this.chains.delete(taskId);
    }
  }

  private async deliver(config: TaskPushNotificationConfig, body: string, contentType: string, taskId: string): Promise<void> {
    const headers: Record<string, string> = { 'content-type': contentType };
    if (config.authentication?.scheme && config.authentication.credentials)
      headers.authorization = `${config.authentication.scheme} ${config.authentication.credentials}`;
    else if (config.token) headers[TOKEN_HEADER] = config.token;
    let delay = this.retryDelayMs;
    for (let attempt = 1; attempt <= this.attempts; attempt++) {
      let outcome: string;
      try {
        const res = await fetch(config.url, { method: 'POST', headers, body, redirect: 'manual', signal: AbortSignal.timeout(this.timeoutMs) });
        await res.body?.cancel().catch(() => undefined);
        if (res.ok) return;
        outcome = `HTTP ${res.status}`;
        const retryable = res.status === 408 || res.status === 429 || res.status >= 500;
        if (!retryable) {
          this.log.warn({ task: taskId, config: config.id, status: res.status }, 'push notification refused by the receiver; not retrying');
          return;
        }
      } catch (err) {
        outcome = (err as Error).name === 'TimeoutError' ? 'timeout' : (err as Error).message;
      }
      if (attempt === this.attempts) {
        this.log.warn({ task: taskId, config: config.id, attempts: attempt, outcome }, 'push notification not delivered');
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay *= 2;
    }
  }
}
