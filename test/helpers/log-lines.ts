/**
 * A pino logger (createLogger, JSON lines) whose lines a test reads back, parsed:
 *
 *   const { lines, log } = capturingLogger();
 *   … log given to the code under test …
 *   expect(lines.some((l) => l.msg === 'reconnected to NATS')).toBe(true);
 */
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/observability/logger.js';

/** A parsed line: pino's `level` and `msg`, and whatever fields the line carried. */
export interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

export function capturingLogger(level = 'info'): { lines: LogLine[]; log: Logger } {
  const lines: LogLine[] = [];
  const destination = new Writable({
    write: (chunk, _enc, done) => {
      lines.push(JSON.parse(String(chunk)) as LogLine);
      done();
    },
  });
  return { lines, log: createLogger({ level, destination }) };
}

/** The JSON lines a process logged (its stderr, `TROUPE_LOG_FORMAT` not pretty), parsed; other lines are skipped. */
export function parseLogLines(text: string): LogLine[] {
  return text.split('\n').flatMap((l) => {
    try {
      const line = JSON.parse(l) as unknown;
      return typeof line === 'object' && line !== null && 'msg' in line ? [line as LogLine] : [];
    } catch {
      return [];
    }
  });
}
