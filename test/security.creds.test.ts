/**
 * `troupe creds` and operator mode against real nats-servers: an agent added while the server runs
 * connects without a restart or a config edit, a revoked one is cut off and stays out, the account's
 * mapping puts a thread where `partitionOf` says, TLS works with the generated CA and nothing else,
 * tenants cannot see each other, and the CLI's failures say what to do.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, credsAuthenticator, errors, type NatsConnection, type Status } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CredentialStore, readCredsIdentity, type UserInfo } from '../src/security/creds.js';
import { rolePermissions } from '../src/security/roles.js';
import { partitionOf } from '../src/transport/jetstream/ingress.js';
import { NatsTransport } from '../src/transport/nats.js';
import { freePort, startSecureNatsServer, type SecureNatsServerHandle } from './helpers/nats-server.js';
import { mintCreds, Observer, Prober } from './helpers/permissions.js';
import { ProcessGroup, cliTestTimeout, runTroupe, runTroupeJson } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const NATS_BIN = process.env.NATS_SERVER_BIN ?? 'nats-server';
const dec = new TextDecoder();

/** Collects a connection's status events (disconnects, server errors). */
function statuses(nc: NatsConnection): Status[] {
  const seen: Status[] = [];
  void (async () => {
    for await (const s of nc.status()) seen.push(s);
  })();
  return seen;
}

describe('troupe creds: add and revoke without touching the server', () => {
  const procs = new ProcessGroup();
  let dir: string;
  let url: string;
  const open: NatsConnection[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'troupe-creds-cli-'));
    const port = await freePort();
    const init = await runTroupeJson<{ serverConfig: string; url: string; users: UserInfo[] }>(
      ['creds', 'init', '--dir', dir, '--tenants', 'demo,acme', '--port', String(port), '--json'],
      {},
    );
    url = init.url;
    expect(url).toBe(`nats://127.0.0.1:${port}`);
    // node, operator, the gateway, cli and the five demo agents in each tenant.
    expect(init.users.filter((u) => u.tenant === 'demo').map((u) => `${u.role}:${u.name}`)).toEqual([
      'node:node',
      'operator:operator',
      'gateway:gateway',
      'client:cli',
      'agent:echo',
      'agent:pyecho',
      'agent:researcher',
      'agent:triage',
      'agent:writer',
    ]);
    await procs.spawn(NATS_BIN, ['-c', init.serverConfig], {}, { name: 'nats-server', ready: /Server is ready/ });
  });

  afterAll(async () => {
    await Promise.all(open.map((nc) => nc.close().catch(() => undefined)));
    await procs.stopAll();
    rmSync(dir, { recursive: true, force: true });
  });

  const connectWith = async (credsFile: string, opts: Parameters<typeof connect>[0] = {}) => {
    const nc = await connect({ servers: url, authenticator: credsAuthenticator(readFileSync(credsFile)), ...opts });
    open.push(nc);
    return nc;
  };

  it('writes secrets 0600 in 0700 directories and a server.conf without passwords or anonymous access', () => {
    const conf = readFileSync(join(dir, 'server.conf'), 'utf8');
    expect(conf).toMatch(/^operator: /m);
    expect(conf).toMatch(/resolver: \{\n {2}type: full/);
    expect(conf).not.toMatch(/no_auth_user|password|authorization/);
    for (const file of [
      'creds/operator.json',
      'creds/system/account.json',
      'creds/system/sys.creds',
      'creds/tenants/demo/account.json',
      'creds/tenants/demo/users/echo.creds',
    ]) {
      expect((statSync(join(dir, file)).mode & 0o777).toString(8), file).toBe('600');
    }
    expect((statSync(join(dir, 'creds/tenants/demo/users')).mode & 0o777).toString(8)).toBe('700');
  });

  it(
    '`creds init --tls` writes a CA, a server certificate for the given hosts and a tls block',
    async () => {
      const tlsDir = join(dir, 'with-tls');
      const res = await runTroupeJson<{ url: string; caFile: string; serverConfig: string }>(
        ['creds', 'init', '--dir', tlsDir, '--tls', '--tls-hosts', 'nats.internal,10.0.0.7', '--agents', '', '--json'],
        {},
      );
      expect(res.url).toBe('tls://127.0.0.1:4222');
      expect(res.caFile).toBe(join(tlsDir, 'tls', 'ca.pem'));
      const conf = readFileSync(res.serverConfig, 'utf8');
      expect(conf).toContain(`cert_file: "${join(tlsDir, 'tls', 'server.pem')}"`);
      const { X509Certificate } = await import('node:crypto');
      const cert = new X509Certificate(readFileSync(join(tlsDir, 'tls', 'server.pem')));
      expect(cert.subjectAltName).toBe('DNS:nats.internal, IP Address:10.0.0.7');
      expect(cert.verify(new X509Certificate(readFileSync(res.caFile)).publicKey)).toBe(true);
      expect((statSync(join(tlsDir, 'tls', 'server-key.pem')).mode & 0o777).toString(8)).toBe('600');
      // --agents '' makes no agents.
      const users = await runTroupeJson<UserInfo[]>(['creds', 'list', '--dir', tlsDir, '--json'], {});
      expect(users.map((u) => u.role)).toEqual(['node', 'operator', 'gateway', 'client']);
    },
    cliTestTimeout(2),
  );

  it('refuses a connection without credentials or with a password', async () => {
    await expect(connect({ servers: url, reconnect: false })).rejects.toThrow(errors.AuthorizationError);
    await expect(connect({ servers: url, user: 'node', pass: 'node', reconnect: false })).rejects.toThrow(errors.AuthorizationError);
  });

  it(
    'an agent added with `creds add-agent` serves requests at once; `creds revoke` disconnects it and it cannot come back',
    async () => {
      const added = await runTroupeJson<UserInfo>(['creds', 'add-agent', 'summariser', '--dir', dir, '--tenant', 'demo', '--json'], {});
      expect(added).toMatchObject({ name: 'summariser', role: 'agent', tenant: 'demo', revoked: false });

      // The running server accepts it: it never heard of this user, only of the account's signing key.
      const agent = await connectWith(added.credsFile, { maxReconnectAttempts: -1, reconnectTimeWait: 100 });
      const agentStatus = statuses(agent);
      agent.subscribe('troupe.demo.agent.summariser', {
        callback: (_e, m) => {
          m.respond(`summary of ${dec.decode(m.data)}`);
        },
      });
      await agent.flush();
      const node = await connectWith(join(dir, 'creds/tenants/demo/users/node.creds'));
      const reply = await node.request('troupe.demo.agent.summariser', 'the text', { timeout: 5_000 });
      expect(dec.decode(reply.data)).toBe('summary of the text');

      const revoked = await runTroupeJson<UserInfo & { pushedTo: string[] }>(['creds', 'revoke', 'summariser', '--dir', dir, '--tenant', 'demo', '--json'], {});
      expect(revoked).toMatchObject({ name: 'summariser', revoked: true, pushedTo: [url] });

      await waitUntil(() => agentStatus.some((s) => s.type === 'disconnect'), 'the revoked agent to be disconnected');
      expect(agentStatus.some((s) => s.type === 'error' && /revoked/i.test(s.error.message))).toBe(true);
      // Its creds no longer work, and its reconnect attempts never get it back in.
      await expect(connect({ servers: url, authenticator: credsAuthenticator(readFileSync(added.credsFile)), reconnect: false })).rejects.toThrow(
        /authorization|revoked/i,
      );
      await expect(node.request('troupe.demo.agent.summariser', 'again', { timeout: 2_000 })).rejects.toThrow(errors.RequestError);
      expect(agentStatus.some((s) => s.type === 'reconnect')).toBe(false);

      const listed = await runTroupeJson<UserInfo[]>(['creds', 'list', '--dir', dir, '--json'], {});
      expect(listed.find((u) => u.tenant === 'demo' && u.name === 'summariser')?.revoked).toBe(true);
      expect(listed.find((u) => u.tenant === 'demo' && u.name === 'echo')?.revoked).toBe(false);
      // Everyone else is untouched.
      expect((await node.request('$JS.API.INFO', '', { timeout: 5_000 })).data.length).toBeGreaterThan(0);
    },
    cliTestTimeout(3),
  );

  it(
    'add-client, add-gateway, add-node and add-operator make users of those roles; a revoked name can be issued again with new keys',
    async () => {
      const client = await runTroupeJson<UserInfo>(['creds', 'add-client', 'web', '--dir', dir, '--json'], {});
      expect(client).toMatchObject({ name: 'web', role: 'client', tenant: 'demo' });
      expect(await readCredsIdentity(client.credsFile)).toMatchObject({ name: 'web', role: 'client', tenant: 'demo', inboxPrefix: '_INBOX_web' });
      const gateway = await runTroupeJson<UserInfo>(['creds', 'add-gateway', 'gateway-web', '--dir', dir, '--json'], {});
      expect(await readCredsIdentity(gateway.credsFile)).toMatchObject({
        name: 'gateway-web',
        role: 'gateway',
        tenant: 'demo',
        inboxPrefix: '_INBOX_gateway-web',
      });
      const node = await runTroupeJson<UserInfo>(['creds', 'add-node', '--dir', dir, '--tenant', 'acme', '--json'], {});
      expect(node).toMatchObject({ name: 'node-2', role: 'node', tenant: 'acme' });
      const operator = await runTroupeJson<UserInfo>(['creds', 'add-operator', 'oncall', '--dir', dir, '--json'], {});
      expect(operator).toMatchObject({ name: 'oncall', role: 'operator' });

      const again = await runTroupeJson<UserInfo>(['creds', 'add-agent', 'summariser', '--dir', dir, '--json'], {});
      expect(again.revoked).toBe(false);
      const nc = await connectWith(again.credsFile);
      expect(nc.info?.server_id).toBeDefined();
    },
    cliTestTimeout(4),
  );

  // Nine CLI runs, each a fresh process (about 1.4 s each in CI beside the other suites).
  it(
    'says what to do next when something is wrong (exit 1), and exits 2 on bad usage',
    async () => {
      const missing = await runTroupe(['creds', 'revoke', 'nobody', '--dir', dir], {});
      expect(missing.code).toBe(1);
      expect(missing.stderr).toContain('CREDENTIALS_NOT_FOUND');
      expect(missing.stderr).toContain('troupe creds list');

      const taken = await runTroupe(['creds', 'add-agent', 'echo', '--dir', dir], {});
      expect(taken.code).toBe(1);
      expect(taken.stderr).toContain('CREDENTIALS_CONFLICT');

      const invalid = await runTroupe(['creds', 'add-agent', 'no.dots', '--dir', dir], {});
      expect(invalid.code).toBe(1);
      expect(invalid.stderr).toContain('invalid agent name');

      const again = await runTroupe(['creds', 'init', '--dir', dir], {});
      expect(again.code).toBe(1);
      expect(again.stderr).toContain('already exists');

      const noStore = await runTroupe(['creds', 'list', '--dir', join(dir, 'nothing-here')], {});
      expect(noStore.code).toBe(1);
      expect(noStore.stderr).toContain('troupe creds init');

      const unknownTenant = await runTroupe(['creds', 'add-agent', 'x', '--dir', dir, '--tenant', 'globex'], {});
      expect(unknownTenant.code).toBe(1);
      expect(unknownTenant.stderr).toContain('tenants: demo, acme');

      expect((await runTroupe(['creds', 'init', '--dir', join(dir, 'y'), '--tls-hosts', 'example.org'], {})).code).toBe(2);
      expect((await runTroupe(['creds', 'add-agent', '--dir', dir], {})).code).toBe(2);
      expect((await runTroupe(['creds', 'init', '--dir', join(dir, 'x'), '--partitions', '0'], {})).code).toBe(2);
    },
    cliTestTimeout(9),
  );
});

describe('operator mode: revocation while the server is down, partitions, JetStream, tenants', () => {
  let nats: SecureNatsServerHandle;
  const open: NatsConnection[] = [];
  const connectAs = async (tenant: string, name: string, opts = {}) => {
    const nc = await nats.connect(tenant, name, opts);
    open.push(nc);
    return nc;
  };

  beforeAll(async () => {
    nats = await startSecureNatsServer({ tenants: ['demo', 'acme'], agents: ['echo'], clients: ['cli', 'bob'] });
  });

  afterAll(async () => {
    await Promise.all(open.map((nc) => nc.close().catch(() => undefined)));
    await nats?.stop();
  });

  it(
    'a revocation made while the server is down applies when it starts (server.conf preloads the new account JWT)',
    async () => {
      await nats.addUser({ tenant: 'demo', role: 'agent', name: 'offline' });
      await (await connectAs('demo', 'offline')).close();
      await nats.shutdown();
      const res = await runTroupe(['creds', 'revoke', 'offline', '--dir', nats.dir], {});
      expect(res.code).toBe(1);
      expect(res.stderr).toContain('CLAIMS_UPDATE_FAILED');
      expect(res.stderr).toContain('revoked in the store and server.conf');
      await nats.restart();
      await expect(connectAs('demo', 'offline', { reconnect: false })).rejects.toThrow(/authorization|revoked/i);
      await expect(connectAs('demo', 'echo')).resolves.toBeDefined();
      // `creds push` re-sends every account JWT; the server takes them (they are not older than its own).
      const pushed = await runTroupeJson<{ pushed: number }>(['creds', 'push', '--dir', nats.dir, '--json'], {});
      expect(pushed.pushed).toBe(3);
    },
    cliTestTimeout(2),
  );

  it('maps troupe.<t>.in.<P>.<T> to the partition partitionOf(T) gives, whoever P is, and remaps a publish straight to a partition', async () => {
    const node = await connectAs('demo', 'node');
    const seen = new Map<string, string>();
    node.subscribe('troupe.demo.in.>', {
      callback: (_e, m) => {
        seen.set(dec.decode(m.data), m.subject);
      },
    });
    await node.flush();
    const cli = await connectAs('demo', 'cli');
    const bob = await connectAs('demo', 'bob');
    const threads = [...Array.from({ length: 64 }, () => randomUUID()), 'a', 'thread-1', 'T_0', 'x'.repeat(128)];
    for (const t of threads) {
      cli.publish(`troupe.demo.in.cli.${t}`, `cli ${t}`);
      bob.publish(`troupe.demo.in.bob.${t}`, `bob ${t}`);
      const wrong = (partitionOf(t, 8) + 1) % 8;
      cli.publish(`troupe.demo.in.cli.${t}.${wrong}`, `direct ${t}`);
    }
    await Promise.all([cli.flush(), bob.flush()]);
    await waitUntil(() => seen.size === threads.length * 3, 'every message at the node');
    for (const t of threads) {
      const p = partitionOf(t, 8);
      expect(seen.get(`cli ${t}`)).toBe(`troupe.demo.in.cli.${t}.${p}`);
      expect(seen.get(`bob ${t}`)).toBe(`troupe.demo.in.bob.${t}.${p}`);
      expect(seen.get(`direct ${t}`)).toBe(`troupe.demo.in.cli.${t}.${p}`);
    }
    // The partitions are spread, not all in one.
    expect(new Set(threads.map((t) => partitionOf(t, 8))).size).toBe(8);
  });

  it('nats-server 2.9 checks a publish on the mapped subject: the unmapped form alone is not enough', async () => {
    const node = await connectAs('demo', 'node');
    const observer = new Observer(node);
    await observer.ready();
    const unmappedOnly = rolePermissions('client', 'demo', 'cli');
    unmappedOnly.pub.allow = ['troupe.demo.in.cli.*'];
    const mappedOnly = rolePermissions('client', 'demo', 'cli');
    mappedOnly.pub.allow = ['troupe.demo.in.cli.*.*'];
    const a = await connect({
      servers: nats.url,
      authenticator: credsAuthenticator(readFileSync(await mintCreds(nats.dir, 'demo', 'cli', unmappedOnly, join(nats.dir, 'u1.creds')))),
    });
    const b = await connect({
      servers: nats.url,
      authenticator: credsAuthenticator(readFileSync(await mintCreds(nats.dir, 'demo', 'cli', mappedOnly, join(nats.dir, 'u2.creds')))),
    });
    open.push(a, b);
    const unmapped = new Prober(a, observer);
    expect(await unmapped.publish('troupe.demo.in.cli.T1')).toBe('denied');
    expect(unmapped.violations.publish[0]?.subject).toBe(`troupe.demo.in.cli.T1.${partitionOf('T1', 8)}`);
    expect(await new Prober(b, observer).publish('troupe.demo.in.cli.T1')).toBe('allowed');
  });

  it('a client publish is stored by a JetStream stream of its tenant and acknowledged on its own inbox; the account has the store limits', async () => {
    const node = await connectAs('demo', 'node');
    const jsm = await jetstreamManager(node);
    const info = await jsm.getAccountInfo();
    expect(info.limits).toMatchObject({ max_memory: 64 * 1024 ** 2, max_storage: 512 * 1024 ** 2 });
    await jsm.streams.add({ name: 'TROUPE_IN', subjects: ['troupe.demo.in.*.*.*'] });
    const cli = await connectAs('demo', 'cli');
    const ack = await cli.request('troupe.demo.in.cli.thread-9', 'hello', { timeout: 5_000 });
    expect(JSON.parse(dec.decode(ack.data))).toMatchObject({ stream: 'TROUPE_IN', seq: 1 });
    const stored = await jsm.streams.getMessage('TROUPE_IN', { seq: 1 });
    expect(stored?.subject).toBe(`troupe.demo.in.cli.thread-9.${partitionOf('thread-9', 8)}`);
  });

  it('tenants are isolated: subjects and streams of one account are invisible to another', async () => {
    const demoNode = await connectAs('demo', 'node');
    const acmeNode = await connectAs('acme', 'node');
    const demoSeen: string[] = [];
    const acmeSeen: string[] = [];
    demoNode.subscribe('>', {
      callback: (_e, m) => {
        demoSeen.push(`${m.subject} ${dec.decode(m.data)}`);
      },
    });
    acmeNode.subscribe('>', {
      callback: (_e, m) => {
        acmeSeen.push(`${m.subject} ${dec.decode(m.data)}`);
      },
    });
    await Promise.all([demoNode.flush(), acmeNode.flush()]);
    const acmeClient = await connectAs('acme', 'cli');
    acmeNode.publish('troupe.demo.agent.echo', 'from acme');
    acmeClient.publish('troupe.acme.in.cli.T1', 'acme thread');
    await Promise.all([acmeNode.flush(), acmeClient.flush()]);
    await waitUntil(() => acmeSeen.length >= 2, 'acme to see its own messages');
    await demoNode.flush();
    expect(demoSeen.filter((s) => s.includes('acme'))).toEqual([]);
    const demoStreams = await (await jetstreamManager(demoNode)).streams.names().next();
    const acmeStreams = await (await jetstreamManager(acmeNode)).streams.names().next();
    expect(demoStreams).toContain('TROUPE_IN');
    expect(acmeStreams).not.toContain('TROUPE_IN');
  });

  it('a creds file says who it is for: name, role, tenant and the inbox prefix to use', async () => {
    expect(await readCredsIdentity(nats.creds('acme', 'cli'))).toMatchObject({ name: 'cli', role: 'client', tenant: 'acme', inboxPrefix: '_INBOX_cli' });
    expect(await readCredsIdentity(nats.creds('demo', 'echo'))).toMatchObject({ name: 'echo', role: 'agent', tenant: 'demo' });
    expect((await readCredsIdentity(nats.creds('demo', 'echo'))).inboxPrefix).toBeUndefined();
    const store = await CredentialStore.open(nats.dir);
    await expect(readCredsIdentity(join(nats.dir, 'creds', 'store.json'))).rejects.toMatchObject({ code: 'CREDENTIALS_INVALID' });
    expect(store.tenants).toEqual(['demo', 'acme']);
  });
});

describe('partition count comes from the store', () => {
  it('a tenant made with 5 partitions maps threads modulo 5', async () => {
    const nats = await startSecureNatsServer({ partitions: 5, agents: [] });
    try {
      const node = await nats.connect('demo', 'node');
      const cli = await nats.connect('demo', 'cli');
      const seen = new Map<string, string>();
      node.subscribe('troupe.demo.in.>', {
        callback: (_e, m) => {
          seen.set(dec.decode(m.data), m.subject);
        },
      });
      await node.flush();
      const threads = Array.from({ length: 40 }, () => randomUUID());
      for (const t of threads) cli.publish(`troupe.demo.in.cli.${t}`, t);
      await cli.flush();
      await waitUntil(() => seen.size === threads.length, 'every message at the node');
      for (const t of threads) expect(seen.get(t)).toBe(`troupe.demo.in.cli.${t}.${partitionOf(t, 5)}`);
      await Promise.all([node.close(), cli.close()]);
    } finally {
      await nats.stop();
    }
  });
});

describe('TLS', () => {
  let nats: SecureNatsServerHandle;

  beforeAll(async () => {
    nats = await startSecureNatsServer({ tls: true, agents: ['echo'] });
  });

  afterAll(async () => {
    await nats?.stop();
  });

  it('connects over tls:// with the generated CA, through nats.js and NatsTransport', async () => {
    expect(nats.url).toMatch(/^tls:\/\/127\.0\.0\.1:\d+$/);
    const nc = await nats.connect('demo', 'node');
    expect(nc.info?.tls_required).toBe(true);
    await nc.close();
    const transport = await NatsTransport.connect({ servers: nats.url, creds: nats.creds('demo', 'node'), tls: { caFile: nats.caFile! } });
    const reply = await transport.request('$JS.API.INFO', new Uint8Array(), { timeoutMs: 5_000 });
    expect(JSON.parse(dec.decode(reply.data))).toHaveProperty('limits');
    await transport.close();
  });

  it('refuses a client that does not trust the CA, and a plain-text connection', async () => {
    const creds = readFileSync(nats.creds('demo', 'node'));
    await expect(connect({ servers: nats.url, authenticator: credsAuthenticator(creds), reconnect: false })).rejects.toThrow(/certificate/i);
    await expect(NatsTransport.connect({ servers: nats.url, creds: nats.creds('demo', 'node') })).rejects.toThrow(/TLS with NATS .* --tls-ca/);
    // Plain text: the server announces TLS, and a CONNECT in the clear never gets a PONG.
    const plain = await new Promise<{ info: string; rest: string }>((resolve, reject) => {
      const sock = netConnect(nats.port, '127.0.0.1');
      let data = '';
      let sent = false;
      sock.on('data', (d) => {
        data += d.toString('latin1');
        if (!sent && data.includes('\r\n')) {
          sent = true;
          sock.write('CONNECT {"verbose":false}\r\nPING\r\n');
        }
      });
      sock.on('close', () => {
        const [info = '', ...rest] = data.split('\r\n');
        resolve({ info, rest: rest.join('\r\n') });
      });
      sock.on('error', reject);
    });
    expect(JSON.parse(plain.info.slice('INFO '.length))).toMatchObject({ tls_required: true });
    expect(plain.rest).not.toContain('PONG');
  });

  it(
    "`troupe creds revoke` reaches a TLS server with the store's CA (or --tls-ca)",
    async () => {
      await nats.addUser({ tenant: 'demo', role: 'agent', name: 'tls-agent' });
      const res = await runTroupe(['creds', 'revoke', 'tls-agent', '--dir', nats.dir, '--nats', nats.url, '--tls-ca', nats.caFile!], {});
      expect(res.stderr).toBe('');
      expect(res.code).toBe(0);
      await expect(nats.connect('demo', 'tls-agent', { reconnect: false })).rejects.toThrow(/authorization|revoked/i);
    },
    cliTestTimeout(1),
  );
});
