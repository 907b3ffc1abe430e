/**
 * Structured logs (pino). Every line carries the ids that matter: node, tenant, thread, agent, and the
 * `traceId` (and `spanId`) of the traced message it is about, when tracing is on.
 * On a terminal the lines are pretty (pino-pretty); anywhere else (a pipe, a file, a log shipper) JSON.
 * `TROUPE_LOG_FORMAT=json|pretty` overrides that.
 */
import { pino, type Logger } from 'pino';
import pretty from 'pino-pretty';
import { activeTraceIds } from './tracing.js';

export type { Logger };

/** Pretty when asked, else when stderr is a terminal. */
function prettyWanted(): boolean {
  const format = process.env.TROUPE_LOG_FORMAT;
  if (format === 'json') return false;
  if (format === 'pretty') return true;
  return process.stderr.isTTY === true;
}

export function createLogger(opts: { level?: string; name?: string; destination?: NodeJS.WritableStream } = {}): Logger {
  const level = opts.level ?? process.env.TROUPE_LOG_LEVEL ?? 'info';
  const destination: pino.DestinationStream =
    (opts.destination as pino.DestinationStream | undefined) ??
    // Synchronous, like pino.destination(2): a crash does not lose the lines before it.
    (prettyWanted() ? pretty({ destination: 2, sync: true, translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname' }) : pino.destination(2));
  return pino(
    {
      level,
      base: opts.name ? { name: opts.name } : {},
      // The active span's ids (an agent handling a traced call, a turn's work); nothing when tracing is off.
      // A fresh object each time: pino merges the line's own fields into what the mixin returns.
      mixin: () => activeTraceIds() ?? {},
      // Diagnostic output must not leak secrets passed in context.
      redact: { paths: ['*.password', '*.pass', '*.apiKey', '*.token', '*.authorization'], censor: '[redacted]' },
    },
    destination,
  );
}

/** A logger that drops everything, for tests and library use. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
