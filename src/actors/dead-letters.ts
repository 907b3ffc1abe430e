/** Reading the dead-letter stream (TROUPE_DLQ) for `troupe dlq`: the newest entries, in one pass; and erasing a thread's (`troupe delete`). */
import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { DEAD_LETTER_HEADERS, DEAD_LETTER_STREAM } from '../transport/jetstream/ingress.js';
import { subjects } from '../transport/subjects.js';
import type { DeadLetterEntry } from '../protocol/ctl.js';

/** The newest `limit` entries, newest first. One ordered consumer from `last - limit + 1`, not a request per entry. */
export async function listDeadLetters(nc: NatsConnection, limit: number): Promise<DeadLetterEntry[]> {
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(DEAD_LETTER_STREAM).catch(() => undefined);
  if (!info || info.state.messages === 0) return [];
  const from = Math.max(info.state.first_seq, info.state.last_seq - limit + 1);
  const wanted = info.state.last_seq - from + 1;
  const consumer = await jetstream(nc).consumers.get(DEAD_LETTER_STREAM, { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from });
  const entries: DeadLetterEntry[] = [];
  const messages = await consumer.fetch({ max_messages: wanted, expires: 5_000 });
  for await (const m of messages) {
    const h = m.headers;
    entries.push({
      seq: m.seq,
      at: new Date(Math.floor(m.info.timestampNanos / 1e6)).toISOString(),
      subject: h?.get(DEAD_LETTER_HEADERS.subject) || m.subject,
      code: h?.get(DEAD_LETTER_HEADERS.code) || 'UNKNOWN',
      error: h?.get(DEAD_LETTER_HEADERS.message) || '',
      attempts: Number(h?.get(DEAD_LETTER_HEADERS.attempts) || 0),
      preview: new TextDecoder().decode(m.data.subarray(0, 200)),
    });
    if (m.seq >= info.state.last_seq) break;
  }
  return entries.reverse();
}

/** Removes the dead letters of one thread (its subject in TROUPE_DLQ); how many there were. */
export async function purgeDeadLetters(nc: NatsConnection, tenant: string, threadId: string): Promise<number> {
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  const res = await jsm.streams.purge(DEAD_LETTER_STREAM, { filter: subjects.deadLetter(tenant, threadId) }).catch((err: unknown) => {
    // No dead-letter stream (never made): nothing to remove.
    if (/stream not found/i.test((err as Error).message)) return { purged: 0 };
    throw err;
  });
  return res.purged;
}
