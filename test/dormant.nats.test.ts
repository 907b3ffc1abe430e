/**
 * Dormant threads on durable nodes (`troupe up --nats --dormant`), real processes and a real nats-server:
 * a thread at rest keeps only its committed record in its node's memory, and a node that gives its
 * partition up forgets it, so that when the partition comes back the thread is read from the KV store with
 * what the other node wrote meanwhile, never woken from an older copy.
 */
import { describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import type { ActorInfo, Message } from '../src/protocol/index.js';
import { KvThreadStore } from '../src/store/kv.js';
import { partitionOf } from '../src/transport/jetstream/ingress.js';
import { natsSuite } from './helpers/nats-suite.js';
import { runTroupe, runTroupeJson, spawnTroupe, type ManagedProcess } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const PARTITIONS = 8;
const textOf = (m: Message) => m.parts.flatMap((p) => (p.kind === 'text' ? [p.text] : [])).join('');

const suite = natsSuite();

function startNode(name: string): Promise<ManagedProcess> {
  return spawnTroupe(
    [
      'up',
      '--nats',
      suite.nats.url,
      '--team',
      'test/fixtures/durable-team.ts',
      '--no-agents',
      '--lease-ttl',
      '1500',
      '--partitions',
      String(PARTITIONS),
      '--dormant',
      '200',
    ],
    { ...suite.nats.env, TROUPE_LOG_LEVEL: process.env.NODE_LOG_LEVEL ?? 'info' },
    { name },
    suite.group,
  );
}

/** Each node's partitions and dormant-thread count, from `ps`. */
async function nodes(client: TroupeClient): Promise<Array<{ id: string; partitions: number[]; dormant: number }>> {
  const replies = await client.ps(300);
  return replies
    .flatMap((r) => r.actors)
    .filter((a: ActorInfo) => a.kind === 'node')
    .map((n) => ({ id: n.id, partitions: (n.detail?.['partitions'] as number[] | undefined) ?? [], dormant: Number(n.detail?.['dormantThreads'] ?? 0) }));
}

describe('dormant threads on durable nodes', () => {
  it("a partition that moves away and back: its threads are read from KV with what the other node wrote, not woken from the first node's copy", async () => {
    const agentTransport = await suite.connect('slowecho');
    const echo = defineAgent({
      card: { id: 'slowecho', name: 'Echo', description: 'Echoes' },
      handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }),
    });
    await new AgentHost({ transport: agentTransport, agent: echo, heartbeatMs: 500 }).start();
    const nodeA = await startNode('node A');
    const client = new TroupeClient(await suite.connect('client'));
    await waitUntil(async () => ((await nodes(client))[0]?.partitions.length === PARTITIONS ? true : undefined), 'node A to own every partition', 15_000);

    // One thread per partition, each one turn on node A, then dormant there.
    const ids: string[] = [];
    for (let i = 0; ids.length < PARTITIONS; i++) {
      const id = `moving-${i}`;
      if (!ids.some((other) => partitionOf(other, PARTITIONS) === partitionOf(id, PARTITIONS))) ids.push(id);
    }
    for (const id of ids) expect((await client.send('one', { threadId: id, timeoutMs: 15_000 })).text).toBe('echo: one');
    await waitUntil(async () => ((await nodes(client))[0]?.dormant === PARTITIONS ? true : undefined), 'the threads to become dormant on node A');
    // The CLI shows a dormant thread from the record its node keeps.
    const seen = await runTroupeJson<{ found: boolean; actor: ActorInfo; value: unknown; events: Array<{ type: string; summary?: string }> }>(
      ['inspect', ids[0]!, '--nats', suite.nats.url, '--json'],
      suite.nats.env,
    );
    expect(seen).toMatchObject({
      found: true,
      value: 'input-required',
      actor: { kind: 'thread', status: 'passivated', detail: { dormant: true, history: 2 } },
    });
    // With the recent events its actor had.
    expect(seen.events.map((e) => e.type)).toContain('troupe.user.message');
    expect(seen.events.some((e) => e.summary === `${ids[0]}/agentCall`)).toBe(true);
    const shown = await runTroupe(['inspect', ids[0]!, '--nats', suite.nats.url], suite.nats.env);
    expect(shown.stdout).toContain('(dormant: at rest');
    expect(shown.stdout).toContain('recent events:');
    const ps = await runTroupeJson<{ live: number; dormant: number }>(['ps', '--nats', suite.nats.url, '--json'], suite.nats.env);
    expect(ps).toMatchObject({ live: 0, dormant: PARTITIONS });

    // Node B joins and takes some partitions; its threads get a turn there.
    const nodeB = await startNode('node B');
    const split = await waitUntil(
      async () => {
        const all = await nodes(client);
        return all.length === 2 && all.every((n) => n.partitions.length > 0) && all.flatMap((n) => n.partitions).length === PARTITIONS ? all : undefined;
      },
      'the two nodes to share the partitions',
      20_000,
    );
    const bId = split.find((n) => nodeB.stderr.includes(n.id))!.id;
    const bParts = split.find((n) => n.id === bId)!.partitions;
    const moved = ids.filter((id) => bParts.includes(partitionOf(id, PARTITIONS)));
    expect(moved.length).toBeGreaterThan(0);
    // Node A forgot the threads whose partitions it gave up.
    expect(split.find((n) => n.id !== bId)!.dormant).toBe(PARTITIONS - moved.length);
    for (const id of moved) expect((await client.send('two (on B)', { threadId: id, timeoutMs: 15_000 })).text).toBe('echo: two (on B)');

    // Node B stops: node A owns everything again and the next turn of each moved thread carries B's turn.
    await nodeB.kill('SIGTERM');
    await waitUntil(
      async () => ((await nodes(client)).find((n) => n.id !== bId)?.partitions.length === PARTITIONS ? true : undefined),
      'node A to own every partition again',
      20_000,
    );
    for (const id of ids) expect((await client.send('three', { threadId: id, timeoutMs: 15_000 })).text).toBe('echo: three');
    const store = await KvThreadStore.open((await suite.connect('reader')).connection);
    for (const id of ids) {
      const stored = await waitUntil(async () => {
        const r = await store.get('demo', id);
        return r && (r.record.task.history?.length ?? 0) >= (moved.includes(id) ? 6 : 4) ? r : undefined;
      }, `the history of ${id}`);
      const expected = moved.includes(id)
        ? ['one', 'echo: one', 'two (on B)', 'echo: two (on B)', 'three', 'echo: three']
        : ['one', 'echo: one', 'three', 'echo: three'];
      expect(stored.record.task.history?.map(textOf)).toEqual(expected);
    }
    expect(nodeA.stderr).not.toMatch(/could not commit thread state/);
  }, 120_000);
});
