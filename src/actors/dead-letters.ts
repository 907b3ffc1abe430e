/** Reading the dead-letter stream (TROUPE_DLQ) for `troupe dlq`: newest first, bounded. */
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { DEAD_LETTER_HEADERS, DEAD_LETTER_STREAM } from '../transport/jetstream/ingress.js';

export interface DeadLetterEntry {
  seq: number;
  at: string;
  subject: string;
  code: string;
  error: string;
  attempts: number;
  /** The first bytes of the message as text. */
  preview: string;
}

export async function listDeadLetters(nc: NatsConnection, limit: number): Promise<DeadLetterEntry[]> {
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(DEAD_LETTER_STREAM).catch(() => undefined);
  if (!info || info.state.messages === 0) return [];
  const entries: DeadLetterEntry[] = [];
  for (let seq = info.state.last_seq; seq >= info.state.first_seq && entries.length < limit; seq--) {
    const m = await jsm.streams.getMessage(DEAD_LETTER_STREAM, { seq }).catch(() => null);
    if (!m) continue;
    const h = m.header;
    entries.push({
      seq,
      at: m.time.toISOString(),
      subject: h.get(DEAD_LETTER_HEADERS.subject) || m.subject,
      code: h.get(DEAD_LETTER_HEADERS.code) || 'UNKNOWN',
      error: h.get(DEAD_LETTER_HEADERS.message) || '',
      attempts: Number(h.get(DEAD_LETTER_HEADERS.attempts) || 0),
      preview: new TextDecoder().decode(m.data.subarray(0, 200)),
    });
  }
  return entries;
}
