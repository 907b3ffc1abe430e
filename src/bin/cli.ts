/**
 * What every `troupe` command shares: global options, connecting to NATS, one-shot clients, shutdown on
 * signals, and option parsers that refuse bad values with exit code 2 (commander's usage errors).
 */
import { InvalidArgumentError, type Command } from 'commander';
import { isValidId } from '../protocol/ids.js';
import { inboxPrefixOf } from '../transport/subjects.js';
import type { TroupeClient } from '../sdk/client.js';
import type { NatsTransport } from '../transport/nats.js';
import type { Logger } from '../observability/logger.js';
import { Readiness } from '../observability/probes.js';
import { color } from './output.js';

export interface GlobalOpts {
  nats?: string;
  user?: string;
  password?: string;
  creds?: string;
  /** CA file to trust for tls:// servers (`<dir>/tls/ca.pem` from `troupe creds init --tls`). */
  tlsCa?: string;
  tenant: string;
  json?: boolean;
  logLevel?: string;
}

export function globals(cmd: Command): GlobalOpts {
  return cmd.optsWithGlobals<GlobalOpts>();
}

/**
 * Who this process is on the mesh: the name in its credentials file (the user JWT's `name`), else its
 * NATS user, else `cli`. The broker decides what that identity may do; this only picks the subjects and
 * the inbox prefix it has to use.
 */
export async function principalOf(g: GlobalOpts): Promise<string> {
  if (g.creds) {
    const { readCredsIdentity } = await import('../security/creds.js');
    const id = await readCredsIdentity(g.creds);
    if (isValidId('principal', id.name)) return id.name;
  }
  return g.user ?? 'cli';
}

/**
 * The tenant a command works in: `--tenant` / TROUPE_TENANT when given, else the tenant named in the
 * `--creds` file (`troupe creds` tags each user with its tenant), else `demo`. Given both, they must agree:
 * the broker would refuse every subject of the other tenant, so this says so before connecting (exit 2).
 * `fromCreds: false` (the `creds` commands, whose --tenant names a tenant of the store) skips the file.
 */
export async function resolveTenant(g: { tenant?: string | undefined; creds?: string | undefined }, opts: { fromCreds?: boolean } = {}): Promise<string> {
  let credsTenant: string | undefined;
  if (g.creds && opts.fromCreds !== false) {
    const { readCredsIdentity } = await import('../security/creds.js');
    // An unreadable file is reported by the connection that uses it, with what to do.
    credsTenant = (await readCredsIdentity(g.creds).catch(() => undefined))?.tenant;
  }
  if (g.tenant !== undefined && credsTenant !== undefined && g.tenant !== credsTenant) {
    throw new UsageError(
      `--tenant (or TROUPE_TENANT) is "${g.tenant}" but the credentials ${g.creds} are for tenant "${credsTenant}": leave out --tenant to use "${credsTenant}", or use credentials of tenant "${g.tenant}" (troupe creds ls)`,
    );
  }
  return g.tenant ?? credsTenant ?? 'demo';
}

/**
 * Connects to the NATS servers named by --nats (a comma-separated list reconnects across them). A
 * long-lived process's connection tells `log` when it is lost and regained.
 */
export async function connect(g: GlobalOpts, name: string, longLived = false, log?: Logger): Promise<NatsTransport> {
  if (!g.nats) throw new UsageError('this command needs a NATS server: pass --nats nats://127.0.0.1:4222 or set TROUPE_NATS_URL');
  const { NatsTransport } = await import('../transport/nats.js');
  return NatsTransport.connect({
    servers: g.nats
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    name,
    inboxPrefix: inboxPrefixOf(await principalOf(g)),
    // A node or an agent rides out a NATS restart; a one-shot command fails fast.
    ...(longLived ? { maxReconnectAttempts: -1 } : {}),
    ...(log ? { log } : {}),
    ...(g.user ? { user: g.user } : {}),
    ...(g.password ? { pass: g.password } : {}),
    ...(g.creds ? { creds: g.creds } : {}),
    ...(g.tlsCa ? { tls: { caFile: g.tlsCa } } : {}),
  });
}

/** Runs a one-shot command with a client on its own NATS connection, drained afterwards. */
export async function withClient(g: GlobalOpts, fn: (client: TroupeClient) => Promise<void>): Promise<void> {
  const transport = await connect(g, 'troupe-cli');
  const { TroupeClient } = await import('../sdk/client.js');
  try {
    await fn(new TroupeClient(transport, { tenant: g.tenant, principal: await principalOf(g) }));
  } finally {
    await transport.drain().catch(() => undefined);
  }
}

/**
 * Keeps the process up until SIGINT/SIGTERM, then runs `fn`. A second signal exits at once. The interval
 * keeps the event loop alive for meshes that hold no socket (the embedded one).
 */
export function onShutdown(fn: () => Promise<void>, readiness?: Readiness): void {
  let stopping = false;
  const keepAlive = setInterval(() => undefined, 1 << 30);
  const handler = (signal: string) => {
    if (stopping) process.exit(1);
    stopping = true;
    // Not ready from the signal on: an orchestrator stops sending work before the process drains.
    readiness?.stopping();
    process.stderr.write(color.dim(`\n${signal}: draining…\n`));
    fn()
      .then(() => {
        clearInterval(keepAlive);
        process.exit(0);
      })
      .catch(() => process.exit(1));
  };
  process.on('SIGINT', () => handler('SIGINT'));
  process.on('SIGTERM', () => handler('SIGTERM'));
}

/** A mistake in how the command was called: exit code 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** An integer option in [min, max]; anything else is refused before the command runs. */
export function int(min: number, max = Number.MAX_SAFE_INTEGER): (value: string) => number {
  return (value: string) => {
    if (!/^-?\d+$/.test(value.trim())) throw new InvalidArgumentError(`"${value}" is not a whole number.`);
    const n = Number(value);
    if (n < min || n > max) throw new InvalidArgumentError(`${n} is out of range (${min}..${max}).`);
    return n;
  };
}

/**
 * Metrics and traces of a long-running command: the OpenTelemetry SDK when OTEL_EXPORTER_OTLP_ENDPOINT is
 * set (before any work, so every span is exported), and Prometheus metrics on `--metrics-port`, with the
 * process's probes (GET /healthz, GET /readyz: `readiness`, to which the command adds its checks and
 * which it marks started). `stop` flushes the spans and closes the metrics port (for onShutdown, last).
 */
export async function startObservability(
  opts: { metricsPort?: number; metricsHost?: string },
  serviceName: string,
  logger: { info: (obj: object, msg: string) => void },
): Promise<{ readiness: Readiness; stop: () => Promise<void> }> {
  const readiness = new Readiness();
  const { startTracing } = await import('../observability/tracing.js');
  const tracing = await startTracing({ serviceName });
  if (tracing)
    logger.info({ endpoint: process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? process.env.OTEL_EXPORTER_OTLP_ENDPOINT }, 'exporting traces over OTLP/HTTP');
  let metrics: { url: string; close(): Promise<void> } | undefined;
  if (opts.metricsPort !== undefined) {
    const { serveMetrics } = await import('../observability/metrics.js');
    try {
      metrics = await serveMetrics(opts.metricsPort, opts.metricsHost ?? '127.0.0.1', readiness);
    } catch (err) {
      throw new UsageError(
        `cannot serve metrics on ${opts.metricsHost ?? '127.0.0.1'}:${opts.metricsPort} (${(err as Error).message}): pick another --metrics-port`,
      );
    }
    process.stderr.write(`${color.dim(`metrics: ${metrics.url} (probes: /healthz, /readyz)`)}\n`);
  }
  return {
    readiness,
    stop: async () => {
      await metrics?.close();
      await tracing?.shutdown();
    },
  };
}
