/**
 * Acknowledging a handled message, and finding out whether the ack took (ingress.ts hands that to the
 * handler's after-ack step: an answer goes out only once its message is known to be acknowledged).
 */
import type { JsMsg, JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from '../../observability/logger.js';
import { INGRESS_STREAM, errText, type PartitionRun } from './ingress-types.js';

/** Acks sent again (each waiting up to ACK_CONFIRM_MS for the server's confirmation) before asking the stream. */
const ACK_ATTEMPTS = 3;
const ACK_CONFIRM_MS = 5_000;
const JS_ACK = new TextEncoder().encode('+ACK');

export interface AckContext {
  nc: NatsConnection;
  jsm: JetStreamManager;
  log: Logger;
}

/**
 * Acks a handled message and finds out whether the ack took: confirmed by the server (asked again a few
 * times while this node still consumes the partition: during an election the consumer's leader does not
 * answer for a while), else, while it still consumes the partition, whether the stream still holds the
 * message (gone: it was acknowledged). False when neither is known; the message then comes again if it
 * was not acknowledged.
 */
export async function settleAck(run: PartitionRun, m: JsMsg, ctx: AckContext): Promise<boolean> {
  const seq = m.seq;
  let lastErr: unknown;
  if (run.lost) {
    ctx.log.info({ partition: run.partition, seq }, 'lease lost while the message was handled: not acknowledged, the next owner answers it');
    return false;
  }
  // (JsMsg does not type the reply subject its implementation carries: the ack subject.)
  const ackSubject = (m as unknown as { reply?: unknown }).reply;
  try {
    // The ack and the server's confirmation of it as one request, as `JsMsg.ackAck` does, but through the
    // connection's `request`: on a transport's `jetstreamConnection` its multiplexer, which makes no Error
    // per answer (src/transport/request-mux.ts).
    if (typeof ackSubject === 'string') await ctx.nc.request(ackSubject, JS_ACK, { timeout: ACK_CONFIRM_MS });
    else await m.ackAck({ timeout: ACK_CONFIRM_MS });
    return true;
  } catch (err) {
    lastErr = err;
  }
  // The same ack again, on the subject of this delivery, only while this run's consumer is the
  // partition's (a successor's consumer of the same name must not take an ack meant for this one).
  for (let attempt = 2; typeof ackSubject === 'string' && attempt <= ACK_ATTEMPTS && run.active && !ctx.nc.isClosed(); attempt++) {
    await new Promise((r) => setTimeout(r, 500 * (attempt - 1)));
    if (!run.active) break;
    try {
      await ctx.nc.request(ackSubject, JS_ACK, { timeout: ACK_CONFIRM_MS });
      return true;
    } catch (err) {
      lastErr = err;
    }
  }
  // Gone from the stream means acknowledged by this node's ack only while this run consumes the partition:
  // after it lost the partition, the next owner may have acked it (and published its answer).
  if (!run.active) {
    ctx.log.info({ partition: run.partition, seq, err: errText(lastErr) }, 'ack not confirmed and the partition moved on: the message may come again');
    return false;
  }
  try {
    const stored = await ctx.jsm.streams.getMessage(INGRESS_STREAM, { seq });
    const gone = stored === null;
    ctx.log.info(
      { partition: run.partition, seq, err: errText(lastErr), acked: gone },
      gone ? 'ack not confirmed, but the stream no longer holds the message' : 'ack not confirmed and the stream still holds the message: it may come again',
    );
    return gone;
  } catch (err) {
    ctx.log.info(
      { partition: run.partition, seq, err: errText(lastErr), check: errText(err) },
      'ack not confirmed and the stream could not be asked: the message may come again',
    );
    return false;
  }
}
