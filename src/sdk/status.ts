/**
 * Is the mesh of a tenant serving? Asked as an operator (the ctl subjects): `troupe status`, and the
 * gateway's `GET /diagnostics/ready`. One process's own readiness is src/observability/probes.ts; this is
 * the mesh seen from outside, across its processes:
 *
 *   nats        the client's connection is up
 *   partitions  nodes answered, and between them they own every inbound partition (durable ingress)
 *   store       a node answered a read of the thread store
 *   agents      some agent is registered (in a node's registry: announced on its own registry.<A>)
 *
 * Each check says what it saw (`detail`) and, when it fails, what to do (`hint`).
 */
import type { TroupeClient } from './client.js';

/**
 * The most partitions a node takes (`troupe up --partitions`). What a process answers to `ps` is read only
 * within it: a reply may come from any process on the hello subject, an agent's too.
 */
const MAX_PARTITIONS = 1024;
const isPartition = (p: unknown): p is number => Number.isSafeInteger(p) && (p as number) >= 0 && (p as number) < MAX_PARTITIONS;

export interface MeshCheck {
  ok: boolean;
  /** What was seen, for a person. */
  detail: string;
  /** When it fails: what to do next. */
  hint?: string;
  [field: string]: unknown;
}

export interface MeshStatus {
  ready: boolean;
  /** `streams` only when asked (`troupe status --streams`). */
  checks: { nats: MeshCheck; partitions: MeshCheck; store: MeshCheck; agents: MeshCheck; streams?: MeshCheck };
}

export interface MeshStatusOptions {
  /** Inbound partitions the nodes should own between them. Default: the count the nodes report. */
  partitions?: number | undefined;
  /** How long to gather the processes' answers (ms). Default 500. */
  windowMs?: number | undefined;
}

export async function meshStatus(client: TroupeClient, opts: MeshStatusOptions = {}): Promise<MeshStatus> {
  const transport = client.transport;
  const natsError = transport.closed
    ? 'the connection is closed'
    : await transport.flush().then(
        () => undefined,
        (err: unknown) => (err as Error).message,
      );
  const nats: MeshCheck = natsError
    ? {
        ok: false,
        transport: transport.name,
        error: natsError,
        detail: `no connection to ${transport.name}: ${natsError}`,
        hint: 'check that the NATS server runs and these credentials may connect',
      }
    : { ok: true, transport: transport.name, detail: `connected to ${transport.name}` };

  const storeError = await client.ctl('threads', { limit: 1 }).then(
    () => undefined,
    (err: unknown) => (err as Error).message,
  );
  const store: MeshCheck = storeError
    ? {
        ok: false,
        error: storeError,
        detail: `no node read the thread store: ${storeError}`,
        hint: 'start a node (troupe up), or look at its log for the store',
      }
    : { ok: true, detail: 'a node read the thread store' };

  const replies = await client.ps(opts.windowMs ?? 500).catch(() => []);
  const nodeActors = replies.flatMap((r) => r.actors.filter((a) => a.kind === 'node'));
  const partitionsOf = (detail: Record<string, unknown> | undefined): number[] | undefined => {
    const listed = detail?.['partitions'];
    return Array.isArray(listed) ? listed.filter(isPartition) : undefined;
  };
  const lists = nodeActors.map((n) => partitionsOf(n.detail));
  const owned = new Set(lists.flatMap((l) => l ?? []));
  const durable = lists.some((l) => l !== undefined);
  const counts = nodeActors
    .map((n) => n.detail?.['partitionCount'])
    .filter((c): c is number => Number.isSafeInteger(c) && (c as number) >= 1 && (c as number) <= MAX_PARTITIONS);
  const reported = Math.max(0, ...counts);
  const expected = opts.partitions ?? (reported || (durable ? Math.max(0, ...owned) + 1 : 0));
  const missing = Array.from({ length: expected }, (_, p) => p).filter((p) => !owned.has(p));
  const shares = nodeActors.map((n, i) => `${n.id}${lists[i] ? ` (${lists[i].length})` : ''}`).join(', ');
  const partitions: MeshCheck = {
    ok: nodeActors.length > 0 && missing.length === 0,
    nodes: nodeActors.map((n) => n.id),
    owned: [...owned].sort((a, b) => a - b),
    ...(missing.length ? { missing } : {}),
    detail:
      nodeActors.length === 0
        ? 'no node answered'
        : `${durable ? `${expected - missing.length} of ${expected} owned` : 'no durable ingress'} by ${nodeActors.length} node${nodeActors.length === 1 ? '' : 's'}: ${shares}${missing.length ? `; not owned: ${missing.join(', ')}` : ''}`,
  };
  if (nodeActors.length === 0) partitions.hint = 'start a node: troupe up --nats <url>';
  else if (missing.length)
    partitions.hint =
      "a partition is unowned while nodes take over (a lease ttl) or when the nodes cannot reach the leases bucket; look at the nodes' logs and GET /readyz";

  const registryAgents = replies.flatMap((r) =>
    r.actors.filter((a) => a.kind === 'registry').flatMap((a) => (Array.isArray(a.detail?.['agents']) ? (a.detail['agents'] as string[]) : [])),
  );
  // From the nodes' registries alone: what the agents announced on their own registry subjects.
  const seen = [...new Set(registryAgents.map((a) => a.split('×')[0] ?? a))].sort();
  const agents: MeshCheck = { ok: seen.length > 0, seen, detail: seen.length ? seen.join(', ') : 'no agent registered' };
  if (!agents.ok) agents.hint = 'start an agent: troupe agent <module or agent.yaml> --nats <url>';

  const checks = { nats, partitions, store, agents };
  return { ready: Object.values(checks).every((c) => c.ok), checks };
}
