// Sums a .cpuprofile's self time by function and by file: `node bench/profile-summary.mjs FILE [top]`.
import { readFileSync } from 'node:fs';

const [file, topArg] = process.argv.slice(2);
const top = Number(topArg ?? 30);
const prof = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(prof.nodes.map((n) => [n.id, n]));
const self = new Map();
const dt = prof.timeDeltas;
for (let i = 0; i < prof.samples.length; i++) self.set(prof.samples[i], (self.get(prof.samples[i]) ?? 0) + (dt[i] ?? 0));
const total = [...self.values()].reduce((a, b) => a + b, 0);
const fn = new Map();
const url = new Map();
for (const [id, us] of self) {
  const { callFrame } = byId.get(id);
  const where = callFrame.url.replace(/^.*\/(node_modules\/|src\/)/, '$1') || '(native)';
  const key = `${callFrame.functionName || '(anonymous)'}  ${where}:${callFrame.lineNumber + 1}`;
  fn.set(key, (fn.get(key) ?? 0) + us);
  const area = where.startsWith('node_modules/')
    ? where
        .split('/')
        .slice(0, where.includes('@') ? 3 : 2)
        .join('/')
    : where;
  url.set(area, (url.get(area) ?? 0) + us);
}
const pct = (us) => `${((100 * us) / total).toFixed(1)}%`.padStart(6);
console.log(`total ${(total / 1e6).toFixed(2)} s sampled\n\nby file / package:`);
for (const [k, v] of [...url].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${pct(v)}  ${k}`);
console.log('\nby function:');
for (const [k, v] of [...fn].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${pct(v)}  ${k}`);
