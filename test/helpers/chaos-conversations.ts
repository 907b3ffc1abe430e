/**
 * The conversations of the cluster chaos suite (test/cluster.chaos.nats.test.ts): threads that talk without
 * pause on a real cluster, each message sent until the stream acknowledges it and answered on `out` (or,
 * failing that, read from the stored history, and sent again as TroupeClient does), with what the harness
 * did to get each answer kept apart from what the system delivered.
 */
import { HEADERS, ThreadEventSchema, decode, encodeJson, type Message, type TaskStatusUpdateEvent } from '../../src/protocol/index.js';
import { META } from '../../src/protocol/metadata.js';
import { TroupeClient, userMessage } from '../../src/sdk/client.js';
import type { NatsTransport } from '../../src/transport/nats.js';
import { subjects } from '../../src/transport/subjects.js';
import { sleep, waitUntil } from './wait.js';

/** The pause between two tries of a publish the stream did not acknowledge (an election, a server down). */
const RETRY_PAUSE_MS = 150;
/** How long a user takes to read an answer before sending the next message (a think time, not a wait for anything). */
const USER_READS_MS = 100;
const textOf = (m: Message | undefined) => (m?.parts ?? []).map((p) => (p.kind === 'text' ? p.text : '')).join('');

/** The Troupe nodes that answer a `ps`, with the partitions each holds. */
export async function owners(client: TroupeClient): Promise<Map<string, number[]>> {
  const found = (await client.ps(300)).flatMap((r) => r.actors).filter((a) => a.kind === 'node');
  return new Map(found.map((n) => [n.id, ((n.detail?.partitions as number[] | undefined) ?? []).slice().sort((a, b) => a - b)]));
}

/** Threads that talk without pause: each message waits for its stream ack (retried), then for its answer. */
export class Conversations {
  readonly sent = new Map<string, string[]>();
  /** Final answers per thread, in arrival order: the messageId each answers. */
  readonly finals = new Map<string, string[]>();
  readonly texts = new Map<string, string>();
  /** The answer message ids seen for each user message: more than one would mean its turn ran twice. */
  readonly answerIds = new Map<string, Set<string>>();
  readonly answeredAt = new Map<string, number>();
  /** When the client's subscriber first saw each message answered on `out` (a store read is not one). */
  readonly onOutAt = new Map<string, number>();
  /** What the chaos was doing when each message was sent (for the report of any lost or duplicated). */
  readonly phaseOf = new Map<string, string>();
  phase = 'warm-up';
  private readonly waiting = new Map<string, () => void>();
  private stopping = false;
  private loops: Promise<void>[] = [];

  /** Answers a client found in the thread's stored history after none came on `out` (TroupeClient does so too). */
  readonly recovered = new Set<string>();

  constructor(
    private readonly t: NatsTransport,
    private readonly client: TroupeClient,
  ) {
    t.subscribe('troupe.demo.out.local.*', (m) => {
      const e = decode(ThreadEventSchema, m.data, 'event');
      if (e.kind !== 'status-update' || !e.final) return;
      const message = (e as TaskStatusUpdateEvent).status.message;
      const inReplyTo = String(message?.metadata?.[META.inReplyTo] ?? '?');
      this.finals.set(e.taskId, [...(this.finals.get(e.taskId) ?? []), inReplyTo]);
      if (!this.texts.has(inReplyTo)) this.texts.set(inReplyTo, textOf(message));
      this.answerIds.set(inReplyTo, (this.answerIds.get(inReplyTo) ?? new Set()).add(message?.messageId ?? '?'));
      if (!this.answeredAt.has(inReplyTo)) this.answeredAt.set(inReplyTo, Date.now());
      if (!this.onOutAt.has(inReplyTo)) this.onOutAt.set(inReplyTo, Date.now());
      this.waiting.get(inReplyTo)?.();
    });
  }

  get attempted(): number {
    return [...this.sent.values()].reduce((n, ids) => n + ids.length, 0);
  }

  get answered(): number {
    return [...this.sent.values()].flat().filter((id) => this.answeredAt.has(id)).length;
  }

  /** Sends one message and resolves once the stream has it; the answer is awaited separately. */
  /** Sends until the stream acknowledges; with `withinMs`, throws once that has passed without a PubAck. */
  async send(threadId: string, messageId: string, text: string, withinMs?: number): Promise<{ answered: Promise<void> }> {
    const deadline = withinMs === undefined ? undefined : Date.now() + withinMs;
    let last = 'no answer';
    const answered = new Promise<void>((resolve) => {
      if (this.answeredAt.has(messageId)) resolve();
      this.waiting.set(messageId, resolve);
    });
    const msg = userMessage(text, { messageId });
    for (;;) {
      try {
        const ack = await this.t.request(subjects.threadIn('demo', 'local', threadId), encodeJson(msg), {
          timeoutMs: 3_000,
          headers: { [HEADERS.msgId]: `${threadId}/${messageId}` },
        });
        // During an election JetStream answers with an error instead of a PubAck: send again (same id).
        const body = JSON.parse(new TextDecoder().decode(ack.data)) as { seq?: number };
        if (typeof body.seq === 'number') break;
        last = JSON.stringify(body).slice(0, 300);
      } catch (err) {
        // no answer (server down, reconnecting): the same Nats-Msg-Id makes the retry safe
        last = (err as Error).message;
      }
      if (deadline !== undefined && Date.now() > deadline) throw new Error(`the stream did not acknowledge ${messageId} within ${withinMs} ms (last: ${last})`);
      await sleep(RETRY_PAUSE_MS);
    }
    this.sent.set(threadId, [...(this.sent.get(threadId) ?? []), messageId]);
    this.phaseOf.set(messageId, this.phase);
    return { answered };
  }

  start(threads: string[]): void {
    this.loops = threads.map(async (threadId) => {
      for (let i = 0; !this.stopping; i++) {
        const messageId = `${threadId}-m${i}`;
        const text = `turn ${i} of ${threadId}`;
        const { answered } = await this.send(threadId, messageId, text);
        await this.answerOf(threadId, messageId, text, answered);
        await sleep(USER_READS_MS);
      }
    });
  }

  /**
   * Waits for the answer on `out`; when none comes for a while, reads the thread's stored history as a
   * client does: an answer committed by a node killed before it published is there.
   */
  async answerOf(threadId: string, messageId: string, text: string, answered: Promise<void>): Promise<void> {
    let done = false;
    void answered.then(() => (done = true));
    await Promise.race([answered, sleep(8_000)]);
    // As TroupeClient does (SendOptions.resendAfterMs): about 10 s without an answer, a copy; then after 20 s, 40 s.
    let resendAt = Date.now() + 2_000;
    let resendDelay = 20_000;
    while (!done && !this.stopped) {
      if (Date.now() >= resendAt) {
        await this.resend(threadId, messageId, text);
        resendAt = Date.now() + resendDelay;
        resendDelay *= 2;
      }
      const history = await this.client.task(threadId).then(
        (t) => t.history ?? [],
        () => [],
      );
      const i = history.findIndex((m) => m.messageId === messageId);
      const answer = i >= 0 ? history[i + 1] : undefined;
      if (answer?.role === 'agent' && !this.answeredAt.has(messageId)) {
        this.recovered.add(messageId);
        this.answeredAt.set(messageId, Date.now());
        this.texts.set(messageId, textOf(answer));
        return;
      }
      await Promise.race([answered, sleep(2_000)]);
    }
  }

  private stopped = false;

  /** Copies sent per message for want of an answer (HEADERS.resend). */
  readonly resent = new Map<string, number>();
  /** When each message's first copy was sent. */
  readonly firstCopyAt = new Map<string, number>();

  private async resend(threadId: string, messageId: string, text: string): Promise<void> {
    const n = (this.resent.get(messageId) ?? 0) + 1;
    this.resent.set(messageId, n);
    if (!this.firstCopyAt.has(messageId)) this.firstCopyAt.set(messageId, Date.now());
    const headers = { [HEADERS.msgId]: `${threadId}/${messageId}#${n}`, [HEADERS.resend]: String(n) };
    await this.t
      .request(subjects.threadIn('demo', 'local', threadId), encodeJson(userMessage(text, { messageId })), { timeoutMs: 3_000, headers })
      .catch(() => undefined);
  }

  /**
   * Stops after each thread's current turn; resolves once every sent message is answered (or the deadline
   * passed) and each of the `liveNodes` running nodes has answered a `ps` on the client's connection: a node's
   * reply comes after every answer it published before it (one publisher, one subscriber: in order, across
   * the cluster's routes too), so a second answer any of them published is in `finals` by then.
   */
  async stop(timeoutMs: number, liveNodes: number): Promise<void> {
    this.stopping = true;
    await Promise.race([Promise.all(this.loops), sleep(timeoutMs)]);
    this.stopped = true;
    await waitUntil(async () => ((await owners(this.client)).size === liveNodes ? true : undefined), `a ps reply from each of the ${liveNodes} nodes`, 30_000);
  }
}
