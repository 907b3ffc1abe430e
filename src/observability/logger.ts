/** Structured logs (pino). Every line carries the ids that matter: node, tenant, thread, agent. */
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(opts: { level?: string; name?: string; destination?: NodeJS.WritableStream } = {}): Logger {
  const level = opts.level ?? process.env.TROUPE_LOG_LEVEL ?? 'info';
  return pino(
    {
      level,
      base: opts.name ? { name: opts.name } : {},
      // Diagnostic output must not leak secrets passed in context.
      redact: { paths: ['*.password', '*.pass', '*.apiKey', '*.token', '*.authorization'], censor: '[redacted]' },
    },
    (opts.destination as pino.DestinationStream | undefined) ?? pino.destination(2),
  );
}

/** A logger that drops everything, for tests and library use. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
