/**
 * The floor of the durable turn: the raw turn's NATS work (bench/durability.ts `startRawTurn`) carrying the
 * guarantees a durable Troupe turn keeps, and nothing else of Troupe:
 *
 *   - the client publishes an A2A message (a new message id each time, as TroupeClient does) and validates
 *     the answer it receives;
 *   - the node side validates the stored message where it enters (size, JSON, schema), runs the turn as an
 *     XState actor of the thread's shape (a root actor per thread starting a child machine per agent call:
 *     bench/machine-floor.ts `xstateTurns`), whose call sends the message with the thread's headers over
 *     Troupe's transport to a responder on an agent user that validates it and answers with a new A2A
 *     message (the hop floor's responder), validates that reply, and encodes and validates the thread's
 *     record — its history, at the 50-message limit, with the two new messages — as the store does
 *     (`encodeRecord` with the history encoded once per element), which is then written with one
 *     compare-and-set before the ack, as in the raw turn. Its JetStream requests go through the transport's
 *     reply multiplexer, as the node's do (`NatsTransport.jetstreamConnection`).
 *
 * What the durable turn does beyond it (left out, so the floor is above what the durable turn can reach):
 * status and chunk events on the thread's `out` subject, the answered marker, the persisted snapshot of the
 * thread machine, routing, the agent host's machine, metrics and logs.
 */
import type { Transport } from '../src/transport/types.js';
import { decode, encodeJson, HEADERS, MessageSchema, messageText, type Message } from '../src/protocol/index.js';
import { subjects } from '../src/transport/subjects.js';
import { AgentReplySchema } from '../src/protocol/wire.js';
import { userMessage } from '../src/sdk/client.js';
import { ArrayJson, encodeRecord } from '../src/store/codec.js';
import type { ThreadRecord } from '../src/store/types.js';
import type { TurnGuarantees } from './durability.js';
import { xstateTurns } from './machine-floor.js';

const HISTORY_LIMIT = 50;

export interface DurableTurnFloor extends TurnGuarantees {
  stop(): void;
}

/**
 * The guarantees of a durable turn for `startRawTurn`. `agentId`: the validating responder's agent id
 * (measure.ts `floorResponder`); `record`: a thread record at the history limit, the shape every worker's
 * thread starts from.
 */
export function durableTurnFloor(opts: { transport: Transport; tenant: string; agentId: string; text: string; record: ThreadRecord; timeoutMs: number }): DurableTurnFloor {
  const { transport, tenant, agentId, text, record, timeoutMs } = opts;
  const threads = new Map<number, { threadId: string; history: Message[]; encoded: ArrayJson }>();
  const threadOf = (w: number) => {
    let thread = threads.get(w);
    if (!thread) {
      thread = { threadId: `floor-turn-${w}`, history: [...(record.task.history ?? [])], encoded: new ArrayJson() };
      threads.set(w, thread);
    }
    return thread;
  };
  const turns = xstateTurns<{ threadId: string; message: Message }, Message>(async ({ threadId, message }) => {
    const res = await transport.request(subjects.agentInbox(tenant, agentId), encodeJson({ ...message, contextId: threadId, taskId: threadId }), {
      timeoutMs,
      headers: {
        [HEADERS.threadId]: threadId,
        [HEADERS.tenant]: tenant,
        [HEADERS.hop]: '0',
        [HEADERS.sender]: 'user',
        [HEADERS.callId]: `${threadId}/${message.messageId}`,
        [HEADERS.taskId]: threadId,
        [HEADERS.contextId]: threadId,
      },
    });
    const reply = decode(AgentReplySchema, res.data, 'agent reply');
    if (reply.kind !== 'message') throw new Error(`the responder answered a ${reply.kind}`);
    return reply;
  });
  return {
    message: () => encodeJson(userMessage(text)),
    turn: async (w, data) => {
      const message = decode(MessageSchema, data, 'user message');
      const thread = threadOf(w);
      const reply = await turns.run(w, { threadId: thread.threadId, message });
      thread.history = [...thread.history, message, reply].slice(-HISTORY_LIMIT);
      const written: ThreadRecord = {
        ...record,
        threadId: thread.threadId,
        task: { ...record.task, id: thread.threadId, contextId: thread.threadId, status: { state: 'input-required', message: reply }, history: thread.encoded.encode(thread.history) },
        updatedAt: new Date().toISOString(),
      };
      return { value: encodeRecord(written).data, answer: encodeJson(reply) };
    },
    check: (data) => {
      const answer = decode(MessageSchema, data, 'answer');
      if (messageText(answer) !== text) throw new Error(`answered "${messageText(answer)}"`);
    },
    stop: () => turns.stop(),
  };
}
