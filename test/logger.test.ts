/**
 * Log output: JSON lines when stderr is not a terminal (a pipe here), pretty lines (pino-pretty) when
 * asked with TROUPE_LOG_FORMAT=pretty (as on a terminal), in a real child process writing to stderr.
 */
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

const SCRIPT = `import { createLogger } from './src/observability/logger.ts';
createLogger({ name: 'logtest' }).info({ thread: 't-1' }, 'hello logs');`;

function runLogged(env: Record<string, string>): string {
  // The lines go to stderr: run through a shell redirect so the pipe carries stderr as stdout.
  return execFileSync('sh', ['-c', `"${process.execPath}" --conditions=source --import tsx --input-type=module -e "$SCRIPT" 2>&1`], {
    env: { ...process.env, NO_COLOR: '1', SCRIPT, ...env },
    encoding: 'utf8',
  });
}

describe('log format', () => {
  it('writes one JSON object per line when stderr is not a terminal', () => {
    const out = runLogged({ TROUPE_LOG_FORMAT: '' });
    const line = JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, unknown>;
    expect(line).toMatchObject({ name: 'logtest', thread: 't-1', msg: 'hello logs', level: 30 });
  });

  it('writes pretty lines with TROUPE_LOG_FORMAT=pretty (what a terminal gets)', () => {
    const out = runLogged({ TROUPE_LOG_FORMAT: 'pretty' });
    expect(out).toMatch(/INFO \(logtest\): hello logs/);
    expect(out).toMatch(/thread: "t-1"/);
    expect(() => JSON.parse(out.trim())).toThrow();
  });
});
