/**
 * What Troupe needs of the nats-server it runs on.
 *
 * One owner per thread rests on compare-and-set: a partition's lease is taken and renewed, and a thread's
 * record written, only at the revision the writer read (`Nats-Expected-Last-Subject-Sequence`). Before
 * 2.9.21 a replicated stream checked that header only before proposing a write to its peers, not when the
 * write was applied, so concurrent writes at the same revision all passed the check and were all stored
 * (nats-io/nats-server#4320). Measured on Debian bookworm's 2.9.10 with 3 servers and a bucket of 3
 * replicas: 6 updates at one revision, sent at once, had more than one winner in 298 rounds of 300; on
 * 2.10.27, in none (docs/cluster.md). Two nodes would both hold a partition, or both write a turn of the
 * same thread. A single server (1 replica) checks it when it stores the write, on every version.
 */
import { TroupeError } from '../../protocol/errors.js';

/** The first release whose replicated streams refuse a write at a revision that moved (nats-io/nats-server#4320). */
export const SERIALIZABLE_CAS_VERSION = '2.9.21';

/** `[major, minor, patch]` of a version such as `2.10.27` or `v2.11.0-RC.1`; undefined when it is not one. */
export function parseServerVersion(version: string): [number, number, number] | undefined {
  const m = /^v?(\d{1,6})\.(\d{1,6})\.(\d{1,6})(?:[-+].*)?$/.exec(version.trim());
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

/** Whether `version` is at least `min` (both as nats-server prints them). A version that cannot be read is not. */
export function versionAtLeast(version: string, min: string): boolean {
  const a = parseServerVersion(version);
  const b = parseServerVersion(min);
  if (!a || !b) return false;
  for (let i = 0; i < 3; i++) if (a[i]! !== b[i]!) return a[i]! > b[i]!;
  return true;
}

/**
 * Throws NATS_SERVER_UNSUPPORTED when `what` (a bucket whose writes are compare-and-set) has more than one
 * replica on a server older than 2.9.21. `serverVersion` is the version of the server this connection
 * reached (`nc.info.version`); the other servers of a cluster are not asked, so the message says every
 * server must be upgraded.
 */
export function requireSerializableCas(serverVersion: string | undefined, what: string, replicas: number): void {
  if (replicas <= 1 || serverVersion === undefined || versionAtLeast(serverVersion, SERIALIZABLE_CAS_VERSION)) return;
  throw new TroupeError(
    'NATS_SERVER_UNSUPPORTED',
    `${what} has ${replicas} replicas, and nats-server ${serverVersion} stores two compare-and-set writes at the same revision on a ` +
      `replicated stream (nats-io/nats-server#4320, fixed in ${SERIALIZABLE_CAS_VERSION}): two nodes could both own a partition or both write ` +
      `a turn of the same thread. Upgrade every server of the cluster to ${SERIALIZABLE_CAS_VERSION} or later (2.10 or later recommended), ` +
      `or run with --replicas 1 on a single server.`,
    { serverVersion, replicas, minimum: SERIALIZABLE_CAS_VERSION },
  );
}
