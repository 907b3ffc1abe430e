/** Header names carried on mesh messages. One place, so every language reads the same names. */
export const HEADERS = {
  threadId: 'Troupe-Thread',
  tenant: 'Troupe-Tenant',
  hop: 'Troupe-Hop',
  sender: 'Troupe-Sender',
  /** Task and context ids of the thread, for agents that build A2A events. */
  taskId: 'Troupe-Task',
  contextId: 'Troupe-Context',
  /**
   * Idempotency key of an agent call, `<threadId>/<messageId>`: a retried call carries the same key and
   * should get the same answer. Scoped to the thread, so a client reusing a messageId in another thread
   * is a different call.
   */
  callId: 'Troupe-Call-Id',
  /**
   * On an agent request: the subject the agent publishes its streamed chunks to (artifact-update events),
   * `troupe.<tenant>.chunks.<agent>.<caller>.<call>`, before it answers once on the reply subject. The
   * broker lets agent A publish only below `troupe.<tenant>.chunks.<A>`. No header: the caller takes no chunks.
   */
  chunks: 'Troupe-Chunks',
  /** The end user a principal acts for (the gateway serves many); owner = `<principal>/<user>`. */
  user: 'Troupe-User',
  /** JetStream de-duplication id of an inbound message: `<threadId>/<messageId>`, never the bare messageId. */
  msgId: 'Nats-Msg-Id',
  /**
   * On a user message a client sends again because no answer came (`1`, `2`, … with `Nats-Msg-Id`
   * `<threadId>/<messageId>#<n>`, so JetStream stores the copy): taken only if the thread never had the
   * message (the stream lost the first copy), acknowledged without an answer if it has it.
   */
  resend: 'Troupe-Resend',
  traceparent: 'traceparent',
  /** On an agent call: its thread is inspected, so the agent publishes inspection records for this call too. */
  inspect: 'Troupe-Inspect',
} as const;

export type HeaderMap = Record<string, string>;

/** The de-duplication / idempotency key of a message within a thread. */
export function scopedMessageKey(threadId: string, messageId: string): string {
  return `${threadId}/${messageId}`;
}
