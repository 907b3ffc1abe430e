/**
 * The V8 profilers over a measured window only (not a server's start, the credentials' signing or a
 * warm-up):
 *
 * - with PROFILE_CPU_DIR set, `profileWindow(what)` starts the CPU profiler and the function it returns
 *   stops it and writes `<what>-<time>.cpuprofile` there (bench/profile-summary.mjs reads it);
 * - `allocationWindow()` starts V8's sampling heap profiler (objects collected by minor and major GC
 *   included) and the function it returns stops it and gives the bytes allocated in all and by the
 *   function that allocated them (a native allocation — a `Set`, a string, `Object.entries` — named with
 *   its JS caller). Allocation does not depend on how busy the machine is, so it compares two versions
 *   of the code where a rate cannot.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';

const cpuDir = process.env.PROFILE_CPU_DIR;

/**
 * The CPU time (user + system, µs) a `/proc/<pid>/stat` or `/proc/<pid>/task/<tid>/stat` file gives (Linux):
 * its fields 14 and 15, in clock ticks of 10 ms. Throws when the file is gone (the process or thread ended).
 */
export function procCpuUs(statFile: string): number {
  const stat = readFileSync(statFile, 'utf8');
  // After the command, which is in parentheses and may hold spaces: utime and stime are fields 12 and 13.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/** Starts the V8 profiler when PROFILE_CPU_DIR is set; the returned function stops it and writes the profile. */
export async function profileWindow(what: string): Promise<() => Promise<void>> {
  if (!cpuDir) return async () => undefined;
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  return async () => {
    const { profile } = await session.post('Profiler.stop');
    mkdirSync(cpuDir, { recursive: true });
    const file = join(cpuDir, `${what.replace(/\W+/g, '-')}-${Date.now()}.cpuprofile`);
    writeFileSync(file, JSON.stringify(profile));
    session.disconnect();
    console.error(`profile of the ${what}: ${file}`);
  };
}

interface SamplingNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: SamplingNode[];
}

export interface Allocation {
  /** Bytes allocated in the window (an estimate: one sample per `interval` bytes on average). */
  total: number;
  /** Bytes by the function that allocated, largest first. */
  byFunction: [string, number][];
}

/**
 * Starts the sampling heap profiler (one sample per `interval` bytes on average); the returned function
 * stops it. `keep` says which allocations count:
 *
 * - `all` (default): every one, collected or not;
 * - `survivors`: what outlived the young generation (what a scavenge collects is left out): what a
 *   scavenge copies, and what makes its pause long;
 * - `live`: what is still alive when the window ends. `survivors` less `live` is what a scavenge copied
 *   (and promoted) and a mark-compact collected later: medium-lived objects.
 */
export async function allocationWindow(opts: { interval?: number; keep?: 'all' | 'survivors' | 'live' } = {}): Promise<() => Promise<Allocation>> {
  const interval = opts.interval ?? Number(process.env.PROFILE_ALLOC_INTERVAL ?? 4_096);
  const keep = opts.keep ?? 'all';
  const session = new Session();
  session.connect();
  await session.post('HeapProfiler.enable');
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: interval,
    includeObjectsCollectedByMajorGC: keep !== 'live',
    includeObjectsCollectedByMinorGC: keep === 'all',
  });
  return async () => {
    const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as { profile: { head: SamplingNode } };
    session.disconnect();
    const byFunction = new Map<string, number>();
    let total = 0;
    const nameOf = ({ callFrame: { functionName, url, lineNumber } }: SamplingNode): string => {
      const where = url.replace(/^.*\/(node_modules\/|src\/|bench\/)/, '$1');
      return where ? `${functionName || '(anonymous)'}  ${where}:${lineNumber + 1}` : functionName || '(native)';
    };
    const walk = (node: SamplingNode, caller: string): void => {
      const native = !node.callFrame.url;
      const name = nameOf(node);
      if (node.selfSize > 0) {
        const key = native ? `${name} <- ${caller}` : name;
        byFunction.set(key, (byFunction.get(key) ?? 0) + node.selfSize);
        total += node.selfSize;
      }
      for (const child of node.children) walk(child, native ? caller : name);
    };
    walk(profile.head, '(root)');
    return { total, byFunction: [...byFunction].sort((a, b) => b[1] - a[1]) };
  };
}

/** `allocation` per unit (a turn, a run), in KiB: the total line and the `top` functions. */
export function printAllocation(allocation: Allocation, units: number, unit: string, top: number): void {
  const per = (bytes: number) => `${(bytes / units / 1024).toFixed(1).padStart(6)} KiB`;
  console.log(`${units} ${unit}s: ${per(allocation.total)} allocated per ${unit}\n\nby function (per ${unit}):`);
  for (const [k, v] of allocation.byFunction.slice(0, top)) console.log(`${per(v)}  ${k}`);
}
