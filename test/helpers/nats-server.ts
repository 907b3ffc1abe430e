/**
 * Starts real nats-servers on free ports with their own store dirs. One per suite, in beforeAll/afterAll:
 *
 *   startNatsServer()                 the repo's nats.conf (users with passwords)
 *   startSecureNatsServer({ tenants }) operator mode as `troupe creds init` makes it (src/security/creds.ts):
 *                                     per-user JWT credentials, the roles of src/security/roles.ts, optional TLS
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { connect as natsConnect, credsAuthenticator, type NatsConnection, type NodeConnectionOptions } from '@nats-io/transport-node';
import {
  CredentialStore,
  initCredentialStore,
  pushAccountJwts,
  type AddUserOptions,
  type UserInfo,
} from '../../src/security/creds.js';
import { inboxPrefix } from '../../src/security/roles.js';

export const REPO_ROOT = resolve(import.meta.dirname, '../..');
export const NATS_CONF = join(REPO_ROOT, 'nats.conf');
const NATS_BIN = process.env.NATS_SERVER_BIN ?? 'nats-server';

export interface NatsCredentials {
  node: { user: string; pass: string };
  client: { user: string; pass: string };
  operator: { user: string; pass: string };
  /** Password shared by the per-agent users (triage, researcher, writer, echo, pyecho). */
  agentPassword: string;
  acme: { user: string; pass: string };
}

export interface NatsServerHandle {
  readonly port: number;
  /** `nats://127.0.0.1:<port>`. Every connection must authenticate: spread `asNode` or pass a user. */
  readonly url: string;
  /** Connection options of the demo node user: `NatsTransport.connect({ ...nats.asNode, name })`. */
  readonly asNode: { servers: string; user: string; pass: string };
  readonly storeDir: string;
  readonly creds: NatsCredentials;
  /**
   * Environment holding the passwords nats.conf reads; give it to child processes. It also makes a
   * `troupe` child connect as the node user (TROUPE_NATS_USER / TROUPE_NATS_PASSWORD) unless told otherwise.
   */
  readonly env: Record<string, string>;
  /** Stops the server (SIGTERM, then SIGKILL), keeping the store dir. */
  shutdown(): Promise<void>;
  /** Starts it again on the same port with the same store dir. */
  restart(): Promise<void>;
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

/** One nats-server process: (re)launch with `args`, stop with SIGTERM then SIGKILL. */
function natsProcess(args: string[], port: number, env: Record<string, string> = {}) {
  let child: ChildProcess | undefined;
  let output = '';
  const launch = async () => {
    output = '';
    child = spawn(NATS_BIN, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
    child.on('error', (err) => (output += `\nspawn error: ${err.message} (is nats-server installed? apt-get install nats-server)`));
    await waitForPort(port, child, () => output);
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
  return { launch, shutdown, log: () => output };
}

export async function startNatsServer(): Promise<NatsServerHandle> {
  const port = await freePort();
  const storeDir = mkdtempSync(join(tmpdir(), 'troupe-nats-'));
  // A leading letter: nats.conf variables that look like numbers ("1e5...") would be parsed as numbers.
  const secret = () => `p${randomBytes(12).toString('hex')}`;
  const creds: NatsCredentials = {
    node: { user: 'node', pass: secret() },
    client: { user: 'client', pass: secret() },
    operator: { user: 'operator', pass: secret() },
    agentPassword: secret(),
    acme: { user: 'acme-node', pass: secret() },
  };
  const env = {
    TROUPE_NODE_PASSWORD: creds.node.pass,
    TROUPE_CLIENT_PASSWORD: creds.client.pass,
    TROUPE_OPERATOR_PASSWORD: creds.operator.pass,
    TROUPE_SYS_PASSWORD: secret(),
    TROUPE_NATS_USER: creds.node.user,
    TROUPE_NATS_PASSWORD: creds.node.pass,
    TROUPE_AGENT_PASSWORD: creds.agentPassword,
    TROUPE_ACME_PASSWORD: creds.acme.pass,
  };
  const { launch, shutdown } = natsProcess(['-c', NATS_CONF, '-a', '127.0.0.1', '-p', String(port), '-sd', storeDir], port, env);
  await launch();
  return {
    port,
    url: `nats://127.0.0.1:${port}`,
    asNode: { servers: `nats://127.0.0.1:${port}`, user: creds.node.user, pass: creds.node.pass },
    storeDir,
    creds,
    env,
    shutdown,
    restart: async () => {
      await shutdown();
      await launch();
    },
    stop: async () => {
      await shutdown();
      rmSync(storeDir, { recursive: true, force: true });
    },
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
  /** Stops the server and removes the store dir. */
  stop(): Promise<void>;
}

/** A nats-server in operator mode, configured by `creds init`'s library functions in a temp dir. */
export async function startSecureNatsServer(opts: SecureNatsServerOptions = {}): Promise<SecureNatsServerHandle> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'troupe-secure-nats-'));
  const store = await initCredentialStore({
    dir,
    port,
    tenants: opts.tenants ?? ['demo'],
    ...(opts.partitions !== undefined ? { partitions: opts.partitions } : {}),
    ...(opts.tls ? { tls: { hosts: ['localhost', '127.0.0.1'] } } : {}),
    ...(opts.agents ? { agents: opts.agents } : {}),
    ...(opts.clients ? { clients: opts.clients } : {}),
    // Small reservations: every test server reserves these out of its JetStream limits.
    jetstream: { memoryBytes: 64 * 1024 ** 2, diskBytes: 256 * 1024 ** 2 },
  });
  const { launch, shutdown } = natsProcess(['-c', store.serverConfigFile], port);
  await launch();
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
        ...(role === 'client' || role === 'operator' ? { inboxPrefix: inboxPrefix(name) } : {}),
        ...(caFile ? { tls: { caFile } } : {}),
        ...o,
      });
    },
    shutdown,
    restart: async () => {
      await shutdown();
      await launch();
    },
    stop: async () => {
      await shutdown();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
