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
 *
 * `without` takes guarantees out, to measure what each costs (bench/profile-turn.ts PROFILE_FLOOR_WITHOUT):
 * `validation` (JSON.parse where the node's and the client's schemas were; the responder's check of the
 * message stays, and the record's checks stay with `record`), `xstate` (the agent call made directly, no
 * actor), `record` (the raw turn's fixed bytes written instead of the thread's record), `status` (no
 * `working` event), `marker` (no published-answer marker).
 */
import type { Transport } from '../src/transport/types.js';
import { NatsTransport } from '../src/transport/nats.js';
import { JetStreamAnsweredLog } from '../src/transport/jetstream/answered.js';
import {
  decode,
  decodeText,
  encodeJson,
  MessageSchema,
  messageText,
  ThreadEventSchema,
  type Message,
  type TaskStatusUpdateEvent,
} from '../src/protocol/index.js';
import { subjects } from '../src/transport/subjects.js';
import { AgentReplySchema } from '../src/protocol/wire.js';
import { userMessage } from '../src/sdk/client.js';
import { ArrayJson, encodeRecord } from '../src/store/codec.js';
import type { ThreadRecord } from '../src/store/types.js';
import type { z } from 'zod';
import type { TurnGuarantees } from './durability.js';
import { xstateTurns, type MachineRig } from './machine-floor.js';
import { floorResponder, threadCallHeaders } from './measure.js';
import { MemoryBus, MemoryTransport } from '../src/transport/memory.js';

const HISTORY_LIMIT = 50;

export interface DurableTurnFloor extends TurnGuarantees {
  stop(): void;
}

export const FLOOR_GUARANTEES = ['validation', 'xstate', 'record', 'status', 'marker'] as const;
export type FloorGuarantee = (typeof FLOOR_GUARANTEES)[number];

/**
 * The guarantees of a durable turn for `startRawTurn`. `agentId`: the validating responder's agent id
 * (measure.ts `floorResponder`); `record`: a thread record at the history limit, the shape every worker's
 * thread starts from.
 */
export async function durableTurnFloor(opts: {
  /** The node side's transport; a NatsTransport's JetStream connection stores the markers. */
  transport: Transport;
  tenant: string;
  agentId: string;
  text: string;
  record: ThreadRecord;
  timeoutMs: number;
  without?: readonly FloorGuarantee[];
}): Promise<DurableTurnFloor> {
  const { transport, tenant, agentId, text, record, timeoutMs } = opts;
  const without = new Set(opts.without ?? []);
  // Without validation, the schemas' places read plain JSON.
  const read = <S extends z.ZodType>(schema: S, data: Uint8Array, what: string): z.output<S> =>
    without.has('validation') ? (JSON.parse(decodeText(data)) as z.output<S>) : decode(schema, data, what);
  const fixedValue = without.has('record') ? encodeRecord(record).data : undefined;
  const markers = without.has('marker') ? undefined : await markerLog(transport, tenant);
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
  const call = async ({ threadId, message }: { threadId: string; message: Message }): Promise<Message> => {
    const res = await transport.request(subjects.agentInbox(tenant, agentId), encodeJson({ ...message, contextId: threadId, taskId: threadId }), {
      timeoutMs,
      headers: threadCallHeaders(tenant, threadId, message.messageId),
    });
    const reply = read(AgentReplySchema, res.data, 'agent reply');
    if (reply.kind !== 'message') throw new Error(`the responder answered a ${reply.kind}`);
    return reply;
  };
  const turns = without.has('xstate') ? undefined : xstateTurns<{ threadId: string; message: Message }, Message>(call);
  return {
    message: () => encodeJson(userMessage(text)),
    turn: async (w, data, publish) => {
      const message = read(MessageSchema, data, 'user message');
      const thread = threadOf(w);
      lastMessage.set(w, message.messageId);
      const status = (
        state: TaskStatusUpdateEvent['status']['state'],
        final: boolean,
        extra: { message?: Message; metadata?: Record<string, unknown> },
      ): TaskStatusUpdateEvent => ({
        kind: 'status-update',
        taskId: thread.threadId,
        contextId: thread.threadId,
        status: { state, timestamp: new Date().toISOString(), ...(extra.message ? { message: extra.message } : {}) },
        final,
        ...(extra.metadata ? { metadata: extra.metadata } : {}),
      });
      if (!without.has('status'))
        publish(
          encodeJson(status('working', false, { metadata: { 'troupe/route': { from: 'user', to: agentId, hop: 0, reason: 'entry agent', at: Date.now() } } })),
        );
      const reply = turns ? await turns.run(w, { threadId: thread.threadId, message }) : await call({ threadId: thread.threadId, message });
      thread.history = [...thread.history, message, reply].slice(-HISTORY_LIMIT);
      const value =
        fixedValue ??
        encodeRecord({
          ...record,
          threadId: thread.threadId,
          task: {
            ...record.task,
            id: thread.threadId,
            contextId: thread.threadId,
            status: { state: 'input-required', message: reply },
            history: thread.encoded.encode(thread.history),
          },
          updatedAt: new Date().toISOString(),
        }).data;
      return { value, answer: encodeJson(status('input-required', true, { message: reply })) };
    },
    ...(markers ? { answered: (w: number) => markers.mark(`floor-turn-${w}`, lastMessage.get(w) ?? '') } : {}),
    check: (data) => {
      const event = read(ThreadEventSchema, data, 'thread event');
      if (event.kind !== 'status-update' || !event.final) return false;
      const answer = event.status.message;
      if (!answer || messageText(answer) !== text) throw new Error(`answered "${answer ? messageText(answer) : ''}"`);
      return true;
    },
    stop: () => turns?.stop(),
  };
}

function markerLog(transport: Transport, tenant: string): Promise<JetStreamAnsweredLog> {
  if (!(transport instanceof NatsTransport))
    throw new Error('the published-answer markers need a NatsTransport (JetStream); take them out with without: ["marker"]');
  return new JetStreamAnsweredLog({ nc: transport.jetstreamConnection, tenant }).start();
}

/**
 * The floor of the embedded turn: the durable floor's guarantees that an embedded turn keeps, on a
 * MemoryBus in this process — the message validated where it enters, the turn as an XState actor of the
 * thread's shape whose call goes over the memory transport to the validating responder, the reply
 * validated, the record encoded and validated as the store does and kept with a compare-and-set of its
 * revision, the status stream (`working`, then the answer) validated by the client. No published-answer
 * marker (an embedded mesh is not durable), no thread machine, host, store or agent host. `without`: as
 * the durable floor's.
 */
export async function startEmbeddedTurnFloor(opts: {
  text: string;
  record: ThreadRecord;
  timeoutMs: number;
  without?: readonly FloorGuarantee[];
}): Promise<MachineRig> {
  const bus = new MemoryBus();
  const tenant = 'bench';
  const agentId = 'floor';
  const responderT = new MemoryTransport({ bus });
  const responder = floorResponder(responderT, tenant, agentId);
  const guarantees = await durableTurnFloor({
    transport: new MemoryTransport({ bus }),
    tenant,
    agentId,
    text: opts.text,
    record: opts.record,
    timeoutMs: opts.timeoutMs,
    without: ['marker', ...(opts.without ?? [])],
  });
  const store = new Map<number, { revision: number; value: Uint8Array }>();
  return {
    op: async (w) => {
      const read = store.get(w);
      let answered = false;
      const { value, answer } = await guarantees.turn(w, guarantees.message(w), (event) => {
        answered ||= guarantees.check(event);
      });
      if (store.get(w) !== read) throw new Error(`thread ${w} was written by another turn`);
      store.set(w, { revision: (read?.revision ?? 0) + 1, value });
      answered ||= guarantees.check(answer);
      if (!answered) throw new Error('no answer');
    },
    stop: () => {
      guarantees.stop();
      responder.unsubscribe();
    },
  };
}
