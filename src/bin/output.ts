/** CLI output: tables and colours for people on a TTY, plain JSON for scripts (`--json`). */
import Table from 'cli-table3';
import pc from 'picocolors';
import { ERROR_CODES, TroupeError } from '../protocol/errors.js';
import { TransportError } from '../transport/types.js';

export const color = pc.createColors(Boolean(process.stdout.isTTY) && !process.env.NO_COLOR);

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

export function table(head: string[], rows: Array<Array<string | number | undefined>>): string {
  const t = new Table({
    head: head.map((h) => color.bold(h)),
    style: { head: [], border: [], compact: true },
    chars: {
      top: '',
      'top-mid': '',
      'top-left': '',
      'top-right': '',
      bottom: '',
      'bottom-mid': '',
      'bottom-left': '',
      'bottom-right': '',
      left: '',
      'left-mid': '',
      mid: '',
      'mid-mid': '',
      right: '',
      'right-mid': '',
      middle: '  ',
    },
  });
  for (const row of rows) t.push(row.map((c) => (c === undefined ? '' : String(c))));
  return t.toString();
}

const STATE_COLORS: Record<string, (s: string) => string> = {
  'input-required': color.yellow,
  completed: color.green,
  canceled: color.gray,
  failed: color.red,
  rejected: color.red,
  running: color.green,
};

export function colorState(state: string): string {
  const key = Object.keys(STATE_COLORS).find((k) => state.startsWith(k));
  if (key) return STATE_COLORS[key]!(state);
  if (state.startsWith('working') || state.includes('busy') || state.includes('calling')) return color.cyan(state);
  return state;
}

/** Prints an error with what to do next and returns the exit code (2 for bad usage, 1 otherwise). */
export function reportError(err: unknown, json: boolean): number {
  let code: string | undefined;
  let message = err instanceof Error ? err.message : String(err);
  let hint = '';
  let exit = 1;
  if (err instanceof TransportError) {
    code = `TRANSPORT_${err.reason}`;
    if (err.reason === 'CONNECT')
      hint = 'check --nats / TROUPE_NATS_URL, the credentials (--creds, --user, TROUPE_NATS_PASSWORD) and for tls:// the CA (--tls-ca)';
  } else if (err instanceof TroupeError) {
    code = err.code;
    hint = ERROR_CODES[err.code].hint;
    // An invalid configuration file is bad input, like a bad option.
    if (err.code === 'CONFIG_INVALID') exit = 2;
  } else if (err instanceof Error && err.name === 'UsageError') {
    code = 'USAGE';
    exit = 2;
  } else if (err instanceof Error && /permissions? violation/i.test(err.message)) {
    code = 'PERMISSION_DENIED';
    message = err.message.split('\n')[0] ?? message;
    hint = 'these NATS credentials may not do this; use credentials of the right role (see README "Security")';
  }
  if (json) {
    process.stdout.write(`${JSON.stringify({ error: { code: code ?? 'ERROR', message, ...(hint ? { hint } : {}) } })}\n`);
  } else {
    const head = code ? `error ${code}` : 'error';
    process.stderr.write(`${color.red(color.bold(head))}: ${message}\n`);
    if (hint && !message.includes(hint)) process.stderr.write(`${color.dim(`  → ${hint}`)}\n`);
  }
  return exit;
}
