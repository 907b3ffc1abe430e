/**
 * `troupe cluster up`: a NATS cluster on this machine for development. It makes (or reuses) a credential
 * store in --dir, writes one nats-server config per server (`<dir>/cluster/<name>.conf`: routes to every
 * server, JetStream on each, the accounts and partition mapping of `troupe creds init`), starts the servers
 * and keeps them up until Ctrl-C. Production clusters use the same configs (deploy/nats-cluster/README.md).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import type { Command } from 'commander';
import { TroupeError } from '../../protocol/errors.js';
import { CredentialStore, initCredentialStore, type ClusterServerFiles } from '../../security/creds.js';
import { SERIALIZABLE_CAS_VERSION, versionAtLeast } from '../../transport/jetstream/server-version.js';
import { LEADERLESS_RESTART_MS, metaGroup } from '../../transport/jetstream/meta-group.js';
import { NatsTransport } from '../../transport/nats.js';
import { UsageError, globals, onShutdown } from '../cli.js';
import { color, printJson, table } from '../output.js';

export interface ClusterUpOptions {
  dir: string;
  servers: number;
  port: number;
  clusterPort: number;
  partitions: number;
  tenants: string;
  host: string;
  name: string;
}

const NATS_BIN = process.env.NATS_SERVER_BIN ?? 'nats-server';
const READY_TIMEOUT_MS = 15_000;
/** How long `cluster up` watches a fresh cluster's meta group form. */
const META_GROUP_WAIT_MS = 90_000;

async function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, host, () => {
      const addr = srv.address();
      srv.close(() => (addr && typeof addr === 'object' ? resolve(addr.port) : reject(new Error('no free port'))));
    });
  });
}

/** Ports base, base+1, … or free ones when base is 0. */
async function ports(base: number, n: number, host: string): Promise<number[]> {
  if (base === 0) return Promise.all(Array.from({ length: n }, () => freePort(host)));
  if (base + n - 1 > 65_535) throw new UsageError(`ports ${base}..${base + n - 1} do not exist: pick a lower --port/--cluster-port`);
  return Array.from({ length: n }, (_, i) => base + i);
}

function launch(file: ClusterServerFiles): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(NATS_BIN, ['-c', file.configFile], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const timer = setTimeout(() => fail(`did not report ready within ${READY_TIMEOUT_MS} ms`), READY_TIMEOUT_MS);
    const fail = (why: string) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(new TroupeError('TRANSPORT_ERROR', `nats-server ${file.name} (${file.configFile}) ${why}:\n${output.slice(-2_000)}`));
    };
    const onData = (d: Buffer) => {
      output += d.toString();
      if (output.includes('Server is ready')) {
        clearTimeout(timer);
        child.stdout?.off('data', onData);
        child.stderr?.off('data', onData);
        // Keep draining its output so the pipe never blocks it.
        child.stdout?.resume();
        child.stderr?.resume();
        resolve(child);
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('error', (err) =>
      fail(
        `could not start (${err.message}); install nats-server (https://docs.nats.io/running-a-nats-service/introduction/installation) or set NATS_SERVER_BIN`,
      ),
    );
    child.once('exit', (code) => fail(`exited with ${code}`));
  });
}

/**
 * The version `nats-server --version` prints; a cluster on one older than 2.9.21 would store two
 * compare-and-set writes at the same revision (server-version.ts), so `cluster up` refuses it.
 */
async function checkServerVersion(servers: number): Promise<void> {
  if (servers < 2) return;
  const printed = await new Promise<string>((resolve) => {
    execFile(NATS_BIN, ['--version'], { timeout: 10_000 }, (err, stdout, stderr) => resolve(err ? '' : `${stdout}${stderr}`));
  });
  // Not startable at all: `launch` says so, with what to install.
  const version = /v?(\d+\.\d+\.\d+\S*)/.exec(printed)?.[1];
  if (!version || versionAtLeast(version, SERIALIZABLE_CAS_VERSION)) return;
  throw new TroupeError(
    'NATS_SERVER_UNSUPPORTED',
    `${NATS_BIN} is nats-server ${version}: a cluster of it stores two compare-and-set writes at the same revision (nats-io/nats-server#4320, ` +
      `fixed in ${SERIALIZABLE_CAS_VERSION}), so two Troupe nodes could both own a partition. Install nats-server ${SERIALIZABLE_CAS_VERSION} or later ` +
      `(2.10 or later recommended: https://github.com/nats-io/nats-server/releases, or Debian trixie's package) and put it first on PATH or set ` +
      `NATS_SERVER_BIN; in a checkout of Troupe, scripts/nats-server.sh fetches Debian's into .tmp/nats-server/.`,
    { version, minimum: SERIALIZABLE_CAS_VERSION },
  );
}

/**
 * Waits until every server is in the JetStream meta group, restarting any the leader left out. A fresh
 * nats-server 2.10 cluster on a busy machine sometimes elects its meta leader with a group one server short
 * and never adds the last one; streams of all replicas are then refused ("no suitable peers for
 * placement") until that server restarts (docs/cluster.md). A cluster where no server answers as the
 * meta leader for `LEADERLESS_RESTART_MS` (20 s) gets one server restarted at a time, in turn. Says what
 * it sees and does on stderr; never throws.
 */
async function settleMetaGroup(files: ClusterServerFiles[], systemCreds: string, restart: (i: number) => Promise<void>, stopped: () => boolean): Promise<void> {
  const urls = files.map((f) => f.url);
  const started = Date.now();
  let lastRestart = 0;
  let nextInTurn = 0;
  while (!stopped() && Date.now() - started < META_GROUP_WAIT_MS) {
    let why = '';
    const meta = await NatsTransport.connect({ servers: urls, creds: systemCreds, name: 'troupe-cluster-up', maxReconnectAttempts: 0 })
      .then((t) => metaGroup(t, files.length).finally(() => t.close()))
      .catch((err: unknown) => {
        why = `the system user could not ask: ${(err as Error)?.message ?? String(err)}`;
        return undefined;
      });
    if (meta && meta.members.length >= files.length) {
      if (lastRestart) process.stderr.write(`${color.green('✓')} JetStream meta group of ${files.length} formed (leader ${meta.leader})\n`);
      return;
    }
    const waited = Date.now() - started;
    if (meta && waited > 8_000 && Date.now() - lastRestart > 15_000) {
      const left = files.map((f, i) => ({ f, i })).filter(({ f }) => !meta.members.includes(f.name));
      process.stderr.write(
        `${color.yellow('!')} nats-server ${left.map(({ f }) => f.name).join(', ')} left out of the JetStream meta group (leader ${meta.leader} counts ${meta.members.join(', ')}); restarting it\n`,
      );
      lastRestart = Date.now();
      for (const { i } of left) await restart(i).catch((err: unknown) => process.stderr.write(`${color.red('✗')} ${(err as Error).message}\n`));
    } else if (!meta && waited > LEADERLESS_RESTART_MS && Date.now() - lastRestart > 15_000) {
      const i = nextInTurn++ % files.length;
      process.stderr.write(
        `${color.yellow('!')} no server answers as the JetStream meta leader after ${Math.round(waited / 1000)} s${why ? ` (${why})` : ''}; restarting nats-server ${files[i]!.name}\n`,
      );
      lastRestart = Date.now();
      await restart(i).catch((err: unknown) => process.stderr.write(`${color.red('✗')} ${(err as Error).message}\n`));
    }
    await new Promise((r) => setTimeout(r, 1_000));
  }
  if (!stopped())
    process.stderr.write(
      `${color.yellow('!')} JetStream has not formed a meta group of all ${files.length} servers after ${META_GROUP_WAIT_MS / 1000} s; streams of ${files.length} replicas will wait\n`,
    );
}

export async function up(opts: ClusterUpOptions, cmd: Command): Promise<void> {
  const g = globals(cmd);
  if (opts.servers < 1) throw new UsageError('--servers must be at least 1');
  await checkServerVersion(opts.servers);
  const clientPorts = await ports(opts.port, opts.servers, opts.host);
  const routePorts = await ports(opts.clusterPort, opts.servers, opts.host);
  let store: CredentialStore;
  let created = false;
  try {
    store = await CredentialStore.open(opts.dir);
  } catch (err) {
    if (!(err instanceof TroupeError && err.code === 'CREDENTIALS_NOT_FOUND')) throw err;
    const tenants = opts.tenants
      .split(',')
      .map((t) => t.trim())
      .filter(Boolean);
    store = await initCredentialStore({ dir: opts.dir, tenants, partitions: opts.partitions, host: opts.host, port: clientPorts[0]! });
    created = true;
  }
  const files = await store.writeClusterConfigs({
    name: opts.name,
    host: opts.host,
    servers: clientPorts.map((port, i) => ({ name: `n${i + 1}`, port, clusterPort: routePorts[i]! })),
  });
  const children: ChildProcess[] = [];
  try {
    for (const child of await Promise.all(files.map(launch))) children.push(child);
  } catch (err) {
    for (const c of children) c.kill('SIGTERM');
    throw err;
  }
  const url = files.map((f) => f.url).join(',');
  const node = store.credsFile(store.tenants[0]!, 'node');
  if (g.json) {
    printJson({ dir: store.dir, created, url, servers: files.map((f, i) => ({ ...f, pid: children[i]!.pid })) });
  } else {
    process.stdout.write(
      [
        `${color.green('✓')} NATS cluster "${opts.name}" up: ${files.length} servers, JetStream on each (store ${store.dir}${created ? ', created' : ''})`,
        '',
        table(
          ['server', 'url', 'routes', 'pid', 'config'],
          files.map((f, i) => [f.name, f.url, `${opts.host}:${f.clusterPort}`, children[i]!.pid, f.configFile]),
        ),
        '',
        'Start nodes (each reconnects across the servers), with 3 replicas of every stream and bucket:',
        `  troupe up --nats ${url} --creds ${node} --replicas ${Math.min(3, files.length)}`,
        'Ctrl-C stops the servers; their data stays in the store for the next `troupe cluster up`.',
        '',
      ].join('\n'),
    );
  }
  let stopping = false;
  /** Servers being restarted on purpose: their exit is not news. */
  const restarting = new Set<number>();
  const watchExit = (i: number) => {
    const child = children[i]!;
    child.once('exit', (code, signal) => {
      if (!stopping && !restarting.has(i) && children[i] === child)
        process.stderr.write(`${color.red('✗')} nats-server ${files[i]!.name} exited (${signal ?? code}); the others keep running\n`);
    });
  };
  for (const i of children.keys()) watchExit(i);
  const restart = async (i: number) => {
    const old = children[i]!;
    restarting.add(i);
    try {
      await new Promise<void>((resolve) => {
        if (old.exitCode !== null || old.signalCode !== null) return resolve();
        const timer = setTimeout(() => old.kill('SIGKILL'), 5_000);
        old.once('exit', () => (clearTimeout(timer), resolve()));
        old.kill('SIGTERM');
      });
      if (stopping) return;
      children[i] = await launch(files[i]!);
      watchExit(i);
    } finally {
      restarting.delete(i);
    }
  };
  const settled = files.length > 1 ? settleMetaGroup(files, store.systemCredsFile, restart, () => stopping) : Promise.resolve();
  onShutdown(async () => {
    stopping = true;
    await settled;
    await Promise.all(
      children.map(
        (c) =>
          new Promise<void>((resolve) => {
            if (c.exitCode !== null || c.signalCode !== null) return resolve();
            const timer = setTimeout(() => c.kill('SIGKILL'), 5_000);
            c.once('exit', () => (clearTimeout(timer), resolve()));
            c.kill('SIGTERM');
          }),
      ),
    );
  });
}
