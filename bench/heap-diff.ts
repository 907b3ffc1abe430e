/**
 * What a live idle thread holds: V8 heap snapshots of an embedded mesh before and after 1,000 threads with
 * one turn each, summed by node type (self sizes per thread). Then bench/heap-retainers.mjs sums the same
 * by what retains each node. bench/PROFILE.md reads them.
 *
 *   node --expose-gc --conditions=source --import tsx bench/heap-diff.ts
 *   node --max-old-space-size=4096 bench/heap-retainers.mjs 1000
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
    await Promise.all(Array.from({ length: Math.min(50, n - i) }, (_, k) => client.send('Hello Troupe, please echo this benchmark message back to me.', { threadId: `${prefix}-${i + k}` })));
  }
}

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[]] } };
  nodes: number[];
  strings: string[];
}

/** Count and self size by `type:name`. */
function summarize(file: string): Map<string, { count: number; size: number }> {
  const snap = JSON.parse(readFileSync(file, 'utf8')) as Snapshot;
  const f = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const nf = f.length;
  const ti = f.indexOf('type');
  const ni = f.indexOf('name');
  const si = f.indexOf('self_size');
  const m = new Map<string, { count: number; size: number }>();
  for (let i = 0; i < snap.nodes.length; i += nf) {
    const t = types[snap.nodes[i + ti]!] ?? '?';
    const name = t === 'object' || t === 'closure' ? snap.strings[snap.nodes[i + ni]!] : t;
    const k = `${t}:${String(name).slice(0, 60)}`;
    const e = m.get(k) ?? { count: 0, size: 0 };
    e.count++;
    e.size += snap.nodes[i + si]!;
    m.set(k, e);
  }
  return m;
}

await many('warm', 200);
await node.threads.releaseThreads(() => true);
for (let i = 0; i < 5; i++) gc();
const before = summarize(writeHeapSnapshot('.tmp/h0.heapsnapshot'));
await many(`t-${randomUUID()}`, N);
for (let i = 0; i < 5; i++) gc();
const after = summarize(writeHeapSnapshot('.tmp/h1.heapsnapshot'));
const rows: Array<{ key: string; count: number; size: number }> = [];
let total = 0;
for (const [key, { count, size }] of after) {
  const was = before.get(key) ?? { count: 0, size: 0 };
  total += size - was.size;
  if (size > was.size) rows.push({ key, count: (count - was.count) / N, size: (size - was.size) / N });
}
rows.sort((x, y) => y.size - x.size);
console.log(`self size per live thread: ${(total / N).toFixed(0)} B (the memory store's record included)`);
for (const r of rows.slice(0, 30)) console.log(`${r.size.toFixed(0).padStart(6)} B  ${r.count.toFixed(1).padStart(6)} objects  ${r.key}`);
await host.stop();
await node.stop();
