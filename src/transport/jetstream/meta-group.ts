/**
 * The JetStream meta group of a cluster as its leader reports it, read through the system account
 * (`$SYS.REQ.SERVER.PING.JSZ`). A fresh nats-server 2.10 cluster sometimes elects its meta leader with a
 * group one server short and never adds the last one; streams of all replicas are then refused ("no
 * suitable peers for placement") until that server restarts (docs/cluster.md). `troupe cluster up` and the
 * test clusters use this to find the server left out.
 */
import type { NatsTransport } from '../nats.js';

/**
 * How long a fresh cluster may have no server answering as the meta leader before one server is restarted
 * (one at a time, in turn): `troupe cluster up` and the test clusters wait this long.
 */
export const LEADERLESS_RESTART_MS = 20_000;

export interface MetaGroup {
  leader: string;
  /** The leader and the servers it counts as members and does not see offline. */
  members: string[];
}

/** The meta group as its leader reports it; undefined while no server answers as the leader. */
export async function metaGroup(system: NatsTransport, servers: number): Promise<MetaGroup | undefined> {
  const replies = await system.requestMany('$SYS.REQ.SERVER.PING.JSZ', new TextEncoder().encode('{}'), { timeoutMs: 2_000, maxReplies: servers });
  for (const r of replies) {
    const body = JSON.parse(new TextDecoder().decode(r.data)) as {
      server?: { name?: string };
      data?: { meta_cluster?: { leader?: string; replicas?: { name: string; offline?: boolean }[] } };
    };
    const meta = body.data?.meta_cluster;
    // Only the leader lists the group's other members. One it sees offline cannot take a replica either.
    if (meta?.leader && meta.leader === body.server?.name) {
      return { leader: meta.leader, members: [meta.leader, ...(meta.replicas ?? []).filter((m) => !m.offline).map((m) => m.name)] };
    }
  }
  return undefined;
}
