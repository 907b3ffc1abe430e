/**
 * The ingress's two streams, made when missing and brought to the configuration the node wants: TROUPE_IN
 * (work-queue retention, its duplicate window and max age) and TROUPE_DLQ (bounded, old copies dropped).
 */
import { DiscardPolicy, JetStreamApiCodes, RetentionPolicy, StorageType, type JetStreamManager, type StreamConfig } from '@nats-io/jetstream';
import { TroupeError } from '../../protocol/errors.js';
import type { Logger } from '../../observability/logger.js';
import { subjects } from '../subjects.js';
import { DEAD_LETTER_STREAM, DEFAULT_INGRESS_MAX_AGE_MS, INGRESS_DUPLICATE_WINDOW_MS, INGRESS_STREAM, msToNanos } from './ingress-types.js';
import { ensureReplicas, ensureStream, isApiError } from './replicas.js';

export interface IngressStreamOptions {
  tenant: string;
  /** Subjects TROUPE_IN captures: every partition of every thread of the tenant. */
  streamSubject: string;
  /** TROUPE_IN's max age; default 24 h. */
  maxAgeMs?: number | undefined;
  replicas?: number | undefined;
  log: Logger;
}

export async function ensureIngressStream(jsm: JetStreamManager, opts: IngressStreamOptions): Promise<void> {
  const want: Partial<StreamConfig> & { name: string } = {
    name: INGRESS_STREAM,
    subjects: [opts.streamSubject],
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
    duplicate_window: msToNanos(INGRESS_DUPLICATE_WINDOW_MS),
    max_age: msToNanos(opts.maxAgeMs ?? DEFAULT_INGRESS_MAX_AGE_MS),
    num_replicas: opts.replicas ?? 1,
  };
  let info;
  try {
    info = await jsm.streams.info(INGRESS_STREAM);
  } catch (err) {
    if (!isApiError(err, JetStreamApiCodes.StreamNotFound)) throw err;
    try {
      await jsm.streams.add(want);
      opts.log.info({ stream: INGRESS_STREAM, subjects: want.subjects }, 'created inbound stream');
      return;
    } catch (addErr) {
      // Another node created it at the same moment.
      info = await jsm.streams.info(INGRESS_STREAM).catch(() => {
        throw addErr;
      });
    }
  }
  const cfg = info.config;
  if (cfg.retention !== RetentionPolicy.Workqueue) {
    throw new TroupeError(
      'TRANSPORT_ERROR',
      `stream ${INGRESS_STREAM} exists with ${cfg.retention} retention; it must be workqueue (the retention of a stream cannot change: delete it)`,
    );
  }
  const subjectsOk = cfg.subjects?.length === 1 && cfg.subjects[0] === opts.streamSubject;
  if (!subjectsOk || cfg.max_age !== want.max_age || cfg.duplicate_window !== want.duplicate_window) {
    await jsm.streams.update(INGRESS_STREAM, {
      ...cfg,
      subjects: want.subjects!,
      max_age: want.max_age!,
      duplicate_window: want.duplicate_window!,
    });
    opts.log.info({ stream: INGRESS_STREAM }, 'updated inbound stream configuration');
  }
  await ensureReplicas(jsm, INGRESS_STREAM, opts.replicas, opts.log);
}

export async function ensureDeadLetterStream(jsm: JetStreamManager, opts: IngressStreamOptions): Promise<void> {
  const want: Partial<StreamConfig> & { name: string } = {
    name: DEAD_LETTER_STREAM,
    subjects: [subjects.deadLetterAll(opts.tenant)],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_age: msToNanos(7 * DEFAULT_INGRESS_MAX_AGE_MS),
    max_msgs: 10_000,
    max_bytes: 32 * 1024 * 1024,
    discard: DiscardPolicy.Old,
    num_replicas: opts.replicas ?? 1,
  };
  await ensureStream(jsm, want, opts.replicas, opts.log);
}
