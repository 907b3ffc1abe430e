/**
 * The floor of a handoff's first chunk (bench/patterns.ts): the legs a handoff takes, over NATS with the
 * guarantees at their edges and nothing else of Troupe — no thread, machine, store or agent host:
 *
 *   client  -> node     the user's A2A message, validated where it enters; the node acknowledges it
 *   node    -> source   the message, validated by the source, which answers with a handoff (an A2A
 *                       message whose client-routing slot names the target), validated by the node
 *   node    -> target   the message with the handoff's context summary passed through the context
 *                       sanitiser (as every handoff's is), validated by the target, which streams one chunk
 *                       to the chunk subject the request names before it answers
 *   node    -> client   the chunk, validated by the node, published on the thread's output, where the client
 *                       reads (and validates) it: the sample ends there.
 *
 * Each role has its own connection, as in the pattern bench; one run at a time.
 */
import { randomUUID } from 'node:crypto';
import {
  AgentReplySchema,
  CLIENT_ROUTING_URI,
  ErrorReplySchema,
  HEADERS,
  MessageSchema,
  ThreadAckSchema,
  ThreadEventSchema,
  decode,
  encodeJson,
  messageText,
  readHandoffDirective,
  type Message,
  type TaskArtifactUpdateEvent,
} from '../src/protocol/index.js';
import { DEFAULT_SANITISER_POLICY, sanitiseMessage } from '../src/sanitiser/sanitiser.js';
import { userMessage } from '../src/sdk/client.js';
import { NatsTransport, type NatsConnectOptions } from '../src/transport/nats.js';
import type { Subscription } from '../src/transport/types.js';
import { z } from 'zod';

const PREFIX = 'bench.handoff-floor';
const AckOrError = z.union([ThreadAckSchema, ErrorReplySchema]);

export interface HandoffFloor {
  /** One run on a new thread: µs from the user's message to the target's first chunk on the thread's output. */
  sample(): Promise<number>;
  stop(): void;
}

/**
 * Starts the node, source and target sides on their connections; `client` sends and reads. `timeoutMs`
 * bounds each request and each run.
 */
export function startHandoffFloor(
  t: { node: NatsTransport; source: NatsTransport; target: NatsTransport; client: NatsTransport },
  timeoutMs: number,
): HandoffFloor {
  const subs: Subscription[] = [];
  const reply = (to: Message, text: string, metadata?: Record<string, unknown>): Message => ({
    kind: 'message',
    role: 'agent',
    messageId: randomUUID(),
    ...(to.contextId ? { contextId: to.contextId } : {}),
    ...(to.taskId ? { taskId: to.taskId } : {}),
    parts: [{ kind: 'text', text }],
    ...(metadata ? { metadata } : {}),
  });

  // The source hands every conversation to the target.
  subs.push(
    t.source.subscribe(`${PREFIX}.source`, (msg) => {
      const message = decode(MessageSchema, msg.data, 'message to the source');
      msg.respond(
        encodeJson(
          reply(message, 'desk: passing you on', {
            [CLIENT_ROUTING_URI]: { handoff: { targetAgentId: 'target', contextSummary: `The user said: ${messageText(message)}`, handoffReason: 'bench' } },
          }),
        ),
      );
    }),
  );
  // The target streams one chunk to the subject the request names, then answers.
  subs.push(
    t.target.subscribe(`${PREFIX}.target`, (msg) => {
      const message = decode(MessageSchema, msg.data, 'message to the target');
      const chunk: TaskArtifactUpdateEvent = {
        kind: 'artifact-update',
        taskId: message.taskId ?? '',
        contextId: message.contextId ?? '',
        artifact: { artifactId: `${message.messageId}:stream`, parts: [{ kind: 'text', text: 'on it' }], metadata: { 'troupe/agent': 'target' } },
        append: true,
        lastChunk: false,
      };
      t.target.publish(msg.headers[HEADERS.chunks] ?? `${PREFIX}.chunks.none`, encodeJson(chunk));
      msg.respond(encodeJson(reply(message, 'specialist: here')));
    }),
  );
  // The node relays a target's chunk to the thread's output.
  subs.push(
    t.node.subscribe(`${PREFIX}.chunks.*`, (msg) => {
      const threadId = msg.subject.slice(`${PREFIX}.chunks.`.length);
      const chunk = decode(ThreadEventSchema, msg.data, 'chunk');
      t.node.publish(`${PREFIX}.out.${threadId}`, encodeJson(chunk));
    }),
  );
  // The node takes the user's message: acknowledged, then the source, the handoff, the target.
  subs.push(
    t.node.subscribe(`${PREFIX}.in.*`, (msg) => {
      const threadId = msg.subject.slice(`${PREFIX}.in.`.length);
      const message = decode(MessageSchema, msg.data, 'user message');
      msg.respond(encodeJson({ kind: 'ack', threadId, messageId: message.messageId }));
      void (async () => {
        const headers = { [HEADERS.threadId]: threadId, [HEADERS.hop]: '0', [HEADERS.sender]: 'user' };
        const sourceReply = decode(
          AgentReplySchema,
          (await t.node.request(`${PREFIX}.source`, encodeJson({ ...message, contextId: threadId, taskId: threadId }), { timeoutMs, headers })).data,
          'source reply',
        );
        if (sourceReply.kind !== 'message') throw new Error(`the source answered a ${sourceReply.kind}`);
        const directive = readHandoffDirective(sourceReply);
        if (!directive) throw new Error('the source did not hand off');
        const toTarget = sanitiseMessage(
          { ...message, contextId: threadId, taskId: threadId, parts: [...message.parts, { kind: 'text', text: directive.contextSummary ?? '' }] },
          { policy: DEFAULT_SANITISER_POLICY, recipientAgentId: directive.targetAgentId },
        ).value;
        const targetReply = decode(
          AgentReplySchema,
          (
            await t.node.request(`${PREFIX}.target`, encodeJson(toTarget), {
              timeoutMs,
              headers: { ...headers, [HEADERS.hop]: '1', [HEADERS.chunks]: `${PREFIX}.chunks.${threadId}` },
            })
          ).data,
          'target reply',
        );
        if (targetReply.kind !== 'message') throw new Error(`the target answered a ${targetReply.kind}`);
      })().catch(() => undefined);
    }),
  );

  return {
    sample: async () => {
      const threadId = `hf-${randomUUID()}`;
      let start = 0n;
      let chunked!: (us: number) => void;
      const first = new Promise<number>((resolve, reject) => {
        chunked = resolve;
        setTimeout(() => reject(new Error(`no chunk on ${threadId} within ${timeoutMs} ms`)), timeoutMs).unref();
      });
      // Handled here: a run that fails before it waits (the ack) must not leave a rejection behind.
      first.catch(() => undefined);
      const out = t.client.subscribe(`${PREFIX}.out.${threadId}`, (msg) => {
        const event = decode(ThreadEventSchema, msg.data, 'thread event');
        if (event.kind === 'artifact-update') chunked(Number(process.hrtime.bigint() - start) / 1_000);
      });
      try {
        await t.client.flush();
        start = process.hrtime.bigint();
        const ack = decode(
          AckOrError,
          (await t.client.request(`${PREFIX}.in.${threadId}`, encodeJson(userMessage('I need the specialist')), { timeoutMs })).data,
          'ack',
        );
        if (ack.kind === 'error') throw new Error(`${ack.error.code}: ${ack.error.message}`);
        return await first;
      } finally {
        out.unsubscribe();
      }
    },
    stop: () => {
      for (const s of subs) s.unsubscribe();
    },
  };
}

/**
 * The floor with each role on a connection of its own (`<name>-<role>`), as the pattern bench runs it;
 * `stop` ends the rig and drains the connections.
 */
export async function connectHandoffFloor(
  as: NatsConnectOptions,
  name: string,
  timeoutMs: number,
): Promise<{ sample(): Promise<number>; stop(): Promise<void> }> {
  const transports: NatsTransport[] = [];
  const drain = () => Promise.all(transports.map((t) => t.drain().catch(() => t.close())));
  try {
    const connect = async (role: string) => {
      const t = await NatsTransport.connect({ ...as, name: `${name}-${role}` });
      transports.push(t);
      return t;
    };
    const rig = startHandoffFloor(
      { node: await connect('node'), source: await connect('source'), target: await connect('target'), client: await connect('client') },
      timeoutMs,
    );
    return {
      sample: rig.sample,
      stop: async () => {
        rig.stop();
        await drain();
      },
    };
  } catch (err) {
    await drain();
    throw err;
  }
}
