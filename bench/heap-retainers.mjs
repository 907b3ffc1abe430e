// Sums the growth between .tmp/h0.heapsnapshot and .tmp/h1.heapsnapshot (bench/heap-diff.ts) by node type and
// first retainer, per thread: node bench/heap-retainers.mjs [threads] [types, default array].
import { readFileSync } from 'node:fs';
function agg(file, want) {
  const snap = JSON.parse(readFileSync(file, 'utf8'));
  const meta = snap.snapshot.meta; const f = meta.node_fields; const nf = f.length; const ef = meta.edge_fields; const nef = ef.length;
  const types = meta.node_types[0]; const etypes = meta.edge_types[0];
  const ti = f.indexOf('type'), ni = f.indexOf('name'), si = f.indexOf('self_size'), eci = f.indexOf('edge_count');
  const eti = ef.indexOf('type'), eni = ef.indexOf('name_or_index'), eto = ef.indexOf('to_node');
  const nodes = snap.nodes, edges = snap.edges, S = snap.strings;
  const label = (i) => { const t = types[nodes[i + ti]]; return `${t}:${String(S[nodes[i + ni]]).slice(0, 50)}`; };
  const owner = new Map();
  let e = 0;
  for (let i = 0; i < nodes.length; i += nf) {
    const ec = nodes[i + eci];
    for (let k = 0; k < ec; k++, e += nef) {
      const to = edges[e + eto]; const et = etypes[edges[e + eti]];
      if (et === 'weak') continue;
      if (!owner.has(to)) { const nm = et === 'element' || et === 'hidden' ? `[${et}]` : String(S[edges[e + eni]]); owner.set(to, `${label(i)} .${nm}`); }
    }
  }
  const m = new Map();
  for (let i = 0; i < nodes.length; i += nf) {
    const t = types[nodes[i + ti]]; if (!want.includes(t)) continue;
    const k = `${t} <- ${owner.get(i) ?? '?'}`; m.set(k, (m.get(k) ?? 0) + nodes[i + si]);
  }
  return m;
}
const want = process.argv[3] ? process.argv[3].split(',') : ['array'];
const a = agg('.tmp/h0.heapsnapshot', want), b = agg('.tmp/h1.heapsnapshot', want);
const N = Number(process.argv[2] ?? 1000);
const rows = [...b].map(([k, v]) => [k, (v - (a.get(k) ?? 0)) / N]).filter((r) => r[1] > 20).sort((x, y) => y[1] - x[1]);
for (const [k, v] of rows.slice(0, 25)) console.log(`${v.toFixed(0).padStart(6)} B  ${k}`);
