/**
 * The health of Troupe's streams and buckets as JetStream reports it (`troupe status --streams`): for each,
 * its replicas, its leader, and whether every replica is current. A stream without a leader takes no
 * writes (turns wait, then fail); a replica that lags or is offline is one failure away from that.
 *
 * It asks the JetStream API, which the node role may use and the operator role may not: run it with a
 * node's credentials.
 */
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { DEFAULT_THREAD_BUCKET } from '../store/kv.js';
import { ANSWERED_STREAM } from '../transport/jetstream/answered.js';
import { DEAD_LETTER_STREAM, INGRESS_STREAM } from '../transport/jetstream/ingress.js';
import { DEFAULT_LEASE_BUCKET } from '../transport/jetstream/leases.js';

/** What a durable node makes when it starts: the inbound stream, dead letters, answer markers, the two buckets. */
const TROUPE_STREAMS = [INGRESS_STREAM, DEAD_LETTER_STREAM, ANSWERED_STREAM, `KV_${DEFAULT_THREAD_BUCKET}`, `KV_${DEFAULT_LEASE_BUCKET}`] as const;

export interface StreamHealth {
  stream: string;
  ok: boolean;
  /** Why not, or what was seen. */
  detail: string;
  replicas?: number;
  leader?: string;
  messages?: number;
  /** Replicas that are not current (behind, or offline), with how far behind. */
  behind?: Array<{ name: string; offline: boolean; lag: number }>;
}

/** Each of `TROUPE_STREAMS`, asked in parallel; throws when the JetStream API cannot be asked at all. */
export async function streamsHealth(nc: NatsConnection, timeoutMs = 3_000): Promise<StreamHealth[]> {
  let jsm: JetStreamManager;
  try {
    jsm = await jetstreamManager(nc, { timeout: timeoutMs });
  } catch (err) {
    throw new Error(`the JetStream API did not answer (${(err as Error).message}): --streams needs a node's credentials, which may use it`, { cause: err });
  }
  return Promise.all(TROUPE_STREAMS.map((stream) => health(jsm, stream)));
}

async function health(jsm: JetStreamManager, stream: string): Promise<StreamHealth> {
  let info;
  try {
    info = await jsm.streams.info(stream);
  } catch (err) {
    const message = (err as Error).message;
    if (/stream not found/i.test(message)) return { stream, ok: false, detail: 'not made yet: a durable node makes it when it starts' };
    if (/permission/i.test(message)) return { stream, ok: false, detail: `refused (${message}): --streams needs a node's credentials` };
    return { stream, ok: false, detail: `no answer: ${message}` };
  }
  const replicas = info.config.num_replicas || 1;
  const messages = info.state.messages;
  const cluster = info.cluster;
  // One server, no cluster: the server is the stream.
  if (!cluster || replicas === 1)
    return {
      stream,
      ok: true,
      replicas,
      messages,
      ...(cluster?.leader ? { leader: cluster.leader } : {}),
      detail: `${replicas} replica${cluster?.leader ? `, on ${cluster.leader}` : ''}`,
    };
  const behind = (cluster.replicas ?? []).filter((r) => !r.current || r.offline).map((r) => ({ name: r.name, offline: r.offline === true, lag: r.lag ?? 0 }));
  if (!cluster.leader) return { stream, ok: false, replicas, messages, behind, detail: `no leader: it takes no writes until its replicas elect one` };
  const ok = behind.length === 0;
  const lagging = behind.map((r) => (r.offline ? `${r.name} offline` : `${r.name} ${r.lag} behind`)).join(', ');
  return {
    stream,
    ok,
    replicas,
    leader: cluster.leader,
    messages,
    ...(ok ? {} : { behind }),
    detail: `${replicas} replicas, leader ${cluster.leader}${ok ? ', every replica current' : `; ${lagging}`}`,
  };
}
