/**
 * The arithmetic of balancing partition leases (leases.ts): each node's share, and whether a partition has
 * been free too long. Pure: every node computes the same from the same survey.
 */

/**
 * The leases a node should hold: the partitions split evenly over the live nodes in node-id order, the
 * first `partitions mod nodes` nodes one more (3 nodes, 64 partitions: 22, 21, 21). Every node computes
 * the same split from the same survey, so shares always add up to the partition count.
 */
export function shareOf(nodeId: string, nodes: Iterable<string>, partitions: number): number {
  const sorted = [...new Set(nodes)].sort();
  const n = Math.max(1, sorted.length);
  const rank = Math.max(0, sorted.indexOf(nodeId));
  return Math.floor(partitions / n) + (rank < partitions % n ? 1 : 0);
}

/**
 * Notes a survey in `freeSince` (per partition nobody holds, when surveys first saw it free; a partition
 * seen held is dropped) and says whether any partition has been free for longer than `ttlMs`. Per
 * partition: two partitions each free for a moment, a ttl apart (a give-back taken at once), are not one
 * partition free all along.
 */
export function freeForLong(freeSince: Map<number, number>, taken: ReadonlySet<number>, partitions: number, now: number, ttlMs: number): boolean {
  let long = false;
  for (let p = 0; p < partitions; p++) {
    if (taken.has(p)) {
      freeSince.delete(p);
      continue;
    }
    const since = freeSince.get(p);
    if (since === undefined) freeSince.set(p, now);
    else if (now - since > ttlMs) long = true;
  }
  return long;
}
