/** Header names carried on every mesh message. One place, so every language reads the same names. */
export const HEADERS = {
  threadId: 'Troupe-Thread',
  tenant: 'Troupe-Tenant',
  hop: 'Troupe-Hop',
  sender: 'Troupe-Sender',
  /** Subject an agent publishes streamed chunks to (the thread's `.out`), when the caller wants streaming. */
  streamTo: 'Troupe-Stream-To',
  /** Task and context ids for chunk events an agent publishes. */
  taskId: 'Troupe-Task',
  contextId: 'Troupe-Context',
  /** Idempotency key of an agent call; equals the A2A messageId. */
  msgId: 'Nats-Msg-Id',
  traceparent: 'traceparent',
} as const;

export type HeaderMap = Record<string, string>;
