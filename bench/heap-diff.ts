/**
 * What a live idle thread holds: V8 heap snapshots of an embedded mesh before and after 1,000 threads with
 * one turn each: the growth per thread in self sizes, summed by node type, then by node type and what
 * first retains each node (the edge it hangs on). bench/PROFILE.md reads them.
 *
 *   node --expose-gc --max-old-space-size=4096 --conditions=source --import tsx bench/heap-diff.ts
 */
import { writeHeapSnapshot } from 'node:v8';
import { mkdirSync, readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeClient } from '../src/sdk/client.js';
import { TroupeNode } from '../src/actors/node.js';
import { MemoryThreadStore } from '../src/store/memory.js';
import { MemoryBus, MemoryTransport } from '../src/transport/memory.js';
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc');
mkdirSync('.tmp', { recursive: true });
const bus = new MemoryBus();
const store = new MemoryThreadStore();
const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(ctx.text, { to: 'user' }) });
const node = await new TroupeNode({ transport: new MemoryTransport({ bus }), tenant: 'demo', store, idleMs: 0, config: { entryAgent: 'echo' } }).start();
const host = await new AgentHost({ transport: new MemoryTransport({ bus }), agent: echo, tenant: 'demo', idempotencyCacheSize: 1 }).start();
await node.registry.waitFor(['echo']);
const client = new TroupeClient(new MemoryTransport({ bus }), 'demo');
const N = 1000;
async function many(prefix: string, n: number): Promise<void> {
  for (let i = 0; i < n; i += 50) {
    await Promise.all(
      Array.from({ length: Math.min(50, n - i) }, (_, k) =>
        client.send('Hello Troupe, please echo this benchmark message back to me.', { threadId: `${prefix}-${i + k}` }),
      ),
    );
  }
}

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[]]; edge_fields: string[]; edge_types: [string[]] } };
  nodes: number[];
  edges: number[];
  strings: string[];
}

type Sums = Map<string, { count: number; size: number }>;

/** Count and self size of the nodes by `type:name`, and by `type <- retainer .edge`. */
function summarize(file: string): { byType: Sums; byRetainer: Sums } {
  const snap = JSON.parse(readFileSync(file, 'utf8')) as Snapshot;
  const { node_fields: f, node_types, edge_fields: ef, edge_types } = snap.snapshot.meta;
  const types = node_types[0];
  const etypes = edge_types[0];
  const nf = f.length;
  const nef = ef.length;
  const [ti, ni, si, eci] = [f.indexOf('type'), f.indexOf('name'), f.indexOf('self_size'), f.indexOf('edge_count')];
  const [eti, eni, eto] = [ef.indexOf('type'), ef.indexOf('name_or_index'), ef.indexOf('to_node')];
  const { nodes, edges, strings } = snap;
  const typeOf = (i: number) => types[nodes[i + ti]!] ?? '?';
  const label = (i: number) => {
    const t = typeOf(i);
    return `${t}:${String(t === 'object' || t === 'closure' ? strings[nodes[i + ni]!] : t).slice(0, 60)}`;
  };
  // The first strong edge that reaches each node.
  const owner = new Map<number, string>();
  for (let i = 0, e = 0; i < nodes.length; i += nf) {
    for (let k = 0; k < nodes[i + eci]!; k++, e += nef) {
      const to = edges[e + eto]!;
      const et = etypes[edges[e + eti]!];
      if (et === 'weak' || owner.has(to)) continue;
      owner.set(to, `${label(i)} .${et === 'element' || et === 'hidden' ? `[${et}]` : String(strings[edges[e + eni]!])}`);
    }
  }
  const byType: Sums = new Map();
  const byRetainer: Sums = new Map();
  const add = (m: Sums, k: string, size: number) => {
    const e = m.get(k) ?? { count: 0, size: 0 };
    e.count++;
    e.size += size;
    m.set(k, e);
  };
  for (let i = 0; i < nodes.length; i += nf) {
    const size = nodes[i + si]!;
    add(byType, label(i), size);
    add(byRetainer, `${typeOf(i)} <- ${owner.get(i) ?? '?'}`, size);
  }
  return { byType, byRetainer };
}

/** The growth per thread, largest first. */
function growth(before: Sums, after: Sums): { total: number; rows: Array<{ key: string; count: number; size: number }> } {
  const rows: Array<{ key: string; count: number; size: number }> = [];
  let total = 0;
  for (const [key, { count, size }] of after) {
    const was = before.get(key) ?? { count: 0, size: 0 };
    total += size - was.size;
    if (size > was.size) rows.push({ key, count: (count - was.count) / N, size: (size - was.size) / N });
  }
  return { total: total / N, rows: rows.sort((x, y) => y.size - x.size) };
}

await many('warm', 200);
await node.threads.releaseThreads(() => true);
for (let i = 0; i < 5; i++) gc();
// Both snapshots first: what summarize() keeps must not be in the second one.
const first = writeHeapSnapshot('.tmp/h0.heapsnapshot');
await many(`t-${randomUUID()}`, N);
for (let i = 0; i < 5; i++) gc();
const second = writeHeapSnapshot('.tmp/h1.heapsnapshot');
const before = summarize(first);
const after = summarize(second);
const types = growth(before.byType, after.byType);
console.log(`self size per live thread: ${types.total.toFixed(0)} B (the memory store's record included)`);
for (const r of types.rows.slice(0, 30)) console.log(`${r.size.toFixed(0).padStart(6)} B  ${r.count.toFixed(1).padStart(6)} objects  ${r.key}`);
console.log('\nby what retains them:');
for (const r of growth(before.byRetainer, after.byRetainer).rows.slice(0, 25)) console.log(`${r.size.toFixed(0).padStart(6)} B  ${r.key}`);
await host.stop();
await node.stop();
