/**
 * The gateway's own credentials over a real nats-server in operator mode (`troupe creds init` makes the
 * `gateway` user): only the gateway role may name the user it acts for (the Troupe-User header). An
 * ordinary client's credentials (`cli`) that name a user are refused with USER_FORBIDDEN and see nothing
 * of that user's; they cannot publish under the gateway's subjects either (the broker refuses it).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { TroupeError } from '../src/protocol/errors.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { CredentialStore, initCredentialStore, readCredsIdentity } from '../src/security/creds.js';
import { KvThreadStore } from '../src/store/kv.js';
import { NatsTransport } from '../src/transport/nats.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { Observer, Prober } from './helpers/permissions.js';
import { cliTestTimeout, runTroupe } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const PARTITIONS = 8;
let nats: NatsServerHandle;
let node: TroupeNode;
let store: KvThreadStore;
let host: AgentHost;
let gateway: TroupeClient;
let cli: TroupeClient;
const transports: NatsTransport[] = [];
const raw: NatsConnection[] = [];

async function connect(name: string, user: string): Promise<NatsTransport> {
  const t = await NatsTransport.connect({ ...nats.as(user), name });
  transports.push(t);
  return t;
}

const codeOf = async (p: Promise<unknown>): Promise<string> => {
  try {
    await p;
    return 'no error';
  } catch (err) {
    return err instanceof TroupeError ? err.code : `${(err as Error).name}: ${(err as Error).message}`;
  }
};

beforeAll(async () => {
  nats = await startNatsServer();
  const nodeT = await connect('gateway-creds-node', 'node');
  store = await KvThreadStore.open(nodeT.connection);
  node = await new TroupeNode({ transport: nodeT, store, durable: { nc: nodeT.connection, partitions: PARTITIONS } }).start();
  const echo = defineAgent({
    card: { id: 'echo', name: 'Echo', description: 'Says back what it got' },
    handle: (_message, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }),
  });
  host = await new AgentHost({ transport: await connect('gateway-creds-echo', 'echo'), agent: echo }).start();
  await node.registry.waitFor(['echo']);
  await waitUntil(() => ((node.ps().actors[0]?.detail?.['partitions'] as number[] | undefined) ?? []).length === PARTITIONS, 'the node to own every partition');
  gateway = new TroupeClient(await connect('gateway-creds-gateway', 'gateway'), { tenant: 'demo', principal: 'gateway' });
  cli = new TroupeClient(await connect('gateway-creds-cli', 'cli'), { tenant: 'demo', principal: 'cli' });
}, 60_000);

afterAll(async () => {
  await node?.stop();
  await host?.stop();
  await store?.close();
  await Promise.all(raw.map((nc) => nc.close().catch(() => undefined)));
  await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
  await nats?.stop();
});

describe('user assertion is the gateway role’s alone', () => {
  it('the gateway credentials act for alice: her thread is owned by gateway/alice and hers to read', async () => {
    expect((await gateway.send('the secret of alice', { threadId: 'alice-t1', user: 'alice', timeoutMs: 15_000 })).text).toBe('echo: the secret of alice');
    expect((await store.get('demo', 'alice-t1'))?.record.task.metadata?.['troupe/owner']).toBe('gateway/alice');
    expect((await gateway.task('alice-t1', { user: 'alice' })).history).toHaveLength(2);
    expect((await gateway.list({ user: 'alice' })).tasks.map((t) => t.id)).toEqual(['alice-t1']);
  });

  it('an ordinary client naming a user is refused with USER_FORBIDDEN and sees nothing of alice', async () => {
    expect(await codeOf(cli.send('I am alice', { threadId: 'cli-as-alice', user: 'alice', timeoutMs: 15_000 }))).toBe('USER_FORBIDDEN');
    expect(await store.get('demo', 'cli-as-alice')).toBeUndefined();
    expect(await codeOf(cli.task('alice-t1', { user: 'alice' }))).toBe('USER_FORBIDDEN');
    expect(await codeOf(cli.list({ user: 'alice' }))).toBe('USER_FORBIDDEN');
    // As itself the client is served, and alice's thread is not its.
    expect((await cli.send('hello', { threadId: 'cli-own', timeoutMs: 15_000 })).text).toBe('echo: hello');
    expect(await codeOf(cli.task('alice-t1'))).toBe('THREAD_NOT_FOUND');
    expect((await cli.list()).tasks.map((t) => t.id)).toEqual(['cli-own']);
  });

  it('the broker keeps each principal to its own subjects: the client cannot publish as the gateway, nor the gateway as the client', async () => {
    const open = async (user: string) => {
      const nc = await natsConnect({ ...nats.as(user), name: `gateway-creds-raw-${user}` });
      raw.push(nc);
      return nc;
    };
    const observer = new Observer(await open('node'));
    await observer.ready();
    const asCli = new Prober(await open('cli'), observer);
    expect(await asCli.publish('troupe.demo.in.gateway.probe')).toBe('denied');
    expect(await asCli.publish('troupe.demo.req.gateway.task')).toBe('denied');
    const asGateway = new Prober(await open('gateway'), observer);
    expect(await asGateway.publish('troupe.demo.in.cli.probe')).toBe('denied');
    expect(await asGateway.publish('troupe.demo.req.cli.task')).toBe('denied');
    observer.close();
  });
});

describe('`troupe gateway` on a client’s credentials', () => {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-gateway-cli-creds-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it(
    'refuses to serve users on cli.creds (exit 2) and names the gateway credentials to use',
    async () => {
      const tokens = join(dir, 'tokens.json');
      writeFileSync(tokens, JSON.stringify({ 'alice-token-0123456789': { tenant: 'demo', user: 'alice' } }));
      const res = await runTroupe(['gateway', '--nats', nats.url, '--port', '0', '--tokens', tokens], { TROUPE_NATS_CREDS: nats.credsFile('cli') });
      expect(res.code, res.stderr).toBe(2);
      expect(res.stderr).toContain('troupe creds add-gateway');
    },
    cliTestTimeout(1),
  );
});

describe('troupe creds: the gateway role', () => {
  const dir = mkdtempSync(join(tmpdir(), 'troupe-gateway-creds-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('init makes users/gateway.creds; gateway names are the gateway role’s alone', async () => {
    await initCredentialStore({ dir, agents: [] });
    const store = await CredentialStore.open(dir);
    expect(await readCredsIdentity(store.credsFile('demo', 'gateway'))).toMatchObject({ name: 'gateway', role: 'gateway', inboxPrefix: '_INBOX_gateway' });
    expect((await store.addUser({ tenant: 'demo', role: 'gateway' })).name).toBe('gateway-2');
    expect((await store.addUser({ tenant: 'demo', role: 'gateway', name: 'gateway-web' })).role).toBe('gateway');
    expect(await codeOf(store.addUser({ tenant: 'demo', role: 'gateway', name: 'web' }))).toBe('CREDENTIALS_INVALID');
    expect(await codeOf(store.addUser({ tenant: 'demo', role: 'client', name: 'gateway-x' }))).toBe('CREDENTIALS_INVALID');
    expect(await codeOf(store.addUser({ tenant: 'demo', role: 'client', name: 'Gateway' }))).toBe('CREDENTIALS_INVALID');
    expect(await codeOf(store.addUser({ tenant: 'demo', role: 'operator', name: 'gateway-ops' }))).toBe('CREDENTIALS_INVALID');
  });
});
