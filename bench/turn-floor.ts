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
 *     reply multiplexer, as the node's do (`NatsTransport.jetstreamConnection`);
 *   - the A2A status stream: a `working` status-update (with the route step) when the turn starts and the
 *     answer as the final status-update, each validated by the client;
 *   - exactly-once answers across a failover: once the answer is out, its published-answer marker is stored
 *     (Troupe's own JetStreamAnsweredLog: a JetStream publish per turn, acknowledged).
 *
 * What the durable turn does beyond it (left out, so the floor is above what the durable turn can reach):
 * its second status event, the persisted snapshot of the thread machine, routing and its rules, the agent
 * host's machine, metrics and logs.
 */
import type { NatsTransport } from '../src/transport/nats.js';
import { JetStreamAnsweredLog } from '../src/transport/jetstream/answered.js';
import { decode, encodeJson, MessageSchema, messageText, ThreadEventSchema, type Message, type TaskStatusUpdateEvent } from '../src/protocol/index.js';
import { subjects } from '../src/transport/subjects.js';
import { AgentReplySchema } from '../src/protocol/wire.js';
import { userMessage } from '../src/sdk/client.js';
import { ArrayJson, encodeRecord } from '../src/store/codec.js';
import type { ThreadRecord } from '../src/store/types.js';
import type { TurnGuarantees } from './durability.js';
import { xstateTurns } from './machine-floor.js';
import { threadCallHeaders } from './measure.js';

const HISTORY_LIMIT = 50;

export interface DurableTurnFloor extends TurnGuarantees {
  stop(): void;
}

/**
 * The guarantees of a durable turn for `startRawTurn`. `agentId`: the validating responder's agent id
 * (measure.ts `floorResponder`); `record`: a thread record at the history limit, the shape every worker's
 * thread starts from.
 */
export async function durableTurnFloor(opts: { transport: NatsTransport; tenant: string; agentId: string; text: string; record: ThreadRecord; timeoutMs: number }): Promise<DurableTurnFloor> {
  const { transport, tenant, agentId, text, record, timeoutMs } = opts;
  const markers = await new JetStreamAnsweredLog({ nc: transport.jetstreamConnection, tenant }).start();
  const lastMessage = new Map<number, string>();
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
      headers: threadCallHeaders(tenant, threadId, message.messageId),
    });
    const reply = decode(AgentReplySchema, res.data, 'agent reply');
    if (reply.kind !== 'message') throw new Error(`the responder answered a ${reply.kind}`);
    return reply;
  });
  return {
    message: () => encodeJson(userMessage(text)),
    turn: async (w, data, publish) => {
      const message = decode(MessageSchema, data, 'user message');
      const thread = threadOf(w);
      lastMessage.set(w, message.messageId);
      const status = (state: TaskStatusUpdateEvent['status']['state'], final: boolean, extra: { message?: Message; metadata?: Record<string, unknown> }): TaskStatusUpdateEvent => ({
        kind: 'status-update',
        taskId: thread.threadId,
        contextId: thread.threadId,
        status: { state, timestamp: new Date().toISOString(), ...(extra.message ? { message: extra.message } : {}) },
        final,
        ...(extra.metadata ? { metadata: extra.metadata } : {}),
      });
      publish(encodeJson(status('working', false, { metadata: { 'troupe/route': { from: 'user', to: agentId, hop: 0, reason: 'entry agent', at: Date.now() } } })));
      const reply = await turns.run(w, { threadId: thread.threadId, message });
      thread.history = [...thread.history, message, reply].slice(-HISTORY_LIMIT);
      const written: ThreadRecord = {
        ...record,
        threadId: thread.threadId,
        task: { ...record.task, id: thread.threadId, contextId: thread.threadId, status: { state: 'input-required', message: reply }, history: thread.encoded.encode(thread.history) },
        updatedAt: new Date().toISOString(),
      };
      return { value: encodeRecord(written).data, answer: encodeJson(status('input-required', true, { message: reply })) };
    },
    answered: (w) => markers.mark(`floor-turn-${w}`, lastMessage.get(w) ?? ''),
    check: (data) => {
      const event = decode(ThreadEventSchema, data, 'thread event');
      if (event.kind !== 'status-update' || !event.final) return false;
      const answer = event.status.message;
      if (!answer || messageText(answer) !== text) throw new Error(`answered "${answer ? messageText(answer) : ''}"`);
      return true;
    },
    stop: () => turns.stop(),
  };
}
