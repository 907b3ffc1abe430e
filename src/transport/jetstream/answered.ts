/**
 * Which message of a thread was answered last on the wire, kept by the broker for a while: the marker
 * behind "an answer goes out once" when a thread changes hands.
 *
 * A node publishes a thread's final answer with a core publish after the message's ack, so a node that
 * takes the thread over and is given that message again (the stream kept it: an ack lost with a
 * consumer's leader, or a consumer remade during an election) cannot tell whether the answer went out.
 * Asking the node that answered works while it lives; a dead or unreachable one cannot say, and the
 * answer went out twice (issue 14). So each final answer is followed, on the same connection, by a small
 * marker on `troupe.<t>.nodes.published.<thread>` (`{ messageId }`), which the stream `TROUPE_ANSWERED`
 * keeps on disk (the last one per thread, for an hour). The next owner reads the thread's last
 * marker (`published`) before it asks anyone.
 *
 * Each marker is published as a request the stream acknowledges, and published again until the stream
 * has it (its leader being elected, or a server just back from a pause, takes it seconds later): a marker
 * the stream never took leaves the decision to the answering node, and when that node dies before the
 * message comes back the answer goes out twice (a marker published just as a paused server comes back,
 * the node killed soon after). A marker is given up only when a newer one of the
 * same thread has been taken, the connection closes, or after ANSWER_MARK_DEADLINE_MS.
 *
 * Costs: one publish per final answer for the node, whose acknowledgement it waits for off the turn's path,
 * one stored message per final answer for the broker (on disk; replicated on a cluster), one stream read
 * per redelivered latest message. On disk, not in memory: a memory stream's messages do not outlive its
 * server's restart, so the markers were gone after a single server restarted, and on a cluster after two of
 * three replicas restarted at once (docs/cluster.md, rule 3). A memory stream made by an earlier
 * version is replaced when a node starts (`#ensureStream`). The marker follows its answer on one
 * connection, so a stored marker means the answer was handed to the server before it.
 */
import { jetstreamManager, RetentionPolicy, StorageType, DiscardPolicy, type JetStreamManager, type StreamConfig } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { z } from 'zod';
import { subjects } from '../subjects.js';
import { idSchema } from '../../protocol/ids.js';
import { TroupeError } from '../../protocol/errors.js';
import { decode, decodeText, encodeJson } from '../../protocol/codec.js';
import { silentLogger, type Logger } from '../../observability/logger.js';
import { ensureStream } from './replicas.js';
import { isCreateOrBindTransient, isStreamNotFound, retrySetup, retryTransient } from './retry.js';
import { isNoResponders } from '../nats.js';
import { msToNanos } from './ingress.js';

export const ANSWERED_STREAM = 'TROUPE_ANSWERED';
/** How long a marker is kept: far longer than a takeover or a redelivery takes. */
const ANSWERED_MAX_AGE_MS = 60 * 60 * 1000;
/**
 * The stream's cap: about 50,000 threads' markers (the oldest go first; a marker is needed for seconds,
 * while a thread changes hands). The stream reserves it, times its replicas, from the account's JetStream
 * storage.
 */
const ANSWERED_MAX_BYTES = 8 * 1024 * 1024;
/** How long one read of the stream waits for its answer. */
const LOOKUP_TIMEOUT_MS = 2_000;
/** How long the next owner keeps reading a stream that does not answer (an election) before it asks the answering node instead. */
const LOOKUP_DEADLINE_MS = 6_000;
/** How long one marker's publish waits for the stream's acknowledgement. */
const MARK_TIMEOUT_MS = 2_000;
/** How long a marker is published again while the stream does not take it: far beyond an election or a server's restart. */
const ANSWER_MARK_DEADLINE_MS = 120_000;
/** Threads whose marker is still being published again, at most (beyond, a failed marker is given up at once, with a warning). */
const MAX_PENDING_MARKS = 10_000;

const MarkerSchema = z.object({ messageId: idSchema('message') });

/** What a thread host needs: mark an answer as published, and ask whether one was. */
export interface AnsweredLog {
  /** After publishing the final answer to `messageId` on the same connection. */
  mark(threadId: string, messageId: string): void;
  /**
   * True when the thread's last marker names `messageId`; false when the stream says it does not (no
   * marker for the thread, or one naming another message); undefined when the stream could not be read
   * in time (no leader, an election, a refusal): nothing is known. A stream that is gone is made again first.
   */
  published(threadId: string, messageId: string): Promise<boolean | undefined>;
}

export interface JetStreamAnsweredLogOptions {
  nc: NatsConnection;
  tenant: string;
  /** Replicas of TROUPE_ANSWERED (as the other streams; scaled when given explicitly). */
  replicas?: number;
  setupDeadlineMs?: number;
  logger?: Logger;
}

export class JetStreamAnsweredLog implements AnsweredLog {
  readonly #opts: JetStreamAnsweredLogOptions;
  readonly #log: Logger;
  #jsm?: JetStreamManager;
  #remaking?: Promise<void>;
  /** The latest marker of each thread that the stream has not acknowledged yet. */
  readonly #pending = new Map<string, string>();
  /** The markers' acknowledgements come on one reply subscription (the client's own request makes an Error per answer). */

  constructor(opts: JetStreamAnsweredLogOptions) {
    this.#opts = opts;
    this.#log = (opts.logger ?? silentLogger()).child({ component: 'answered-log' });
  }

  /**
   * Creates (or checks) the stream; waits for JetStream like the node's other streams. A server that
   * refuses the stream (e.g. the account's JetStream storage is used up) leaves the node running without
   * markers, as before them: a warning says so and what to do.
   */
  async start(): Promise<this> {
    try {
      this.#jsm = await retrySetup(
        `creating the stream ${ANSWERED_STREAM}`,
        async () => {
          const jsm = await jetstreamManager(this.#opts.nc, { timeout: LOOKUP_TIMEOUT_MS });
          await this.#ensureStream(jsm);
          return jsm;
        },
        // The step makes the stream when it is missing: "stream not found" is the cluster recovering.
        { log: this.#opts.logger, deadlineMs: this.#opts.setupDeadlineMs, transient: isCreateOrBindTransient },
      );
    } catch (err) {
      // JetStream not answering, or too few servers for the replicas: as for the node's other streams.
      if (err instanceof TroupeError && err.code === 'TRANSPORT_ERROR') throw err;
      this.#log.warn(
        { stream: ANSWERED_STREAM, err: (err as Error).message },
        `could not create the stream ${ANSWERED_STREAM} (${ANSWERED_MAX_BYTES} bytes of JetStream storage per replica): running without published-answer markers, so an answer may go out twice when a node dies; raise the account's JetStream storage`,
      );
    }
    return this;
  }

  /**
   * Makes the stream again if it is gone (deleted, or an earlier version's memory stream after its server's
   * restart), one attempt at a time; a stream that is there is left as it is.
   */
  #remake(): Promise<void> {
    const jsm = this.#jsm;
    if (!jsm) return Promise.resolve();
    this.#remaking ??= this.#ensureStream(jsm)
      .catch((err: unknown) => this.#log.debug({ err: (err as Error).message }, `could not make the stream ${ANSWERED_STREAM} again`))
      .finally(() => {
        this.#remaking = undefined;
      });
    return this.#remaking;
  }

  /** Whether answers are being marked (the stream exists). */
  get on(): boolean {
    return this.#jsm !== undefined;
  }

  async #ensureStream(jsm: JetStreamManager): Promise<void> {
    await this.#replaceMemoryStream(jsm);
    const want: Partial<StreamConfig> & { name: string } = {
      name: ANSWERED_STREAM,
      subjects: [subjects.answerPublishedAll(this.#opts.tenant)],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      max_msgs_per_subject: 1,
      max_age: msToNanos(ANSWERED_MAX_AGE_MS),
      max_bytes: ANSWERED_MAX_BYTES,
      discard: DiscardPolicy.Old,
      num_replicas: this.#opts.replicas ?? 1,
    };
    if (await ensureStream(jsm, want, this.#opts.replicas, this.#log)) this.#log.info({ stream: ANSWERED_STREAM }, 'created the stream of published answers');
  }

  /**
   * An earlier version made the stream in memory, and a stream's storage cannot be changed in place: it is
   * deleted, and made again on disk by the caller. The markers it held go with it — needed only while a
   * thread changes hands, so this costs a redelivery in that moment its marker (the committer is still
   * asked). Another node doing the same at once finds it gone or already on disk.
   */
  async #replaceMemoryStream(jsm: JetStreamManager): Promise<void> {
    const info = await jsm.streams.info(ANSWERED_STREAM).catch((err: unknown) => {
      if (isStreamNotFound(err)) return undefined;
      throw err;
    });
    if (info?.config.storage !== StorageType.Memory) return;
    await jsm.streams.delete(ANSWERED_STREAM).catch((err: unknown) => {
      if (!isStreamNotFound(err)) throw err;
    });
    this.#log.info({ stream: ANSWERED_STREAM }, "replaced the memory stream of published answers (an earlier version's) with one on disk");
  }

  mark(threadId: string, messageId: string): void {
    if (!this.#jsm) return;
    const fresh = !this.#pending.has(threadId);
    if (fresh && this.#pending.size >= MAX_PENDING_MARKS) {
      // The stream has taken none of the last 10,000: publish once, as before the acknowledgements.
      this.#log.warn(
        { thread: threadId, pending: this.#pending.size },
        'the stream of published answers takes no markers: this one is published once, unchecked',
      );
      this.#publishOnce(threadId, messageId);
      return;
    }
    this.#pending.set(threadId, messageId);
    void this.#markUntilTaken(threadId, messageId);
  }

  #publishOnce(threadId: string, messageId: string): void {
    try {
      this.#opts.nc.publish(subjects.answerPublished(this.#opts.tenant, threadId), encodeJson({ messageId }));
    } catch (err) {
      // A closed connection: the answer did not go out either.
      this.#log.debug({ err: (err as Error).message, thread: threadId }, 'could not mark an answer as published');
    }
  }

  /**
   * Publishes the marker until the stream acknowledges it, with the backoff of every JetStream retry here
   * (retryTransient): stops when a newer marker of the thread replaces it (the stream keeps the last per
   * thread), when the connection closes, for a refusal that will not pass, or after ANSWER_MARK_DEADLINE_MS.
   */
  async #markUntilTaken(threadId: string, messageId: string): Promise<void> {
    const { nc } = this.#opts;
    const subject = subjects.answerPublished(this.#opts.tenant, threadId);
    const data = encodeJson({ messageId });
    const current = () => this.#pending.get(threadId) === messageId && !nc.isClosed();
    let attempts = 0;
    try {
      await retryTransient(
        async () => {
          attempts++;
          // On a transport's `jetstreamConnection` (as `troupe up` gives it) through its reply multiplexer.
          const ack = await nc.request(subject, data, { timeout: MARK_TIMEOUT_MS });
          const refused = (JSON.parse(decodeText(ack.data)) as { error?: { code?: number; description?: string } }).error;
          // A PubAck error: 503 while the stream elects its leader is worth another try, as a timeout is.
          if (refused) throw new Error(`${refused.code === 503 ? 'temporarily unavailable: ' : ''}${refused.description ?? 'refused'}`);
        },
        {
          deadlineMs: ANSWER_MARK_DEADLINE_MS,
          keepTrying: current,
          onRetry: (attempt, err) => {
            this.#log.debug(
              { thread: threadId, message: messageId, attempt, err: (err as Error).message },
              'the stream did not take a published-answer marker; publishing it again',
            );
            // Nothing takes the subject: the stream may be gone (a single server's restart), so it is made again.
            if (isNoResponders(err)) void this.#remake();
          },
        },
      );
      if (attempts > 1) this.#log.info({ thread: threadId, message: messageId, attempts }, 'the stream took a published-answer marker on a later attempt');
    } catch (err) {
      if (current())
        this.#log.warn(
          { thread: threadId, message: messageId, err: (err as Error).message },
          'gave up publishing a published-answer marker: if this thread changes hands, its node will be asked instead',
        );
    } finally {
      if (this.#pending.get(threadId) === messageId) this.#pending.delete(threadId);
    }
  }

  async published(threadId: string, messageId: string): Promise<boolean | undefined> {
    const jsm = this.#jsm;
    if (!jsm) return false;
    // A stream electing its leader (the failovers that bring messages back) answers within seconds.
    const read = () =>
      retryTransient(() => jsm.streams.getMessage(ANSWERED_STREAM, { last_by_subj: subjects.answerPublished(this.#opts.tenant, threadId) }), {
        deadlineMs: LOOKUP_DEADLINE_MS,
      });
    try {
      let stored;
      try {
        stored = await read();
      } catch (err) {
        if (!isStreamNotFound(err)) throw err;
        // Gone (deleted, or an earlier version's memory stream after its server's restart; on a cluster
        // recovering its quorum, making it again is a no-op). Made again, it says what it holds.
        await this.#remake();
        stored = await read();
      }
      // No message for the subject (the client gives null) is an answer: no marker for the thread.
      return stored !== null && decode(MarkerSchema, stored.data, 'published-answer marker', 1_024).messageId === messageId;
    } catch (err) {
      // Anything else — a stream that does not answer, one still not found, a refusal — says nothing. Taken
      // for "no marker", it lets a next owner whose committer is gone publish an answer that went out.
      this.#log.debug({ err: (err as Error).message, thread: threadId }, 'could not read the last published answer');
      return undefined;
    }
  }
}
