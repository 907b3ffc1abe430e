/**
 * The repository's development `nats.conf`: after `troupe creds init`, `nats-server -c nats.conf` starts in
 * operator mode with JetStream, from what creds init generated (included from .troupe/); a node's
 * credentials connect and reach JetStream, a connection without credentials is refused. The file itself
 * holds no key, JWT or path of a store, and what it includes is git-ignored.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, credsAuthenticator } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, REPO_ROOT } from './helpers/nats-server.js';
import { ProcessGroup, runTroupe, type ManagedProcess } from './helpers/processes.js';

describe('nats.conf', () => {
  const group = new ProcessGroup();
  let dir: string;
  let server: ManagedProcess;
  let url: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'troupe-natsconf-'));
    copyFileSync(join(REPO_ROOT, 'nats.conf'), join(dir, 'nats.conf'));
    const init = await runTroupe(['creds', 'init', '--dir', join(dir, '.troupe')], {}, { timeoutMs: 60_000 });
    expect(init.code, init.stderr).toBe(0);
    // The file as committed; only the port is chosen here (4222 may be taken on a shared machine).
    const port = await freePort();
    url = `nats://127.0.0.1:${port}`;
    server = await group.spawn(
      process.env.NATS_SERVER_BIN ?? 'nats-server',
      ['-c', join(dir, 'nats.conf'), '-p', String(port)],
      {},
      { name: 'nats-server -c nats.conf', ready: /Server is ready/ },
    );
  }, 90_000);

  afterAll(async () => {
    await group.stopAll();
    rmSync(dir, { recursive: true, force: true });
  });

  it('starts in operator mode with JetStream from what creds init generated', () => {
    expect(server.stderr).toContain('Trusted Operators');
    expect(server.stderr).toContain(`Store Directory: "${join(dir, '.troupe/nats/jetstream')}"`);
  });

  it("lets a node's credentials in and to JetStream, and nobody without credentials", async () => {
    const creds = readFileSync(join(dir, '.troupe/creds/tenants/demo/users/node.creds'));
    const nc = await connect({ servers: url, authenticator: credsAuthenticator(creds) });
    try {
      const info = await (await jetstreamManager(nc)).getAccountInfo();
      expect(info.limits.max_memory).toBeGreaterThan(0);
    } finally {
      await nc.close();
    }
    await expect(connect({ servers: url, reconnect: false })).rejects.toThrow(/authorization/i);
  });

  it('holds no secret, and what it includes is git-ignored', () => {
    const text = readFileSync(join(REPO_ROOT, 'nats.conf'), 'utf8');
    expect(text).not.toMatch(/eyJ[\w-]{20,}|\bS[UAO][A-Z2-7]{40,}|\bA[A-Z2-7]{55}\b/);
    expect(text).toContain('include "./.troupe/nats-include.conf"');
    const ignored = execFileSync('git', ['check-ignore', '.troupe/nats-include.conf', '.troupe/creds/operator.json'], { cwd: REPO_ROOT, encoding: 'utf8' });
    expect(ignored.trim().split('\n')).toEqual(['.troupe/nats-include.conf', '.troupe/creds/operator.json']);
  });
});
