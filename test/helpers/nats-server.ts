/**
 * Starts real nats-servers on free ports with their own store dirs. One per suite, in beforeAll/afterAll:
 *
 *   startNatsServer()                  the shipped setup: operator mode with tenants demo and acme and a user
 *                                      per role and agent (creds by name: `nats.as('echo')`, `nats.credsFile('cli')`)
 *   startSecureNatsServer({ tenants }) the same, configurable (tenants, partitions, TLS, users)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { connect as natsConnect, credsAuthenticator, type Authenticator, type NatsConnection, type NodeConnectionOptions } from '@nats-io/transport-node';
import { CredentialStore, initCredentialStore, pushAccountJwts, type AddUserOptions, type UserInfo } from '../../src/security/creds.js';
import { inboxPrefix } from '../../src/security/roles.js';

export const REPO_ROOT = resolve(import.meta.dirname, '../..');
const NATS_BIN = process.env.NATS_SERVER_BIN ?? 'nats-server';

/** Connection options for one user: spread into `NatsTransport.connect` or nats.js `connect`. */
export interface UserConnectOptions {
  servers: string;
  authenticator: Authenticator;
  /** Clients and operators may only receive below `_INBOX_<name>`. */
  inboxPrefix?: string;
}

export interface NatsServerHandle {
  readonly port: number;
  /** `nats://127.0.0.1:<port>`. Every connection must authenticate (no anonymous user, no passwords). */
  readonly url: string;
  /** The JetStream store dir (kept across `restart`). */
  readonly storeDir: string;
  /** The demo node user: `NatsTransport.connect({ ...nats.asNode, name })`. */
  readonly asNode: UserConnectOptions;
  /** Connection options of any user of a tenant (default demo): `node`, `client`, `cli`, `operator`, agents, `acme`'s `node`. */
  as(name: string, tenant?: string): UserConnectOptions;
  /** The `.creds` file of a user (for `troupe … --creds`, the Python agent). */
  credsFile(name: string, tenant?: string): string;
  /**
   * Environment for `troupe` child processes: connects them as the demo node (TROUPE_NATS_CREDS) unless
   * they are given other credentials.
   */
  readonly env: Record<string, string>;
  /** `creds add-*` on the running server. */
  addUser(opts: AddUserOptions): Promise<UserInfo>;
  /** `creds revoke`: revokes the user and pushes the account to this server. */
  revoke(name: string, tenant?: string): Promise<void>;
  /** Stops the server (SIGTERM, then SIGKILL), keeping the store dir. */
  shutdown(): Promise<void>;
  /** Starts it again on the same port with the same store dir. */
  restart(): Promise<void>;
  /** SIGSTOP freezes the server (its sockets stay open, nothing is answered); SIGCONT thaws it. */
  signal(sig: 'SIGSTOP' | 'SIGCONT'): Promise<void>;
  /** Stops the server and removes its store dir. */
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      if (addr && typeof addr === 'object') {
        const { port } = addr;
        srv.close(() => resolvePort(port));
      } else {
        srv.close(() => reject(new Error('no port')));
      }
    });
  });
}

async function waitForPort(port: number, child: ChildProcess, log: () => string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`nats-server exited with ${child.exitCode}:\n${log()}`);
    const ok = await new Promise<boolean>((res) => {
      const sock = netConnect(port, '127.0.0.1');
      sock.once('connect', () => {
        sock.destroy();
        res(true);
      });
      sock.once('error', () => res(false));
    });
    if (ok && log().includes('Server is ready')) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`nats-server did not start on ${port} within ${timeoutMs} ms:\n${log()}`);
}

/**
 * Every nats-server a suite started and has not stopped: killed when the test process exits, so a suite
 * that never reaches its afterAll (a worker ended on a timeout, a setup that threw) leaves none behind.
 */
const runningServers = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of runningServers) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

/** One nats-server process: (re)launch with `args`, stop with SIGTERM then SIGKILL. */
export function natsProcess(args: string[], port: number, env: Record<string, string> = {}, bin = NATS_BIN) {
  let child: ChildProcess | undefined;
  let output = '';
  const launch = async () => {
    output = '';
    const c = spawn(bin, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    child = c;
    runningServers.add(c);
    c.once('exit', () => runningServers.delete(c));
    c.stdout?.on('data', (d: Buffer) => (output += d.toString()));
    c.stderr?.on('data', (d: Buffer) => (output += d.toString()));
    c.on('error', (err) => (output += `\nspawn error: ${err.message} (is nats-server installed? apt-get install nats-server)`));
    try {
      await waitForPort(port, c, () => output);
    } catch (err) {
      // One that did not come up is not left running.
      if (child === c) child = undefined;
      if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
      throw err;
    }
  };
  /** Sends a signal without waiting (SIGSTOP, SIGCONT); SIGKILL waits for the exit. */
  const signal = async (sig: NodeJS.Signals) => {
    const c = child;
    if (!c || c.exitCode !== null) return;
    if (sig !== 'SIGKILL') {
      c.kill(sig);
      return;
    }
    child = undefined;
    await new Promise<void>((res) => {
      c.once('exit', () => res());
      c.kill('SIGKILL');
    });
  };
  const shutdown = async () => {
    const c = child;
    child = undefined;
    if (!c || c.exitCode !== null) return;
    await new Promise<void>((res) => {
      const timer = setTimeout(() => c.kill('SIGKILL'), 5_000);
      c.once('exit', () => {
        clearTimeout(timer);
        res();
      });
      c.kill('SIGTERM');
    });
  };
  return { launch, shutdown, signal, running: () => child !== undefined && child.exitCode === null, log: () => output };
}

/** The agent users of the demo tenant (the demo team, the examples, the Python agent, the tests' own). */
export const TEST_AGENTS = [
  'triage',
  'researcher',
  'writer',
  'echo',
  'pyecho',
  'slowecho',
  'main',
  'skills',
  'crashy',
  'picky',
  'sloth',
  'weather',
  'travel',
  'billing',
];

/**
 * A nats-server exactly as shipped: operator mode from `troupe creds init` (tenants demo and acme, the
 * roles of src/security/roles.ts), on a free port with its own store dir.
 */
export async function startNatsServer(opts: { partitions?: number } = {}): Promise<NatsServerHandle> {
  const secure = await startSecureNatsServer({
    tenants: ['demo', 'acme'],
    agents: TEST_AGENTS,
    clients: ['client', 'cli'],
    ...(opts.partitions ? { partitions: opts.partitions } : {}),
  });
  const roles = new Map((await secure.store.users()).map((u) => [`${u.tenant}/${u.name}`, u.role]));
  const as = (name: string, tenant = 'demo'): UserConnectOptions => {
    const role = roles.get(`${tenant}/${name}`);
    if (!role) throw new Error(`no test user "${name}" in tenant "${tenant}"`);
    return {
      servers: secure.url,
      authenticator: credsAuthenticator(readFileSync(secure.creds(tenant, name))),
      ...(role === 'client' || role === 'gateway' || role === 'operator' ? { inboxPrefix: inboxPrefix(name) } : {}),
    };
  };
  return {
    port: secure.port,
    url: secure.url,
    storeDir: join(secure.dir, 'nats'),
    asNode: as('node'),
    as,
    credsFile: (name, tenant = 'demo') => secure.creds(tenant, name),
    env: { TROUPE_NATS_CREDS: secure.creds('demo', 'node') },
    addUser: async (o) => {
      const user = await secure.addUser(o);
      roles.set(`${user.tenant}/${user.name}`, user.role);
      return user;
    },
    revoke: (name, tenant = 'demo') => secure.revoke(tenant, name),
    shutdown: secure.shutdown,
    restart: secure.restart,
    signal: secure.signal,
    stop: secure.stop,
  };
}

export interface SecureNatsServerOptions {
  /** Tenants (accounts); default ['demo']. */
  tenants?: string[];
  /** Ingress partitions per tenant; default 8. */
  partitions?: number;
  /** Require TLS with a CA and server certificate made for 127.0.0.1/localhost. */
  tls?: boolean;
  /** Agents made in every tenant; default the demo agents. */
  agents?: string[];
  /** Client principals made in every tenant; default ['cli']. */
  clients?: string[];
}

export interface SecureNatsServerHandle {
  readonly port: number;
  /** `nats://127.0.0.1:<port>`, or `tls://…` with `tls: true`. */
  readonly url: string;
  /** The credential store (`<dir>/creds`, `<dir>/server.conf`, `<dir>/nats`). */
  readonly dir: string;
  readonly store: CredentialStore;
  /** With `tls: true`: the CA certificate clients trust. */
  readonly caFile: string | undefined;
  /** The `.creds` file of a user, e.g. `creds('demo', 'node')`, `creds('demo', 'echo')`. */
  creds(tenant: string, name: string): string;
  /** `creds add-*`: a new user while the server runs. */
  addUser(opts: AddUserOptions): Promise<UserInfo>;
  /** `creds revoke`: revokes the user and pushes the account JWT to this server. */
  revoke(tenant: string, name: string): Promise<void>;
  /**
   * A nats.js connection as that user: its creds, the inbox prefix its role must use (clients, operators),
   * the CA with TLS. `opts` override (e.g. `maxReconnectAttempts`).
   */
  connect(tenant: string, name: string, opts?: Partial<NodeConnectionOptions>): Promise<NatsConnection>;
  /** Environment for child processes: TROUPE_NATS_URL (and TROUPE_NATS_TLS_CA with TLS). */
  readonly env: Record<string, string>;
  shutdown(): Promise<void>;
  restart(): Promise<void>;
  signal(sig: 'SIGSTOP' | 'SIGCONT'): Promise<void>;
  /** Stops the server and removes the store dir. */
  stop(): Promise<void>;
}

/** A nats-server in operator mode, configured by `creds init`'s library functions in a temp dir. */
export async function startSecureNatsServer(opts: SecureNatsServerOptions = {}): Promise<SecureNatsServerHandle> {
  // freePort's port is free when it answers, not necessarily when the server binds it: another process (a
  // suite running beside this one) may take it in between. Then the server says so and exits, and this
  // starts again on another port; any other failure is thrown.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const { store, dir } = await startSecureNatsServerStore({ ...opts, port });
    const proc = natsProcess(['-c', store.serverConfigFile], port);
    try {
      await proc.launch();
      return secureHandle(store, dir, port, proc);
    } catch (err) {
      rmSync(dir, { recursive: true, force: true });
      if (attempt >= PORT_TAKEN_ATTEMPTS || !/address already in use/.test((err as Error).message)) throw err;
    }
  }
}

/** Starts on a port another process took meanwhile, tried again on a new port up to this many times in all. */
const PORT_TAKEN_ATTEMPTS = 5;

/** `creds init` in a temp dir as the test servers use it (small JetStream reservations); starts nothing. */
export async function startSecureNatsServerStore(opts: SecureNatsServerOptions & { port: number }): Promise<{ store: CredentialStore; dir: string }> {
  const { port } = opts;
  const dir = mkdtempSync(join(tmpdir(), 'troupe-secure-nats-'));
  const store = await initCredentialStore({
    dir,
    port,
    tenants: opts.tenants ?? ['demo'],
    ...(opts.partitions !== undefined ? { partitions: opts.partitions } : {}),
    ...(opts.tls ? { tls: { hosts: ['localhost', '127.0.0.1'] } } : {}),
    ...(opts.agents ? { agents: opts.agents } : {}),
    ...(opts.clients ? { clients: opts.clients } : {}),
    // Small reservations: every test server reserves these out of its JetStream limits. The disk limit holds
    // what a node reserves on a 3-replica cluster: TROUPE_IN 32 MiB, the answered log 8 MiB and the
    // checkpoint stream 64 MiB, each three times (312 MiB).
    jetstream: { memoryBytes: 64 * 1024 ** 2, diskBytes: 512 * 1024 ** 2 },
  });
  return { store, dir };
}

function secureHandle(store: CredentialStore, dir: string, port: number, proc: ReturnType<typeof natsProcess>): SecureNatsServerHandle {
  const { launch, shutdown } = proc;
  const caFile = store.caFile;
  const roles = new Map<string, string>();
  const roleOf = async (tenant: string, name: string) => {
    const key = `${tenant}/${name}`;
    let role = roles.get(key);
    if (!role) {
      role = (await store.user(tenant, name)).role;
      roles.set(key, role);
    }
    return role;
  };
  return {
    port,
    url: store.url,
    dir,
    store,
    caFile,
    env: { TROUPE_NATS_URL: store.url, ...(caFile ? { TROUPE_NATS_TLS_CA: caFile } : {}) },
    creds: (tenant, name) => store.credsFile(tenant, name),
    addUser: async (o) => {
      const user = await store.addUser(o);
      roles.set(`${o.tenant}/${user.name}`, user.role);
      return user;
    },
    revoke: async (tenant, name) => {
      const { accountJwt } = await store.revoke(tenant, name);
      await pushAccountJwts([accountJwt], { servers: store.url, systemCreds: store.systemCredsFile, ...(caFile ? { caFile } : {}) });
    },
    connect: async (tenant, name, o = {}) => {
      const role = await roleOf(tenant, name);
      return natsConnect({
        servers: store.url,
        name: `${tenant}/${name}`,
        authenticator: credsAuthenticator(readFileSync(store.credsFile(tenant, name))),
        ...(role === 'client' || role === 'gateway' || role === 'operator' ? { inboxPrefix: inboxPrefix(name) } : {}),
        ...(caFile ? { tls: { caFile } } : {}),
        ...o,
      });
    },
    shutdown,
    restart: async () => {
      await shutdown();
      await launch();
    },
    signal: proc.signal,
    stop: async () => {
      await shutdown();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
