/**
 * The dead-letter copy of an inbound message: the message as it came, with its error, original subject,
 * sequence and attempts in headers (`DEAD_LETTER_HEADERS`), on TROUPE_DLQ, where `troupe dlq` lists it.
 */
import type { JetStreamClient, JsMsg } from '@nats-io/jetstream';
import { headers as jsHeaders } from '@nats-io/transport-node';
import { HEADERS } from '../../protocol/headers.js';
import type { TroupeError } from '../../protocol/errors.js';
import type { Logger } from '../../observability/logger.js';
import { jsHeadersOf } from '../nats-headers.js';
import { parseThreadIn, subjects } from '../subjects.js';
import { DEAD_LETTER_HEADERS, errText } from './ingress-types.js';

export interface DeadLetterContext {
  js: JetStreamClient;
  tenant: string;
  log: Logger;
  /** How long a message whose copy was not stored is sent back for (the ingress's longest retry delay). */
  retryMax: number;
}

/**
 * Copies a message to the dead-letter stream with its error; never throws. Whether the stream stored it:
 * when not, the caller sends the message back for `retryMax` (as the line logged here says) rather than
 * terminate it. The copy's de-duplication id is its inbound sequence: a copy stored after all by a
 * publish that timed out is not stored twice when the message is dead-lettered again.
 */
export async function deadLetter(m: JsMsg, error: TroupeError, attempts: number, ctx: DeadLetterContext): Promise<boolean> {
  const parsed = parseThreadIn(m.subject);
  const h = jsHeaders();
  for (const [k, v] of Object.entries(jsHeadersOf(m))) h.set(k, v);
  h.set(DEAD_LETTER_HEADERS.code, error.code);
  h.set(DEAD_LETTER_HEADERS.message, error.message.replace(/[\r\n]+/g, ' ').slice(0, 1000));
  h.set(DEAD_LETTER_HEADERS.subject, m.subject.slice(0, 1000));
  h.set(DEAD_LETTER_HEADERS.seq, String(m.seq));
  h.set(DEAD_LETTER_HEADERS.attempts, String(attempts));
  // Not the message's own id (a client may send that id again later, another message to keep).
  h.set(HEADERS.msgId, `dlq/${m.seq}`);
  try {
    await ctx.js.publish(subjects.deadLetter(ctx.tenant, 'problem' in parsed ? '_invalid' : parsed.threadId), m.data, { headers: h, timeout: 5_000 });
    return true;
  } catch (err) {
    ctx.log.error({ seq: m.seq, err: errText(err), retryInMs: ctx.retryMax }, 'the message stays in the inbound stream and comes back');
    return false;
  }
}
