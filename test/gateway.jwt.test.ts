/**
 * The gateway's callers with JWTs from an identity provider, over real HTTP: a local issuer serving its
 * OpenID configuration and its keys (JWKS), tokens signed with `jose` as an issuer signs them, the A2A SDK
 * client sending them. Users own their tasks; the tenant comes from a claim; every way a token can be
 * wrong is refused with why; keys rotate without a restart; an issuer that is down is a 503, not a 401.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SignJWT, UnsecuredJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK, type JWTPayload } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { registry } from '../src/observability/metrics.js';
import demoTeam from '../src/bin/demo/team.js';
import { startGateway, type Gateway } from '../src/gateway/index.js';
import { send, textOf, userText, v1Client } from './helpers/a2a.js';
import { ProcessGroup, cliTestTimeout, runTroupe } from './helpers/processes.js';

type Mesh = Awaited<ReturnType<typeof startEmbedded>>;
interface Key {
  kid: string;
  privateKey: CryptoKey;
  jwk: JWK;
}

async function makeKey(kid: string): Promise<Key> {
  const { privateKey, publicKey } = await generateKeyPair('ES256', { extractable: true });
  return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' } };
}

/** An identity provider as far as a relying party sees one: discovery and keys, switchable by the test. */
class Issuer {
  readonly server: Server = createServer((req, res) => {
    this.fetches.push(req.url ?? '');
    if (req.url === '/.well-known/openid-configuration') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ issuer: this.url, jwks_uri: `${this.url}/jwks` }));
    } else if (req.url === '/jwks' && !this.down) {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: this.keys.map((k) => k.jwk) }));
    } else {
      res.writeHead(this.down ? 503 : 404).end();
    }
  });
  url = '';
  keys: Key[] = [];
  down = false;
  readonly fetches: string[] = [];

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** A token as this issuer signs one: `exp` 5 min ahead unless the claims say otherwise. */
  sign(claims: JWTPayload, key: Key = this.keys[0]!, issuer = this.url): Promise<string> {
    const now = Math.floor(Date.now() / 1000);
    return new SignJWT({ exp: now + 300, iat: now, ...claims }).setProtectedHeader({ alg: 'ES256', kid: key.kid }).setIssuer(issuer).sign(key.privateKey);
  }
}

const AUDIENCE = 'troupe-gateway';
/** A call let in: the gateway looked for the task (there is none). */
const ACCEPTED = { status: 200, message: expect.stringMatching(/Task not found/) as unknown as string };
const STATIC = 'static-token-0123456789';
let demo: Mesh;
let acme: Mesh;
let issuer: Issuer;
let keyA: Key;
let keyB: Key;
let foreign: Key;
/** JWTs (tenant from the `tenant` claim, keys found by discovery) and a static token. */
let gateway: Gateway;

beforeAll(async () => {
  [demo, acme] = await Promise.all([startEmbedded(demoTeam, silentLogger()), startEmbedded(demoTeam, silentLogger(), 'acme')]);
  [keyA, keyB, foreign] = await Promise.all([makeKey('a'), makeKey('b'), makeKey('x')]);
  issuer = new Issuer();
  await issuer.start();
  issuer.keys = [keyA];
  gateway = await startGateway({
    clients: { demo: demo.client, acme: acme.client },
    tokens: { [STATIC]: { tenant: 'demo', user: 'carol' } },
    jwt: { issuer: issuer.url, audience: AUDIENCE, tenantClaim: 'tenant', keysCooldownMs: 0 },
  });
});

afterAll(async () => {
  await gateway?.close();
  await new Promise<void>((resolve) => issuer?.server.close(() => resolve()));
  await Promise.all([demo?.stop(), acme?.stop()]);
});

/** A JSON-RPC call with a bearer token: the status, the error message and the challenge. */
async function call(token: string): Promise<{ status: number; message?: string; challenge: string | null }> {
  const res = await fetch(`${gateway.url}/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, 'a2a-version': '1.0' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 't-none' } }),
  });
  const body = (await res.json()) as { error?: { message?: string } };
  return { status: res.status, ...(body.error?.message ? { message: body.error.message } : {}), challenge: res.headers.get('www-authenticate') };
}

/** `troupe_gateway_auth_refused_total` by reason, as a scrape would read it. */
async function refusals(): Promise<Record<string, number>> {
  const metric = await registry.getSingleMetric('troupe_gateway_auth_refused_total')!.get();
  return Object.fromEntries(metric.values.map((v) => [String(v.labels.reason), v.value]));
}

async function messageOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'no error';
  } catch (err) {
    return (err as Error).message;
  }
}

describe('JWT callers', () => {
  it('the card says bearer JWTs from the issuer; the keys were found through its OpenID configuration', async () => {
    const card = await (await fetch(`${gateway.url}/.well-known/agent-card.json`, { headers: { 'a2a-version': '1.0' } })).text();
    expect(card).toContain('"bearerFormat":"JWT"');
    expect(card).toContain(`a JWT from ${issuer.url} for ${AUDIENCE}`);
    expect(issuer.fetches[0]).toBe('/.well-known/openid-configuration');
  });

  it('a user with a token talks to the mesh, and owns the task: another user of the same issuer cannot read it', async () => {
    const alice = await v1Client(gateway.url, { token: await issuer.sign({ sub: 'alice', aud: AUDIENCE, tenant: 'demo' }) });
    const result = await alice.sendMessage(send(userText('Will it be sunny in Rome?')));
    if (!('status' in result)) throw new Error(`expected a Task, got ${JSON.stringify(result)}`);
    expect(textOf(result.status?.message?.parts)).toMatch(/sunny/i);
    expect((await alice.getTask({ tenant: '', id: result.id })).id).toBe(result.id);
    const bob = await v1Client(gateway.url, { token: await issuer.sign({ sub: 'bob', aud: AUDIENCE, tenant: 'demo' }) });
    expect(await messageOf(bob.getTask({ tenant: '', id: result.id }))).toMatch(/Task not found/);
    // The static token still works beside them, as its own user.
    const carol = await v1Client(gateway.url, { token: STATIC });
    expect(await messageOf(carol.getTask({ tenant: '', id: result.id }))).toMatch(/Task not found/);
  });

  it('the tenant comes from its claim: a tenant the gateway serves is talked to, one it does not serve is 403', async () => {
    const acmeUser = await v1Client(gateway.url, { token: await issuer.sign({ sub: 'dana', aud: AUDIENCE, tenant: 'acme' }) });
    const result = await acmeUser.sendMessage(send(userText('Will it be sunny in Rome?')));
    if (!('status' in result)) throw new Error(`expected a Task, got ${JSON.stringify(result)}`);
    expect((await acme.client.task(result.id, { user: 'dana' })).id).toBe(result.id);
    expect(await call(await issuer.sign({ sub: 'erin', aud: AUDIENCE, tenant: 'globex' }))).toMatchObject({
      status: 403,
      message: 'this gateway does not serve tenant "globex"',
    });
  });

  it('refuses, with why in the response and the challenge: expired, not yet valid, another audience or issuer, no exp, a foreign key, no signature, a claim that cannot name a user or tenant', async () => {
    const now = Math.floor(Date.now() / 1000);
    const ok = { sub: 'alice', aud: AUDIENCE, tenant: 'demo' };
    const cases: Array<[string, Promise<string> | string, string]> = [
      ['expired', issuer.sign({ ...ok, exp: now - 120 }), 'the token has expired'],
      ['not yet valid', issuer.sign({ ...ok, nbf: now + 120 }), `the token's "nbf" claim is not accepted (check_failed)`],
      ['another audience', issuer.sign({ ...ok, aud: 'another-service' }), `the token's "aud" claim is not accepted (check_failed)`],
      ['another issuer', issuer.sign(ok, keyA, 'https://evil.example'), `the token's "iss" claim is not accepted (check_failed)`],
      [
        'no exp',
        new SignJWT({ ...ok }).setProtectedHeader({ alg: 'ES256', kid: 'a' }).setIssuer(issuer.url).sign(keyA.privateKey),
        `the token's "exp" claim is not accepted (missing)`,
      ],
      ['a key the issuer does not publish', issuer.sign(ok, foreign), "the token's signature is not from the issuer's keys"],
      ['a known kid, another key', issuer.sign(ok, { ...foreign, kid: 'a' }), "the token's signature is not from the issuer's keys"],
      [
        'no signature',
        new UnsecuredJWT({ ...ok, exp: now + 300 }).setIssuer(issuer.url).encode(),
        'the token is signed with an algorithm this gateway does not accept',
      ],
      [
        'a user id with a space',
        issuer.sign({ ...ok, sub: 'alice smith' }),
        `the token's "sub" claim cannot name a user: user id "alice smith" may only hold printable characters without spaces`,
      ],
      ['no tenant', issuer.sign({ sub: 'alice', aud: AUDIENCE }), `the token's "tenant" claim cannot name a tenant: tenant is missing`],
    ];
    const before = await refusals();
    // A token with many claims (groups, as some providers send them): about 5 KiB, still read.
    cases.push([
      'many groups, and a user id with a space',
      issuer.sign({ ...ok, sub: 'alice smith', groups: Array.from({ length: 120 }, (_, i) => `group-${i}-of-the-organisation`) }),
      `the token's "sub" claim cannot name a user: user id "alice smith" may only hold printable characters without spaces`,
    ]);
    for (const [what, token, why] of cases) {
      const res = await call(await token);
      expect(res, what).toEqual({ status: 401, message: why, challenge: `Bearer error="invalid_token", error_description="${why.replace(/"/g, "'")}"` });
    }
    // Not a JWT, not a static token: the usual answer, naming both ways in.
    expect(await call('not-a-token')).toMatchObject({
      status: 401,
      message: `missing or unknown bearer token: send \`Authorization: Bearer <token>\` with a JWT from ${issuer.url} for ${AUDIENCE} or a token the gateway was given`,
      challenge: 'Bearer',
    });
    // Counted by reason, for an operator watching for attacks or a misconfigured client.
    const after = await refusals();
    const counted = Object.fromEntries(
      Object.keys(after)
        .map((r) => [r, after[r]! - (before[r] ?? 0)])
        .filter(([, n]) => n !== 0),
    );
    expect(counted).toEqual({ expired: 1, claim: 4, signature: 2, algorithm: 1, user: 2, tenant: 1, unknown_token: 1 });
  });

  it('keys rotate without a restart; while the issuer is down a token of a known key still passes, one of a new key is 503 and loses nothing', async () => {
    issuer.keys = [keyA, keyB];
    const byB = await issuer.sign({ sub: 'alice', aud: AUDIENCE, tenant: 'demo' }, keyB);
    expect(await call(byB)).toMatchObject(ACCEPTED);
    issuer.down = true;
    try {
      expect(await call(await issuer.sign({ sub: 'alice', aud: AUDIENCE, tenant: 'demo' }, keyA))).toMatchObject(ACCEPTED);
      const keyC = await makeKey('c');
      const res = await fetch(`${gateway.url}/`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${await issuer.sign({ sub: 'alice', aud: AUDIENCE, tenant: 'demo' }, keyC)}` },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: { id: 't-none' } }),
      });
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('5');
      expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(
        /^cannot fetch the issuer's keys to check the token \(.+\); retry shortly$/,
      );
    } finally {
      issuer.down = false;
    }
    // Not a JWT at all: the static token is looked up and served while the issuer is down.
    expect(await call(STATIC)).toMatchObject(ACCEPTED);
  });
});

describe('troupe gateway with --jwt-issuer', () => {
  it('serves the tokens of the issuer for any of its comma-separated audiences, and names the issuer when it starts', async () => {
    const procs = new ProcessGroup();
    try {
      const gw = await procs.spawnTroupe(
        ['gateway', '--port', '0', '--jwt-issuer', issuer.url, '--jwt-audience', `another-api, ${AUDIENCE}`],
        {},
        { name: 'jwt gateway', ready: /gateway listening on / },
      );
      expect(gw.stderr).toContain(`JWTs from ${issuer.url}`);
      const url = /gateway listening on (http:\/\/\S+)/.exec(gw.stderr)![1]!;
      const alice = await v1Client(url, { token: await issuer.sign({ sub: 'alice', aud: AUDIENCE }) });
      const result = await alice.sendMessage(send(userText('Will it be sunny in Rome?')));
      if (!('status' in result)) throw new Error(`expected a Task, got ${JSON.stringify(result)}`);
      expect(textOf(result.status?.message?.parts)).toMatch(/sunny/i);
      const other = await v1Client(url, { token: await issuer.sign({ sub: 'bob', aud: 'another-api' }) });
      expect(await messageOf(other.getTask({ tenant: '', id: result.id }))).toMatch(/Task not found/);
      const res = await fetch(`${url}/`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${await issuer.sign({ sub: 'eve', aud: 'a-third-api' })}` },
        body: '{}',
      });
      expect(res.status).toBe(401);
    } finally {
      await procs.stopAll();
    }
  });

  it(
    'needs an audience, and an issuer whose configuration it can read: exit 2 saying what to do',
    async () => {
      const noAudience = await runTroupe(['gateway', '--port', '0', '--jwt-issuer', issuer.url], {});
      expect(noAudience.code).toBe(2);
      expect(noAudience.stderr).toContain('--jwt-issuer needs --jwt-audience');
      const unreachable = await runTroupe(['gateway', '--port', '0', '--jwt-issuer', 'http://127.0.0.1:9/', '--jwt-audience', AUDIENCE], {});
      expect(unreachable.code).toBe(2);
      expect(unreachable.stderr).toMatch(
        /cannot read the issuer's OpenID configuration at http:\/\/127\.0\.0\.1:9\/\.well-known\/openid-configuration \(.+\): give its keys with --jwks-url/,
      );
      // The issuer as the user typed it, with a trailing slash: its configuration names it without one.
      const otherName = await runTroupe(['gateway', '--port', '0', '--jwt-issuer', `${issuer.url}/`, '--jwt-audience', AUDIENCE], {});
      expect(otherName.code).toBe(2);
      expect(otherName.stderr).toContain(`is for issuer "${issuer.url}", not ${issuer.url}/: give --jwt-issuer exactly as the issuer names itself`);
    },
    cliTestTimeout(3),
  );
});
