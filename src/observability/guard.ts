/**
 * The last line of defence of a long-lived process (node, agent, gateway): an exception that escaped
 * every handler (a listener, an emit, a timer) or a promise nobody awaited is logged with what it
 * carries and counted, and the process keeps serving its other threads. Everything on the request
 * paths catches its own errors; reaching this is a bug worth a log line, not an outage.
 */
import type { Logger } from 'pino';

let installed = false;
let caught = 0;

export function installProcessGuards(log: Logger): void {
  if (installed) return;
  installed = true;
  const report = (kind: string) => (err: unknown) => {
    caught++;
    const details = err && typeof err === 'object' ? (err as { details?: unknown; code?: unknown }) : {};
    log.error({ err, kind, code: details.code, details: details.details, caught }, `${kind} caught by the last-resort guard; still serving`);
  };
  process.on('uncaughtException', report('uncaught exception'));
  process.on('unhandledRejection', report('unhandled rejection'));
}
