/**
 * Does the server split a tenant's inbound messages into as many partitions as this node thinks? The
 * account's subject mapping (`troupe creds init --partitions`) decides which partition subject a thread's
 * messages land on; a node with another count would consume the wrong threads' partitions and refuse
 * every message as "in another partition". So a durable node checks before it takes any lease.
 *
 * How: it subscribes to the probe principal's inbound subjects and publishes a probe per thread id to
 * `troupe.<t>.in.troupe-probe.<thread>`: the server maps it to `….<thread>.<partition>` and delivers it to
 * the subscription with that subject, which says which partition the server chose. Each probe carries
 * `Nats-Expected-Stream` naming no stream, so TROUPE_IN refuses to store it: no node ever consumes one.
 * 32 thread ids make a different count that agrees on all of them practically impossible; when they
 * disagree, the server's count is the smallest one agreeing with every probe.
 */
import { randomBytes } from 'node:crypto';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { TroupeError } from '../../protocol/errors.js';
import { SUBJECT_PREFIX, subjects } from '../subjects.js';
import { partitionOf } from './ingress.js';

/** The principal of the probes (a valid id no client is given: `creds` names are chosen by operators, this one is reserved here). */
const PROBE_PRINCIPAL = 'troupe-partition-probe';
const PROBES = 32;
const MAX_GUESS = 1024;
/** The header that makes the stream refuse the probe. */
const EXPECTED_STREAM = 'Nats-Expected-Stream';

export interface PartitionCheck {
  /** The count the server's mapping uses, when it could be told. */
  serverPartitions?: number;
}

/**
 * Resolves when the server maps `tenant`'s threads into `partitions` partitions exactly as `partitionOf`
 * does; throws PARTITIONS_MISMATCH (with the server's count when it can be inferred) otherwise, or when
 * no mapping answers within `timeoutMs`.
 */
export async function checkPartitionMapping(nc: NatsConnection, tenant: string, partitions: number, timeoutMs = 5_000): Promise<PartitionCheck> {
  const threads = Array.from({ length: PROBES }, (_, i) => `probe-${i}`);
  const prefix = `${SUBJECT_PREFIX}.${tenant}.in.${PROBE_PRINCIPAL}.`;
  const seen = new Map<string, string>();
  const unmapped: string[] = [];
  // A fresh token per check: probes of another node starting at the same moment are not ours.
  const run = randomBytes(5).toString('hex');
  const ids = new Map(threads.map((t) => [`${t}-${run}`, t]));
  let resolveAll!: () => void;
  const all = new Promise<void>((r) => (resolveAll = r));
  const sub = nc.subscribe(`${prefix}>`, {
    callback: (err, msg) => {
      if (err) return;
      const rest = msg.subject.slice(prefix.length).split('.');
      const thread = rest[0] ?? '';
      if (!ids.has(thread)) return;
      if (rest.length === 1) unmapped.push(thread);
      else seen.set(thread, rest[1] ?? '');
      if (seen.size + unmapped.length >= ids.size) resolveAll();
    },
  });
  try {
    await nc.flush();
    const h = natsHeaders();
    h.set(EXPECTED_STREAM, 'troupe-partition-probe-no-stream');
    for (const id of ids.keys()) nc.publish(subjects.threadIn(tenant, PROBE_PRINCIPAL, id), new Uint8Array(0), { headers: h });
    await nc.flush();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([all, new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)))]);
    clearTimeout(timer);
  } finally {
    sub.unsubscribe();
  }
  if (unmapped.length > 0) {
    throw new TroupeError(
      'PARTITIONS_MISMATCH',
      `the server does not partition tenant "${tenant}"'s inbound messages (no subject mapping for ${prefix.slice(0, -PROBE_PRINCIPAL.length - 1)}*.*): run it with the config \`troupe creds init\` writes (server.conf, or cluster/<server>.conf), and check that "${tenant}" is the account of these credentials (\`--tenant\` or TROUPE_TENANT; by default the tenant the credentials name, else demo)`,
      { nodePartitions: partitions },
    );
  }
  if (seen.size === 0) {
    throw new TroupeError(
      'PARTITIONS_MISMATCH',
      `could not check the server's partition mapping for tenant "${tenant}": no probe came back within ${timeoutMs} ms (does this user may publish and subscribe to ${prefix}>?)`,
      { nodePartitions: partitions },
    );
  }
  const observed = [...seen].map(([id, token]) => ({ id, partition: Number(token) }));
  const agrees = (n: number) => observed.every((o) => partitionOf(o.id, n) === o.partition);
  if (agrees(partitions)) return { serverPartitions: partitions };
  let server: number | undefined;
  for (let n = 1; n <= MAX_GUESS && server === undefined; n++) if (agrees(n)) server = n;
  throw new TroupeError(
    'PARTITIONS_MISMATCH',
    server !== undefined
      ? `this node uses ${partitions} partitions but the server maps tenant "${tenant}" into ${server}: start it with --partitions ${server}`
      : `this node uses ${partitions} partitions but the server maps tenant "${tenant}" differently: start it with the --partitions of \`troupe creds init\``,
    { nodePartitions: partitions, ...(server !== undefined ? { serverPartitions: server } : {}) },
  );
}
