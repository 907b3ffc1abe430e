/**
 * Replicas of Troupe's streams and buckets (TROUPE_IN, TROUPE_DLQ, the thread and lease buckets). They are
 * created with the replicas asked for (default 1); when a deployment asks for another count explicitly
 * (`troupe up --replicas 3` on a cluster whose streams have 1), the existing stream is scaled to it: a NATS
 * cluster moves a stream between replica counts online. Without an explicit count nothing changes.
 */
import { JetStreamApiCodes, JetStreamApiError, type JetStreamManager, type StreamConfig } from '@nats-io/jetstream';
import { TroupeError } from '../../protocol/errors.js';
import type { Logger } from '../../observability/logger.js';

/** Most replicas NATS allows for a stream. */
const MAX_REPLICAS = 5;

export function checkReplicas(replicas: number | undefined): void {
  if (replicas === undefined) return;
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > MAX_REPLICAS) throw new RangeError(`replicas must be 1..${MAX_REPLICAS}, got ${replicas}`);
}

/** Scales `stream` to `replicas` if it has another count. Throws TRANSPORT_ERROR when the servers refuse (e.g. fewer servers than replicas). */
export async function ensureReplicas(jsm: JetStreamManager, stream: string, replicas: number | undefined, log: Logger): Promise<void> {
  if (replicas === undefined) return;
  const info = await jsm.streams.info(stream);
  const has = info.config.num_replicas ?? 1;
  if (has === replicas) return;
  try {
    await jsm.streams.update(stream, { ...info.config, num_replicas: replicas });
  } catch (err) {
    const e = new TroupeError(
      'TRANSPORT_ERROR',
      `could not scale stream ${stream} from ${has} to ${replicas} replicas: ${(err as Error).message} (a stream needs as many JetStream servers as replicas)`,
    );
    e.cause = err;
    throw e;
  }
  log.info({ stream, from: has, to: replicas }, 'scaled stream replicas');
}

export function isApiError(err: unknown, code: number): boolean {
  return err instanceof JetStreamApiError && err.code === code;
}

/**
 * Creates stream `want.name` unless it exists (another node may create it at the same moment), then scales
 * it to `replicas` when they are given. True when this call created it. Errors other than "not found"
 * (JetStream not answering) are thrown for the caller's setup retry.
 */
export async function ensureStream(
  jsm: JetStreamManager,
  want: Partial<StreamConfig> & { name: string },
  replicas: number | undefined,
  log: Logger,
): Promise<boolean> {
  try {
    await jsm.streams.info(want.name);
  } catch (err) {
    if (!isApiError(err, JetStreamApiCodes.StreamNotFound)) throw err;
    try {
      await jsm.streams.add(want);
      return true;
    } catch (addErr) {
      // Another node created it at the same moment.
      await jsm.streams.info(want.name).catch(() => {
        throw addErr;
      });
    }
  }
  await ensureReplicas(jsm, want.name, replicas, log);
  return false;
}
