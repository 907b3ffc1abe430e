/**
 * Troupe refuses replicated compare-and-set buckets on nats-server before 2.9.21, which stores two writes
 * at the same revision on a replicated stream (src/transport/jetstream/server-version.ts; the cluster
 * suite shows a 2.9.21+ cluster storing exactly one).
 *   - the version rule itself;
 *   - on this machine's nats-server (the one every single-server suite runs): when it is older than 2.9.21
 *     (Debian bookworm's 2.9.10), `KvThreadStore.open`, `PartitionLeases.start` and `troupe up` with
 *     3 replicas refuse with NATS_SERVER_UNSUPPORTED before they create anything, and `troupe cluster up`
 *     refuses to start a cluster of it; with 1 replica everything works. On a newer server the same calls
 *     get past the check (and a single server then refuses 3 replicas itself).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TroupeError } from '../src/protocol/errors.js';
import { KvThreadStore } from '../src/store/kv.js';
import { PartitionLeases } from '../src/transport/jetstream/leases.js';
import { SERIALIZABLE_CAS_VERSION, parseServerVersion, requireSerializableCas, versionAtLeast } from '../src/transport/jetstream/server-version.js';
import { NatsTransport } from '../src/transport/nats.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { runTroupe } from './helpers/processes.js';

describe('the nats-server version rule', () => {
  it('reads versions as nats-server prints them and compares them as numbers', () => {
    expect(parseServerVersion('2.10.27')).toEqual([2, 10, 27]);
    expect(parseServerVersion('v2.11.0-RC.1')).toEqual([2, 11, 0]);
    expect(parseServerVersion('2.10')).toBeUndefined();
    expect(parseServerVersion('banana')).toBeUndefined();
    expect(versionAtLeast('2.9.10', '2.9.21')).toBe(false);
    expect(versionAtLeast('2.9.20', '2.9.21')).toBe(false);
    expect(versionAtLeast('2.9.21', '2.9.21')).toBe(true);
    expect(versionAtLeast('2.10.0', '2.9.21')).toBe(true);
    expect(versionAtLeast('3.0.0', '2.9.21')).toBe(true);
    expect(versionAtLeast('garbage', '2.9.21')).toBe(false);
  });

  it('refuses more than one replica below 2.9.21, naming the version, the server issue and what to do; allows one replica anywhere', () => {
    expect(() => requireSerializableCas('2.9.10', 'the thread bucket "t"', 1)).not.toThrow();
    expect(() => requireSerializableCas('2.10.27', 'the thread bucket "t"', 3)).not.toThrow();
    expect(() => requireSerializableCas(undefined, 'the thread bucket "t"', 3)).not.toThrow();
    let err: unknown;
    try {
      requireSerializableCas('2.9.10', 'the thread bucket "t"', 3);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TroupeError);
    const e = err as TroupeError;
    expect(e.code).toBe('NATS_SERVER_UNSUPPORTED');
    expect(e.message).toMatch(/the thread bucket "t" has 3 replicas, and nats-server 2\.9\.10 stores two compare-and-set writes/);
    expect(e.message).toContain('nats-io/nats-server#4320');
    expect(e.message).toContain(`Upgrade every server of the cluster to ${SERIALIZABLE_CAS_VERSION} or later`);
    expect(e.details).toEqual({ serverVersion: '2.9.10', replicas: 3, minimum: SERIALIZABLE_CAS_VERSION });
  });
});

describe("on this machine's nats-server", () => {
  let nats: NatsServerHandle;
  let t: NatsTransport;
  let version: string;
  let old: boolean;

  beforeAll(async () => {
    nats = await startNatsServer();
    t = await NatsTransport.connect({ ...nats.asNode, name: 'version-check' });
    version = t.connection.info!.version;
    old = !versionAtLeast(version, SERIALIZABLE_CAS_VERSION);
    console.log(`[server-version] nats-server ${version}: ${old ? 'older than' : 'at least'} ${SERIALIZABLE_CAS_VERSION}`);
  });
  afterAll(async () => {
    await t?.close();
    await nats?.stop();
  });

  it('the thread store and the leases with 3 replicas: refused before anything is created on an old server; 1 replica works', async () => {
    const jsm = await jetstreamManager(t.connection);
    const store = KvThreadStore.open(t.connection, { bucket: 'v_threads', replicas: 3, setupDeadlineMs: 2_000 });
    const leases = new PartitionLeases({
      nc: t.connection,
      tenant: 'demo',
      nodeId: 'v1',
      bucket: 'v_leases',
      replicas: 3,
      leaseTtlMs: 1_000,
      setupDeadlineMs: 2_000,
    }).start();
    if (old) {
      await expect(store).rejects.toSatisfy(
        (e: unknown) => e instanceof TroupeError && e.code === 'NATS_SERVER_UNSUPPORTED' && e.message.includes(`nats-server ${version}`),
      );
      await expect(leases).rejects.toSatisfy(
        (e: unknown) => e instanceof TroupeError && e.code === 'NATS_SERVER_UNSUPPORTED' && e.message.includes('the lease bucket "v_leases"'),
      );
      // Refused before the buckets were made.
      const names: string[] = [];
      for await (const name of jsm.streams.names()) names.push(name);
      expect(names).not.toContain('KV_v_threads');
      expect(names).not.toContain('KV_v_leases');
    } else {
      // Past the check: a single server cannot hold 3 replicas, and says so itself.
      await expect(store).rejects.toSatisfy((e: unknown) => e instanceof TroupeError && e.code !== 'NATS_SERVER_UNSUPPORTED');
      await expect(leases).rejects.toSatisfy((e: unknown) => !(e instanceof TroupeError && e.code === 'NATS_SERVER_UNSUPPORTED'));
    }
    const one = await KvThreadStore.open(t.connection, { bucket: 'v_threads_1' });
    await one.close();
  }, 60_000);

  it('troupe up --replicas 3 exits 1 with NATS_SERVER_UNSUPPORTED on an old server; troupe cluster up refuses to start a cluster of it', async () => {
    const up = await runTroupe(['up', '--nats', nats.url, '--replicas', '3', '--log-level', 'warn'], nats.env, { timeoutMs: 30_000 });
    expect(up.code).toBe(1);
    if (old) {
      expect(up.stderr).toContain('NATS_SERVER_UNSUPPORTED');
      expect(up.stderr).toContain(`nats-server ${version}`);
    } else {
      expect(up.stderr).not.toContain('NATS_SERVER_UNSUPPORTED');
    }
    const bin = execFileSync('sh', ['-c', 'command -v "${NATS_SERVER_BIN:-nats-server}"'], { encoding: 'utf8' }).trim();
    const dir = mkdtempSync(join(tmpdir(), 'troupe-version-'));
    try {
      if (old) {
        const cluster = await runTroupe(['cluster', 'up', '--dir', dir], { NATS_SERVER_BIN: bin }, { timeoutMs: 30_000 });
        expect(cluster.code).toBe(1);
        expect(cluster.stderr).toContain('NATS_SERVER_UNSUPPORTED');
        expect(cluster.stderr).toContain('scripts/nats-server.sh');
        // Refused before it made anything.
        expect(readdirSync(dir)).toEqual([]);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
