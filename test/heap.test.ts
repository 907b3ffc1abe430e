/**
 * The heap setting of the `troupe` processes (src/bin/heap.ts): allocation-site pretenuring off, unless
 * the operator gave node a pretenuring flag of their own.
 */
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { NO_PRETENURING, heapFlags } from '../src/bin/heap.js';

describe('heap flags', () => {
  it('turns allocation-site pretenuring off by default', () => {
    expect(heapFlags([])).toEqual([NO_PRETENURING]);
    // Other node flags, and V8's tracing of pretenuring, are not a choice about it.
    expect(heapFlags(['--conditions=source', '--import', 'tsx', '--trace-pretenuring'])).toEqual([NO_PRETENURING]);
  });

  it("keeps the operator's own choice", () => {
    expect(heapFlags(['--allocation-site-pretenuring'])).toEqual([]);
    expect(heapFlags(['--no-allocation-site-pretenuring'])).toEqual([]);
    expect(heapFlags(['--allocation_site_pretenuring'])).toEqual([]);
  });

  it('the flag is one this node accepts', () => {
    // An unknown flag would be ignored by setFlagsFromString; node refuses it on its command line.
    expect(execFileSync(process.execPath, [NO_PRETENURING, '-e', 'process.stdout.write("ok")'], { encoding: 'utf8' })).toBe('ok');
  });
});
