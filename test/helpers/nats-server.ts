/**
 * Starts a real nats-server with the repo's nats.conf on a free port and its own store dir.
 * One per suite: `const nats = await startNatsServer()` in beforeAll, `await nats.stop()` in afterAll.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

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
  let child: ChildProcess | undefined;
  let output = '';

  const launch = async () => {
    output = '';
    child = spawn(NATS_BIN, ['-c', NATS_CONF, '-a', '127.0.0.1', '-p', String(port), '-sd', storeDir], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
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
