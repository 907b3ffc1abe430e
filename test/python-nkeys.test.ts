/**
 * examples/python-agent/nkeys.py: .creds support with the Python standard library. Its Ed25519 is checked
 * against RFC 8032's test vector and Node's own Ed25519, its nkey decoding against @nats-io/nkeys, and a
 * stdlib Python client authenticates with it to a real operator-mode server, where the agent role holds.
 */
import { execFile } from 'node:child_process';
import { randomBytes, sign as nodeSign, createPrivateKey } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parseCreds } from '@nats-io/jwt';
import { fromPublic, fromSeed } from '@nats-io/nkeys';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT, startSecureNatsServer, type SecureNatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const PYTHON = process.env.PYTHON ?? 'python3';
const NKEYS_DIR = join(REPO_ROOT, 'examples/python-agent');
const NKEYS = join(NKEYS_DIR, 'nkeys.py');
const CLIENT = join(REPO_ROOT, 'test/fixtures/python_creds_client.py');
const run = promisify(execFile);

async function python(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(PYTHON, args, { cwd: NKEYS_DIR, timeout: 20_000 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

/** Node's Ed25519 over a raw 32-byte seed (PKCS#8 wrapping of RFC 8410). */
function nodeEd25519(seed: Buffer, message: Buffer): string {
  const key = createPrivateKey({ format: 'der', type: 'pkcs8', key: Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]) });
  return nodeSign(null, message, key).toString('hex');
}

describe('nkeys.py: Ed25519 and nkey seeds in plain Python', () => {
  it('signs RFC 8032 test vector 1 and agrees with Node on random seeds and messages', async () => {
    const cases = [
      { seed: '9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60', msg: '' },
      ...Array.from({ length: 24 }, (_, i) => ({ seed: randomBytes(32).toString('hex'), msg: randomBytes(i * 7).toString('hex') })),
    ];
    const script = [
      'import json, sys, nkeys',
      'cases = json.loads(sys.argv[1])',
      'print(json.dumps([{"pub": nkeys.ed25519_public_key(bytes.fromhex(c["seed"])).hex(), "sig": nkeys.ed25519_sign(bytes.fromhex(c["seed"]), bytes.fromhex(c["msg"])).hex()} for c in cases]))',
    ].join('\n');
    const res = await python(['-c', script, JSON.stringify(cases)]);
    expect(res.stderr).toBe('');
    const out = JSON.parse(res.stdout) as Array<{ pub: string; sig: string }>;
    expect(out[0]).toEqual({
      pub: 'd75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a',
      sig: 'e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b',
    });
    cases.forEach((c, i) => expect(out[i]?.sig, `case ${i}`).toBe(nodeEd25519(Buffer.from(c.seed, 'hex'), Buffer.from(c.msg, 'hex'))));
  });
});

describe('nkeys.py with creds from `troupe creds`', () => {
  let nats: SecureNatsServerHandle;
  let node: NatsConnection;
  const procs = new ProcessGroup();

  beforeAll(async () => {
    nats = await startSecureNatsServer({ agents: ['pyecho', 'echo'] });
    node = await nats.connect('demo', 'node');
  });

  afterAll(async () => {
    await procs.stopAll();
    await node?.close();
    await nats?.stop();
  });

  it('reads a .creds file to the same public key and nonce signature as @nats-io/nkeys', async () => {
    for (const name of ['pyecho', 'echo', 'node', 'cli', 'operator']) {
      const file = nats.creds('demo', name);
      const nonce = randomBytes(12).toString('base64url');
      const res = await python([NKEYS, file, nonce]);
      expect(res.code, res.stderr).toBe(0);
      const out = JSON.parse(res.stdout) as { public_key: string; name: string; sig: string };
      const creds = await parseCreds(readFileSync(file));
      const kp = fromSeed(new TextEncoder().encode(creds.key));
      expect(out.public_key).toBe(kp.getPublicKey());
      expect(out.name).toBe(name);
      expect(out.sig).toBe(Buffer.from(kp.sign(new TextEncoder().encode(nonce))).toString('base64url'));
      expect(fromPublic(out.public_key).verify(new TextEncoder().encode(nonce), Buffer.from(out.sig, 'base64url'))).toBe(true);
    }
  });

  it('refuses a damaged seed (checksum) and a file that is not a .creds file', async () => {
    const text = readFileSync(nats.creds('demo', 'pyecho'), 'utf8');
    const seed = /^SU[A-Z2-7]+$/m.exec(text)![0];
    const flipped = seed.slice(0, 10) + (seed[10] === 'A' ? 'B' : 'A') + seed.slice(11);
    const damaged = join(nats.dir, 'damaged.creds');
    writeFileSync(damaged, text.replace(seed, flipped));
    const res = await python([NKEYS, damaged, 'nonce']);
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('checksum');
    const notCreds = await python([NKEYS, join(nats.dir, 'server.conf')]);
    expect(notCreds.code).toBe(1);
    expect(notCreds.stderr).toContain('not a .creds file');
  });

  it('a stdlib Python client connects with its creds, serves its inbox, and is held to the agent role', async () => {
    const client = await procs.spawn(
      PYTHON,
      [CLIENT, nats.url, nats.creds('demo', 'pyecho'), 'troupe.demo.agent.pyecho'],
      {},
      {
        name: 'python creds client',
        ready: /"ready": true/,
        readyOn: 'stdout',
      },
    );
    const reply = await node.request('troupe.demo.agent.pyecho', 'hello', { timeout: 5_000 });
    expect(new TextDecoder().decode(reply.data)).toBe('python got: hello');

    // The agent role: another agent's inbox is refused.
    const other = await python([CLIENT, nats.url, nats.creds('demo', 'pyecho'), 'troupe.demo.agent.echo']);
    expect(other.code).toBe(1);
    expect(JSON.parse(other.stdout)).toEqual({ error: 'Permissions Violation for Subscription to "troupe.demo.agent.echo"' });

    // Revoked: the running client is cut off and the creds no longer connect.
    await nats.revoke('demo', 'pyecho');
    await waitUntil(() => !client.running, 'the revoked Python client to be disconnected');
    expect(client.stdout).toMatch(/revoked/i);
    const again = await python([CLIENT, nats.url, nats.creds('demo', 'pyecho'), 'troupe.demo.agent.pyecho']);
    expect(again.code).toBe(1);
    expect(again.stdout).toContain('Authorization Violation');
  });
});
