/**
 * The V8 profiler over a measured window only (not a server's start, the credentials' signing or a
 * warm-up): with PROFILE_CPU_DIR set, `profileWindow(what)` starts it and the function it returns stops it
 * and writes `<what>-<time>.cpuprofile` there (bench/profile-summary.mjs reads it).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';

const cpuDir = process.env.PROFILE_CPU_DIR;

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

