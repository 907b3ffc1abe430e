/** Views of the live mesh and the store: `status`, `ps`, `inspect`, `threads`, `thread`; and `rehydrate`, `delete` (`watch` is in observe.ts). */
import type { Command } from 'commander';
import { globals, UsageError, withClient } from '../cli.js';
import { color, colorState, printJson, table } from '../output.js';
import { META } from '../../protocol/metadata.js';
import { TroupeError } from '../../protocol/errors.js';
import type { ThreadRow } from '../../protocol/ctl.js';
import { meshStatus, type MeshCheck } from '../../sdk/status.js';
import { streamsHealth, type StreamHealth } from '../../actors/stream-health.js';
import type { NatsTransport } from '../../transport/nats.js';
import type { NatsConnection } from '@nats-io/transport-node';

const FINISHED = new Set(['completed', 'canceled', 'failed', 'rejected']);

/** Is the tenant's mesh serving: one line per check, what it saw, and what to do when it fails; exit 1 when not. */
export async function status(opts: { window: number; partitions?: number; streams?: boolean }, cmd: Command): Promise<void> {
  const g = globals(cmd);
  await withClient(g, async (client) => {
    const report = await meshStatus(client, { windowMs: opts.window, partitions: opts.partitions });
    if (opts.streams) {
      report.checks.streams = await streamsCheck((client.transport as NatsTransport).jetstreamConnection);
      report.ready &&= report.checks.streams.ok;
    }
    if (!report.ready) process.exitCode = 1;
    if (g.json) {
      printJson({ tenant: g.tenant, ...report });
      return;
    }
    process.stdout.write(`mesh of tenant ${g.tenant} on ${client.transport.name}: ${report.ready ? color.green('ready') : color.red('not ready')}\n`);
    for (const [name, check] of Object.entries(report.checks)) {
      process.stdout.write(`  ${check.ok ? color.green('✓') : color.red('✗')} ${name.padEnd(10)} ${check.detail}\n`);
      if (check.hint) process.stdout.write(`    ${color.dim(`→ ${check.hint}`)}\n`);
    }
    const streams = report.checks.streams?.['streams'] as StreamHealth[] | undefined;
    if (streams?.length) {
      process.stdout.write(
        `${table(
          ['STREAM', 'REPLICAS', 'LEADER', 'MESSAGES', ''],
          streams.map((s) => [s.stream, s.replicas, s.leader, s.messages, s.ok ? color.green(s.detail) : color.red(s.detail)]),
        )}\n`,
      );
    }
  });
}

/** `--streams`: every stream and bucket of Troupe with a leader and its replicas current. */
async function streamsCheck(nc: NatsConnection): Promise<MeshCheck> {
  let streams: StreamHealth[];
  try {
    streams = await streamsHealth(nc);
  } catch (err) {
    return { ok: false, detail: (err as Error).message, hint: "run it with a node's credentials (--creds …/node.creds)" };
  }
  const bad = streams.filter((s) => !s.ok);
  return {
    ok: bad.length === 0,
    streams,
    detail:
      bad.length === 0
        ? `${streams.length} streams and buckets, each with a leader and its replicas current`
        : bad.map((s) => `${s.stream}: ${s.detail}`).join('; '),
    ...(bad.length
      ? { hint: 'a stream without a leader takes no writes; a lagging or offline replica is one failure from that: look at the servers (docs/cluster.md)' }
      : {}),
  };
}

export async function ps(opts: { window: number }, cmd: Command): Promise<void> {
  const g = globals(cmd);
  await withClient(g, async (client) => {
    const replies = await client.ps(opts.window);
    const actors = replies.flatMap((r) => r.actors);
    const live = actors.filter((a) => a.kind === 'thread').length;
    // Passivated = persisted threads that are still open but have no live actor on any node.
    const stored = await client.ctl('threads', {}).catch(() => ({ threads: [] as ThreadRow[] }));
    const liveIds = new Set(actors.filter((a) => a.kind === 'thread').map((a) => a.id));
    const passivated = stored.threads.filter((t) => !liveIds.has(t.threadId) && !FINISHED.has(t.state)).length;
    // Of those, the ones whose records a node keeps in memory (at rest, woken without a store read).
    const dormant = actors.filter((a) => a.kind === 'node').reduce((n, a) => n + Number(a.detail?.['dormantThreads'] ?? 0), 0);
    if (g.json) {
      printJson({ actors, live, passivated, dormant, processes: replies.length });
      return;
    }
    if (!actors.length) {
      process.stdout.write(`no actors answered on ${client.transport.name} (tenant ${g.tenant}): start a node with \`troupe up --nats ${g.nats}\`\n`);
      return;
    }
    const order = ['node', 'registry', 'agent', 'llm-agent', 'thread', 'router', 'agent-call', 'handoff', 'orchestration'];
    actors.sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind) || a.id.localeCompare(b.id));
    // Fits 100 columns: a child's id names its thread, so no thread column; long ids are cut in the middle.
    process.stdout.write(
      `${table(
        ['KIND', 'ID', 'STATE', 'HOPS', 'NODE'],
        actors.map((a) => [a.kind, middle(a.id, 40), colorState(middle(a.state, 24)), a.kind === 'thread' ? a.hops : undefined, middle(a.node, 16)]),
      )}\n`,
    );
    const nodes = replies.filter((r) => r.actors.some((a) => a.kind === 'node')).length;
    process.stdout.write(
      color.dim(
        `${live} live threads, ${passivated} passivated (${dormant} of them dormant: kept in memory) · ${nodes} node processes, ${replies.length - nodes} agent processes\n`,
      ),
    );
  });
}

export async function inspect(actorId: string, _opts: unknown, cmd: Command): Promise<void> {
  const g = globals(cmd);
  await withClient(g, async (client) => {
    const found = await client.inspect(actorId);
    if (!found) {
      if (g.json) printJson({ found: false, actorId });
      else process.stdout.write(`no live actor "${actorId}": list them with \`troupe ps\` (a passivated thread shows with \`troupe thread ${actorId}\`)\n`);
      process.exitCode = 1;
      return;
    }
    if (g.json) {
      printJson(found);
      return;
    }
    const dormant = found.actor?.detail?.['dormant'] === true;
    const wakesAt = found.actor?.detail?.['wakesAt'];
    const wakes = typeof wakesAt === 'string' ? `its next message wakes it, or its handoff's deadline at ${wakesAt}` : 'its next message wakes it';
    process.stdout.write(
      `${color.bold(found.actor?.kind ?? 'actor')} ${actorId} on ${found.node}${dormant ? color.dim(` (dormant: at rest, its actor stopped and its record kept; ${wakes})`) : ''}\n`,
    );
    process.stdout.write(`state: ${colorState(JSON.stringify(found.value))}\n`);
    process.stdout.write(`context:\n${JSON.stringify(found.context, null, 2)}\n`);
    if (found.events.length) {
      process.stdout.write(
        `recent events:\n${table(
          ['AT', 'EVENT', 'ACTOR'],
          found.events.map((e) => [e.at, e.type, e.summary]),
        )}\n`,
      );
    }
  });
}

export async function threads(opts: { state?: string; owner?: string; limit: number }, cmd: Command): Promise<void> {
  const g = globals(cmd);
  await withClient(g, async (client) => {
    // Which threads are live is known by the node holding each: ask them all (ps), not the one that lists.
    const [res, replies] = await Promise.all([
      client.ctl('threads', { ...(opts.state ? { state: opts.state } : {}), ...(opts.owner ? { owner: opts.owner } : {}), limit: opts.limit }),
      client.ps(500),
    ]);
    const live = new Map(
      replies
        .flatMap((r) => r.actors)
        .filter((a) => a.kind === 'thread')
        .map((a) => [a.id, a.node]),
    );
    const rows = res.threads.map((t) => ({ ...t, live: live.has(t.threadId), ...(live.has(t.threadId) ? { node: live.get(t.threadId) } : {}) }));
    if (g.json) {
      printJson(rows);
      return;
    }
    process.stdout.write(
      `${table(
        ['THREAD', 'STATE', 'UPDATED', 'REV', 'AGENT', 'MSGS', 'LIVE'],
        rows.map((t) => [
          t.threadId,
          t.corrupt ? color.red(`corrupt: ${t.corrupt.slice(0, 60)}`) : colorState(t.state),
          t.updatedAt,
          t.revision,
          t.isHandoffActive ? `${t.currentActiveAgent ?? '-'} (handoff)` : (t.currentActiveAgent ?? '-'),
          t.totalMessages ?? '-',
          t.live ? `live on ${t.node}` : 'passivated',
        ]),
      )}\n${color.dim(`${rows.length} threads${res.truncated ? ` (the first ${opts.limit}: --limit for more)` : ''}`)}\n`,
    );
  });
}

/** `abcdefgh…` cut to `max` characters with an ellipsis in the middle, so both ends stay readable. */
function middle(text: string, max: number): string {
  if (text.length <= max) return text;
  const head = Math.ceil((max - 1) / 2);
  return `${text.slice(0, head)}…${text.slice(text.length - (max - 1 - head))}`;
}

export async function thread(id: string, _opts: unknown, cmd: Command): Promise<void> {
  const g = globals(cmd);
  await withClient(g, async (client) => {
    const res = await client.ctl('thread', { threadId: id });
    if (g.json) {
      printJson(res);
      return;
    }
    const { task } = res.record;
    process.stdout.write(
      `thread ${id}  state ${colorState(task.status.state)}  revision ${res.revision}  updated ${res.record.updatedAt}  expires ${res.expiresAtUtc ?? 'never'}  owner ${res.record.owner ?? '-'}\n`,
    );
    for (const m of task.history ?? []) {
      const who = m.role === 'user' ? 'user' : String(m.metadata?.[META.agent] ?? 'agent');
      process.stdout.write(`  ${color.bold(who.padEnd(12))} ${m.parts.map((p) => p.text ?? `[${p.kind}]`).join(' ')}\n`);
    }
  });
}

export async function rehydrate(id: string, _opts: unknown, cmd: Command): Promise<void> {
  const g = globals(cmd);
  await withClient(g, async (client) => {
    const state = await client.rehydrate(id);
    if (g.json) printJson({ threadId: id, state });
    else process.stdout.write(`thread ${id} rehydrated: ${colorState(state)}\n`);
  });
}

/** The most threads one `troupe delete --owner` erases (the node lists at most this many). */
const MAX_OWNER_THREADS = 10_000;

export async function deleteThread(id: string | undefined, opts: { owner?: string }, cmd: Command): Promise<void> {
  const g = globals(cmd);
  if (Boolean(id) === Boolean(opts.owner))
    throw new UsageError('name a thread, or every thread of an owner with --owner <principal>[/<user>] (one of the two)');
  if (opts.owner) return deleteOwnerThreads(opts.owner, cmd);
  await withClient(g, async (client) => {
    id = id!;
    const { node, deadLetters } = await client.deleteThread(id);
    if (g.json) printJson({ threadId: id, deleted: true, node, deadLetters });
    else
      process.stdout.write(
        `thread ${id} deleted on ${node}: its record${deadLetters ? ` and ${deadLetters} dead letter${deadLetters === 1 ? '' : 's'}` : ''}; a new message with this id starts a new thread\n`,
      );
  });
}

/**
 * Every thread of one owner (a user who asked to be forgotten): listed by the nodes, each erased by its
 * owning node. A thread in the middle of a turn is reported and kept (exit 1): run it again.
 */
async function deleteOwnerThreads(owner: string, cmd: Command): Promise<void> {
  const g = globals(cmd);
  await withClient(g, async (client) => {
    const listed = await client.ctl('threads', { owner, limit: MAX_OWNER_THREADS });
    const results: Array<{ threadId: string; deleted: boolean; deadLetters?: number; error?: string; code?: string }> = [];
    for (const { threadId } of listed.threads) {
      try {
        results.push({ threadId, deleted: true, deadLetters: (await client.deleteThread(threadId)).deadLetters });
      } catch (err) {
        // Gone meanwhile (its ttl, another delete): what was asked for holds.
        if (err instanceof TroupeError && err.code === 'THREAD_NOT_FOUND') results.push({ threadId, deleted: true, deadLetters: 0 });
        else results.push({ threadId, deleted: false, error: (err as Error).message, ...(err instanceof TroupeError ? { code: err.code } : {}) });
      }
    }
    const kept = results.filter((r) => !r.deleted);
    if (kept.length > 0 || listed.truncated) process.exitCode = 1;
    if (g.json) {
      printJson({ owner, deleted: results.length - kept.length, kept: kept.length, more: listed.truncated === true, threads: results });
      return;
    }
    if (kept.length)
      process.stdout.write(
        `${table(
          ['THREAD', 'KEPT BECAUSE'],
          kept.map((r) => [r.threadId, color.red(`${r.code ?? 'ERROR'}: ${r.error ?? ''}`.slice(0, 90))]),
        )}\n`,
      );
    process.stdout.write(
      `${results.length - kept.length} thread${results.length - kept.length === 1 ? '' : 's'} of ${owner} deleted${kept.length ? `, ${kept.length} kept (run it again)` : ''}${listed.truncated ? `; more than ${MAX_OWNER_THREADS}: run it again for the rest` : ''}\n`,
    );
  });
}

export async function dlq(opts: { limit: number }, cmd: Command): Promise<void> {
  const g = globals(cmd);
  await withClient(g, async (client) => {
    const res = await client.ctl('dlq', { limit: opts.limit });
    if (g.json) {
      printJson(res.entries);
      return;
    }
    if (!res.entries.length) {
      process.stdout.write('no dead-lettered messages\n');
      return;
    }
    process.stdout.write(
      `${table(
        ['SEQ', 'AT', 'CODE', 'TRIES', 'SUBJECT', 'ERROR'],
        res.entries.map((e) => [
          e.seq,
          e.at,
          color.red(e.code),
          e.attempts,
          e.subject.length > 60 ? `${e.subject.slice(0, 60)}…` : e.subject,
          e.error.slice(0, 80),
        ]),
      )}\n${color.dim(`${res.entries.length} dead-lettered messages (newest first)`)}\n`,
    );
  });
}
