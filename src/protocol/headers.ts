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
  /**
   * JetStream de-duplication id of an inbound message: `<owner>/<threadId>/<messageId>` (`inboundDedupId`),
   * never the bare messageId. The stream de-duplicates across every sender: scoped to the owner, another
   * principal's message into the same thread under the same messageId is stored (and refused as any
   * message into a thread that is not its sender's), not dropped as a duplicate.
   */
  msgId: 'Nats-Msg-Id',
  /**
   * On a user message a client sends again because no answer came (`1`, `2`, … with `Nats-Msg-Id`
   * `<owner>/<threadId>/<messageId>#<n>`, so JetStream stores the copy): taken only if the thread never had the
   * message (the stream lost the first copy), acknowledged without an answer if it has it.
   */
  resend: 'Troupe-Resend',
  traceparent: 'traceparent',
  /** On an agent call: its thread is inspected, so the agent publishes inspection records for this call too. */
  inspect: 'Troupe-Inspect',
} as const;

/** The de-duplication / idempotency key of a message within a thread. */
export function scopedMessageKey(threadId: string, messageId: string): string {
  return `${threadId}/${messageId}`;
}

/**
 * The de-duplication id (Nats-Msg-Id) of a user message into a thread: scoped to its owner (`<principal>`,
 * or `<principal>/<user>` for a principal acting for users) and its thread.
 */
export function inboundDedupId(owner: { principal: string; user?: string | undefined }, threadId: string, messageId: string): string {
  const scope = owner.user !== undefined ? `${owner.principal}/${owner.user}` : owner.principal;
  return `${scope}/${threadId}/${messageId}`;
}
