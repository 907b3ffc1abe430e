/**
 * Answer publication across nodes: each final answer goes out once, whichever node holds the thread when
 * its message is delivered again. This process remembers the answers it published, the ones waiting for
 * their delivery's ack, and the ones it told another node it had not published (that node publishes them).
 * A redelivered latest message answered by another node is settled by the thread's published-answer marker
 * (transport/jetstream/answered.ts) or by asking that node (`answeredBy`), which this class also answers.
 * The rules of which delivery publishes what are in `ThreadHost.deliver`.
 */
import type { Logger } from 'pino';
import { taskStateOf } from '../../machines/thread.js';
import type { TaskStatusUpdateEvent } from '../../protocol/a2a.js';
import { decode, encodeJson } from '../../protocol/codec.js';
import { AnsweredAskSchema, AnsweredReplySchema } from '../../protocol/ctl.js';
import { TroupeError } from '../../protocol/errors.js';
import { isValidId } from '../../protocol/ids.js';
import { META, answerIn, rejectionEvent } from '../../protocol/metadata.js';
import { metrics } from '../../observability/metrics.js';
import { tracing, type Span } from '../../observability/tracing.js';
import type { AnsweredLog } from '../../transport/jetstream/answered.js';
import type { AfterAck } from '../../transport/jetstream/ingress.js';
import { subjects } from '../../transport/subjects.js';
import type { InboundMessage, Subscription, Transport } from '../../transport/types.js';
import { historyHas } from './history-ids.js';
import { atRest, inTurnOf, isWorking, type LiveThread } from './live.js';

/** Answers a host remembers having published (oldest forgotten first). */
const PUBLISHED_ANSWERS_KEPT = 100_000;
export const answerKey = (threadId: string, messageId: string) => `${threadId}/${messageId}`;
/** Adds `key` to a set of answers kept, forgetting the oldest past PUBLISHED_ANSWERS_KEPT. */
function remember(set: Set<string>, key: string): void {
  set.add(key);
  if (set.size > PUBLISHED_ANSWERS_KEPT) set.delete(set.values().next().value as string);
}
/** A stream copy of a message: when it was stored and its Nats-Msg-Id. */
export interface StoredCopy {
  at: number;
  id: string;
}
/** How long a node waits for another to say whether it published an answer. */
const ANSWERED_ASK_MS = 2_000;
const ANSWERED_ASK_ATTEMPTS = 3;
/** How long a node keeps asking when neither the marker stream nor the committer can tell whether a redelivered latest message was answered. */
const ANSWER_UNKNOWN_WAIT_MS = 30_000;
/** How long a node asked that question waits for an answer of its own still waiting for its ack. */
const ANSWERED_WAIT_MS = 1_500;

export interface AnswersOptions {
  tenant: string;
  nodeId: string;
  transport: Transport;
  log: Logger;
  now: () => number;
  /** See `ThreadHostOptions.answered`. */
  answered?: AnsweredLog | undefined;
  /** See `ThreadHostOptions.nodeAlive`. */
  nodeAlive?: ((nodeId: string) => Promise<boolean | undefined>) | undefined;
  /** See `ThreadHostOptions.duplicateWindowMs`. */
  duplicateWindowMs?: number | undefined;
  publishToOwner: (live: LiveThread, event: TaskStatusUpdateEvent, span?: Span) => void;
}

export class Answers {
  private answeredSub?: Subscription;
  /**
   * The answers this process published (`<thread>/<message>`, the newest kept). It outlives passivations
   * and releases (a NATS outage longer than the lease ttl releases and reloads threads), so a redelivery
   * after those is not answered twice; another process (after a crash) starts without it and answers.
   */
  private readonly publishedAnswers = new Set<string>();
  /**
   * The final events this process published (by identity: every delivery waiting for one turn holds the
   * same event objects), so two deliveries of one message publish its answer once, while another message
   * that reuses the messageId, answered by a turn of its own, still gets its own.
   */
  private readonly publishedEvents = new WeakSet<TaskStatusUpdateEvent>();
  /** Answers handed to a delivery's after-ack step and not yet published (count of deliveries holding one). */
  private readonly pendingAnswers = new Map<string, number>();
  /**
   * Answers this process told another node it had not published (see `onAnsweredAsk`): that node publishes
   * them, so this one never does, even if its ack is confirmed later (oldest forgotten first).
   */
  private readonly disclaimedAnswers = new Set<string>();
  /** With tracing on: the span of the turn a final answer ends, ended when that answer is published. */
  private readonly answerSpans = new WeakMap<TaskStatusUpdateEvent, Span>();

  constructor(private readonly opts: AnswersOptions) {}

  /** Other nodes ask here whether this process published an answer (see `ThreadHost.deliver`). */
  start(): void {
    if (isValidId('thread', this.opts.nodeId)) {
      this.answeredSub = this.opts.transport.subscribe(subjects.answeredBy(this.opts.tenant, this.opts.nodeId), (m) =>
        this.onAnsweredAsk(m).catch((err: unknown) => this.opts.log.warn({ err: (err as Error).message }, 'could not answer whether an answer was published')),
      );
    }
  }

  stop(): void {
    this.answeredSub?.unsubscribe();
  }

  /** This process published the answer `key` (`answerKey`). */
  isPublished(key: string): boolean {
    return this.publishedAnswers.has(key);
  }

  /** The answer `key` waits for its delivery's ack to go out. */
  isPending(key: string): boolean {
    return this.pendingAnswers.has(key);
  }

  /** This process told another node it had not published the answer `key`: that node does. */
  isDisclaimed(key: string): boolean {
    return this.disclaimedAnswers.has(key);
  }

  /** Keeps the span of the turn `event` ends, to end when it is published. */
  holdSpan(event: TaskStatusUpdateEvent, span: Span): void {
    this.answerSpans.set(event, span);
  }

  /**
   * Whether `stored` is a second stored copy of a message the thread took: the same Nats-Msg-Id within the
   * stream's duplicate window. JetStream should have refused it (a client re-sending within the window gets
   * a duplicate PubAck, and TroupeClient reads the answer from the store), but a clustered stream on
   * nats-server before 2.11 can store both copies when its leader changes while a client retries the
   * publish. The first copy's delivery gives the answer.
   */
  secondCopy(live: LiveThread, messageId: string, seq: number | undefined, stored: StoredCopy | undefined): boolean {
    const window = this.opts.duplicateWindowMs;
    if (!stored || seq === undefined || window === undefined) return false;
    const first = live.taken?.find((t) => t.messageId === messageId);
    // The same stream message given again (seq) is a redelivery, settled below.
    if (!first || first.seq === seq || first.id !== stored.id || Math.abs(stored.at - first.at) >= window) return false;
    this.opts.log.info(
      { thread: live.threadId, message: messageId, apartMs: stored.at - first.at },
      'a second stored copy of a message (the stream did not detect the duplicate): acknowledged, not answered again',
    );
    metrics.inboundDuplicates.inc();
    return true;
  }

  /**
   * The after-ack step of a delivery: publishes the message's answer unless this process already did
   * (the same final events: another message reusing the messageId has answers of its own). From
   * now until it runs, the answer counts as given, so a redelivery arriving meanwhile (a consumer recreated
   * on reconnect) neither answers it again nor waits; two deliveries waiting for one turn publish it once.
   */
  publishOnce(live: LiveThread, messageId: string, events: TaskStatusUpdateEvent[]): AfterAck {
    const key = answerKey(live.threadId, messageId);
    this.pendingAnswers.set(key, (this.pendingAnswers.get(key) ?? 0) + 1);
    return ({ acked }) => {
      const left = (this.pendingAnswers.get(key) ?? 1) - 1;
      if (left > 0) this.pendingAnswers.set(key, left);
      else this.pendingAnswers.delete(key);
      // Not known to be acknowledged: the message comes again (here or to the partition's next owner),
      // and that delivery publishes the stored answer; published now as well, it would go out twice.
      // Likewise once this process told the next owner it had not published it: that one did.
      if (!acked || this.disclaimedAnswers.has(key)) return;
      // The same final events are not published twice (another message reusing the messageId has answers of its own).
      this.publishAnswered(
        live,
        events.filter((e) => !this.publishedEvents.has(e)),
      );
      this.rememberPublished(key);
    };
  }

  /** A final event for the message waits to be committed (in the outbox, or in the write in flight): it is about to go out. */
  answerComing(live: LiveThread, messageId: string): boolean {
    const names = (e: TaskStatusUpdateEvent) => e.status.message?.metadata?.[META.inReplyTo] === messageId;
    return live.outbox.some(names) || (live.committing?.some(names) ?? false);
  }

  /**
   * Whether the answer to the thread's latest message went out from another node (see `deliver`). The
   * thread's published-answer marker says so when the stream can be read; else the node that committed
   * the turn, when it answers. While neither can tell (the marker stream electing a leader, the committer
   * reconnecting after the same fault; publishing then could send an answer a second time), both are asked
   * again, for up to ANSWER_UNKNOWN_WAIT_MS; only a stream that says there
   * is no marker, a committer that says it did not publish, or that wait running out lets the answer go out.
   * "No marker" alone is enough only when the committer is gone (`nodeAlive`, when the node has it): the
   * marker is stored after the answer, so a committer that is alive but does not answer may have published.
   */
  async publishedBefore(live: LiveThread, messageId: string): Promise<boolean> {
    const by = live.committedBy;
    const askable = by !== undefined && by !== this.opts.nodeId && isValidId('thread', by);
    const deadline = Date.now() + ANSWER_UNKNOWN_WAIT_MS;
    for (let round = 1; ; round++) {
      const marked = this.opts.answered ? await this.opts.answered.published(live.threadId, messageId) : false;
      if (marked) {
        this.opts.log.info(
          { thread: live.threadId, message: messageId, round },
          'a redelivered message was answered already (its published-answer marker): not published again',
        );
        metrics.redeliveredAnswers.inc({ decision: 'marker' });
        return true;
      }
      const said = askable ? await this.publishedElsewhere(by, live.threadId, messageId) : undefined;
      // No marker settles it only when nobody else can have published: the committer answered, or is gone. A
      // committer alive but not answering (reconnecting after the server fault that moved the partition) may
      // have published with its marker not stored yet (the stream without quorum): both would publish.
      let committerGone = true;
      if (said === undefined && marked === false && askable && this.opts.nodeAlive) committerGone = (await this.opts.nodeAlive(by)) === false;
      if (said !== undefined || (marked === false && committerGone) || Date.now() >= deadline) {
        const published = said === true;
        metrics.redeliveredAnswers.inc({ decision: published ? 'node' : 'published' });
        this.opts.log.info(
          {
            thread: live.threadId,
            message: messageId,
            committedBy: by,
            round,
            ...(said === undefined && marked === undefined ? { waitedMs: ANSWER_UNKNOWN_WAIT_MS } : {}),
          },
          published
            ? 'a redelivered message was answered already (the node that answered said so): not published again'
            : 'a redelivered message nobody says was answered: publishing its stored answer',
        );
        return published;
      }
      this.opts.log.debug(
        { thread: live.threadId, message: messageId, committedBy: by, round, marker: marked === false ? 'none' : 'unknown' },
        marked === false
          ? 'cannot tell yet whether a redelivered message was answered (no marker, and the committer is alive but does not answer): asking again'
          : 'cannot tell yet whether a redelivered message was answered (the marker stream and the committer do not answer): asking again',
      );
      await new Promise((r) => setTimeout(r, 1_000));
    }
  }

  /**
   * Whether node `nodeId` says it published the answer to `messageId`; undefined when it does not answer,
   * asked a few times (a node that is alive may be reconnecting after the same server fault that moved its
   * partition: a trace showed one unreachable for a moment, and its answer went out twice).
   */
  private async publishedElsewhere(nodeId: string, threadId: string, messageId: string): Promise<boolean | undefined> {
    for (let attempt = 1; attempt <= ANSWERED_ASK_ATTEMPTS; attempt++) {
      try {
        const reply = await this.opts.transport.request(subjects.answeredBy(this.opts.tenant, nodeId), encodeJson({ threadId, messageId }), {
          timeoutMs: ANSWERED_ASK_MS,
        });
        return decode(AnsweredReplySchema, reply.data, 'answer of another node', 2_048).published;
      } catch {
        if (attempt < ANSWERED_ASK_ATTEMPTS) await new Promise((r) => setTimeout(r, 500));
      }
    }
    return undefined;
  }

  /**
   * Answers another node asking whether this process published an answer (see `deliver`). An answer
   * still waiting for its delivery's ack is waited for (bounded): whether it goes out depends on the ack.
   */
  private async onAnsweredAsk(m: InboundMessage): Promise<void> {
    let ask: { threadId: string; messageId: string };
    try {
      ask = decode(AnsweredAskSchema, m.data, 'question of another node', 2_048);
    } catch (err) {
      m.respond(encodeJson(TroupeError.from(err, 'INVALID_MESSAGE').toReply()));
      return;
    }
    const { threadId, messageId } = ask;
    const key = answerKey(threadId, messageId);
    for (let waited = 0; this.pendingAnswers.has(key) && waited < ANSWERED_WAIT_MS; waited += 50) await new Promise((r) => setTimeout(r, 50));
    const published = this.publishedAnswers.has(key);
    // "Not published" is a promise: the asker publishes it, so this process must not any more (its ack
    // may still be settling, and be confirmed after this answer).
    if (!published) remember(this.disclaimedAnswers, key);
    m.respond(encodeJson({ published }));
  }

  /** Resolves with the final events of the message's turn once that turn is committed. */
  waitFor(live: LiveThread, messageId: string): Promise<TaskStatusUpdateEvent[]> {
    return new Promise((resolve, reject) => live.waiters.push({ messageId, events: [], resolve, reject }));
  }

  publishAnswered(live: LiveThread, events: TaskStatusUpdateEvent[], opts: { remember?: boolean } = {}): void {
    for (const event of events) this.publishFinal(live, event, opts);
  }

  /** Publishes a final answer and remembers that this process did (a redelivery then needs nothing). */
  publishFinal(live: LiveThread, event: TaskStatusUpdateEvent, opts: { remember?: boolean } = {}): void {
    const span = tracing.on ? this.answerSpans.get(event) : undefined;
    if (this.opts.log.isLevelEnabled('debug'))
      this.opts.log.debug(
        { thread: live.threadId, message: event.status.message?.metadata?.[META.inReplyTo], remember: opts.remember !== false },
        'publishing a final answer',
      );
    this.opts.publishToOwner(live, event, span);
    // A copy for a client that sent the messageId again does not count as the message's own answer.
    if (opts.remember !== false) this.publishedEvents.add(event);
    if (span) {
      this.answerSpans.delete(event);
      span.end();
    }
    const inReplyTo = event.status.message?.metadata?.[META.inReplyTo];
    if (typeof inReplyTo !== 'string' || opts.remember === false) return;
    this.rememberPublished(answerKey(live.threadId, inReplyTo));
    // After the answer, on the same connection: a stored marker means the answer went out before it.
    this.opts.answered?.mark(live.threadId, inReplyTo);
  }

  private rememberPublished(key: string): void {
    remember(this.publishedAnswers, key);
  }

  /**
   * After a write: each committed final event goes out now, or, when a delivery waits for that message's
   * answer, to that delivery (it goes out after the ack). Then the messages whose turn has ended (the
   * thread is at rest with them) are settled.
   */
  afterCommit(live: LiveThread, finals: TaskStatusUpdateEvent[]): void {
    live.historyIds?.follow(live.actor.getSnapshot().context.history);
    for (const event of finals) {
      const inReplyTo = event.status.message?.metadata?.[META.inReplyTo];
      const waiting = live.waiters.filter((w) => w.messageId === inReplyTo);
      if (waiting.length === 0) this.publishFinal(live, event);
      else for (const w of waiting) w.events.push(event);
    }
    if (live.waiters.length === 0) return;
    const snap = live.actor.getSnapshot();
    const ctx = snap.context;
    const resting = atRest(snap);
    const open = new Set([...ctx.pending.map((m) => m.messageId), ...(ctx.turn ? [ctx.turn.userMessageId] : [])]);
    const still: LiveThread['waiters'] = [];
    for (const w of live.waiters) {
      if (resting || (!open.has(w.messageId) && historyHas(live, ctx.history, w.messageId))) w.resolve(w.events);
      else still.push(w);
    }
    live.waiters = still;
  }

  /**
   * A message the thread already has: its final answer again (if it has one yet), at once. With
   * `remember: false` (a client sending a messageId again, not a redelivery) this copy does not count as
   * the answer this process gave for that message.
   */
  answerDuplicate(live: LiveThread, messageId: string, opts: { remember?: boolean } = {}): void {
    const ctx = live.actor.getSnapshot().context;
    const answer = answerIn(ctx.history, messageId, isWorking(live.actor.getSnapshot().value));
    if (!answer) {
      // Still being answered (its turn runs, it is queued, or its answer waits for its commit): the answer will come.
      if (inTurnOf(ctx, messageId) || this.answerComing(live, messageId)) return;
      // Its answer is no longer kept (the history keeps the latest messages): a typed error, not silence.
      const error = new TroupeError(
        'INVALID_MESSAGE',
        `message ${messageId} was already sent into thread ${live.threadId} and its answer is no longer kept; send it with a new messageId`,
      );
      this.publishFinal(
        live,
        rejectionEvent({ taskId: live.threadId, contextId: ctx.contextId, messageId, error, timestamp: new Date(this.opts.now()).toISOString() }),
        opts,
      );
      return;
    }
    this.publishFinal(
      live,
      {
        kind: 'status-update',
        taskId: live.threadId,
        contextId: ctx.contextId,
        status: { state: taskStateOf(live.actor.getSnapshot().value), message: answer, timestamp: new Date(this.opts.now()).toISOString() },
        final: true,
        ...(answer.metadata?.[META.error] ? { metadata: { [META.error]: answer.metadata[META.error] } } : {}),
      },
      opts,
    );
  }
}
