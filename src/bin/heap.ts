/**
 * The V8 heap setting the `troupe` processes run with.
 *
 * V8 "pretenures" an allocation site (allocates its objects straight in the old generation) once most of
 * what it made has survived a scavenge. In Troupe the same constructors make objects that live on (a
 * thread's actor, its snapshot) and objects that die within a turn (an agent call's actors, a turn's
 * snapshots), so sites get pretenured whose objects mostly die young, and the old generation fills with
 * garbage that only a full collection takes back. Without pretenuring, embedded turns under load run faster and
 * a handoff spends markedly less time in GC, while the hop and the durable turn do not change (bench/PROFILE.md).
 *
 * `troupe` turns it off at start. An operator who passes a pretenuring flag of their own to node
 * (`node --allocation-site-pretenuring bin/troupe.js …`) keeps it. A program that embeds Troupe decides for
 * itself: `node --no-allocation-site-pretenuring app.js`.
 */
import { setFlagsFromString } from 'node:v8';

export const NO_PRETENURING = '--no-allocation-site-pretenuring';

/** The V8 flags to set at start: none when node was given a pretenuring flag already. */
export function heapFlags(execArgv: readonly string[]): string[] {
  // V8 reads `_` and `-` in a flag's name alike.
  return execArgv.some((a) => a.replaceAll('_', '-').includes('allocation-site-pretenuring')) ? [] : [NO_PRETENURING];
}

/** Sets `heapFlags(process.execArgv)`; returns what it set. */
export function tuneHeap(execArgv: readonly string[] = process.execArgv): string[] {
  const flags = heapFlags(execArgv);
  for (const f of flags) setFlagsFromString(f);
  return flags;
}
