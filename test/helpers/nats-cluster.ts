/**
 * A real NATS cluster for a suite: `startNatsCluster(3)` makes a credential store with `creds init`'s
 * library functions (operator mode, tenants demo and acme, the test users), writes one config per server
 * with `CredentialStore.writeClusterConfigs` (what `troupe cluster up` runs), starts the servers on free
 * ports and waits until JetStream has a meta leader.
 *
 *   const cluster = await startNatsCluster(3, { partitions: 64 });
 *   NatsTransport.connect({ ...cluster.asNode, name })      // every server URL: reconnects across them
 *   cluster.servers[0].kill()                               // kill -9; .restart() brings it back
 *   await cluster.metaLeader(); await cluster.streamLeader('KV_troupe_threads')
 *
 * The servers are a nats-server of 2.9.21 or later (`clusterServerBin`): on older ones a replicated
 * bucket stores two compare-and-set writes at the same revision, and Troupe refuses to run on them with
 * more than one replica (src/transport/jetstream/server-version.ts). Debian bookworm's is 2.9.10, so the
 * first cluster of a run may fetch Debian trixie's with scripts/nats-server.sh (a few seconds, once).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { credsAuthenticator } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { LEADERLESS_RESTART_MS, metaGroup } from '../../src/transport/jetstream/meta-group.js';
import { isTransientJetStreamError, retryTransient } from '../../src/transport/jetstream/retry.js';
import { Kvm } from '@nats-io/kv';
import { NatsTransport } from '../../src/transport/nats.js';
import { inboxPrefix } from '../../src/security/roles.js';
import { REPO_ROOT, freePort, natsProcess, startSecureNatsServerStore, TEST_AGENTS, type UserConnectOptions } from './nats-server.js';
import type { CredentialStore } from '../../src/security/creds.js';
import { waitUntil } from './wait.js';

/** Connection options of one user on the cluster: spread into `NatsTransport.connect`. */
type ClusterUserOptions = Omit<UserConnectOptions, 'servers'> & { servers: string[] };

export interface ClusterServerHandle {
  readonly name: string;
  readonly port: number;
  readonly url: string;
  readonly running: boolean;
  /** kill -9 (the store dir stays). */
  kill(): Promise<void>;
  /** SIGSTOP: the process is frozen, its sockets stay open (a network partition as its peers see it). */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Starts it again (after `kill`) on the same port and store dir. */
  restart(): Promise<void>;
  /** What the server printed since it last started. */
  log(): string;
}

export interface NatsClusterHandle {
  readonly servers: readonly ClusterServerHandle[];
  /** Every server's URL, comma-separated (`--nats`, TROUPE_NATS_URL). */
  readonly url: string;
  readonly urls: readonly string[];
  readonly dir: string;
  readonly store: CredentialStore;
  readonly asNode: ClusterUserOptions;
  as(name: string, tenant?: string): ClusterUserOptions;
  credsFile(name: string, tenant?: string): string;
  /** For `troupe` child processes: every URL and the demo node's creds. */
  readonly env: Record<string, string>;
  /** The server name of the JetStream meta leader (asked through the system account). */
  metaLeader(): Promise<string>;
  /** The server name leading a stream's replicas (e.g. `KV_troupe_threads`, `TROUPE_IN`). */
  streamLeader(stream: string): Promise<string>;
  /**
   * Resolves once JetStream answers (a meta leader is elected) and every server is up; default wait 60 s (a
   * fresh cluster on 2 busy cores once took over 30 s). With `restartLeaderless`, servers are restarted one at
   * a time, in turn, while no server names a meta leader for LEADERLESS_RESTART_MS, as `troupe cluster up` does (a fresh 2.10
   * cluster can stay without one: CI, session 21, two of three servers, 60 s).
   */
  ready(timeoutMs?: number, opts?: { restartLeaderless?: boolean }): Promise<void>;
  /**
   * Waits until a bucket with a replica on every server can be made, restarting a server the JetStream
   * meta group left out (`placeable` below): what `startNatsCluster` does for a cluster started whole.
   */
  placeable(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export interface NatsClusterOptions {
  partitions?: number;
  /** How many of the servers to start now (default all); the others start with their `restart()`. */
  startNow?: number;
  /** Route/client ping interval (s) and pings missed: the route timeout is about their product. Default 1 s × 3. */
  pingIntervalS?: number;
  pingMax?: number;
  /** Wait until a bucket of `size` replicas can be placed before returning (default true). */
  placement?: boolean;
}

function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took more than ${ms} ms`)), ms);
  });
  return Promise.race([work, expired]).finally(() => clearTimeout(timer));
}

let clusterBin: string | undefined;

/**
 * The nats-server the cluster helpers run: what scripts/nats-server.sh prints ($NATS_CLUSTER_SERVER_BIN,
 * else $NATS_SERVER_BIN or nats-server when 2.9.21 or later, else Debian trixie's, fetched once into
 * .tmp/nats-server/). Throws what the script said when it found none.
 */
export function clusterServerBin(): string {
  if (clusterBin) return clusterBin;
  try {
    clusterBin = execFileSync(join(REPO_ROOT, 'scripts/nats-server.sh'), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 300_000 }).trim();
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`the cluster suites need nats-server 2.9.21 or later, and scripts/nats-server.sh found none: ${e.stderr?.trim() || e.message}`);
  }
  return clusterBin;
}

export async function startNatsCluster(size = 3, opts: NatsClusterOptions = {}): Promise<NatsClusterHandle> {
  const ports = await Promise.all(Array.from({ length: size * 2 }, () => freePort()));
  const { store, dir } = await startSecureNatsServerStore({
    tenants: ['demo', 'acme'],
    agents: TEST_AGENTS,
    clients: ['client', 'cli'],
    port: ports[0]!,
    ...(opts.partitions !== undefined ? { partitions: opts.partitions } : {}),
  });
  const files = await store.writeClusterConfigs({
    // A name of its own: suites run side by side, and a port one cluster picked while another's server was
    // down (a chaos kill) must not let that server's routes join this cluster (servers whose cluster names
    // differ refuse each other's routes). Seen once, cause not established: a young cluster of 2 of 3 that
    // elected no meta leader in 60 s while the chaos suite killed and restarted servers beside it.
    name: `troupe-test-${randomBytes(4).toString('hex')}`,
    host: '127.0.0.1',
    servers: Array.from({ length: size }, (_, i) => ({ name: `n${i + 1}`, port: ports[i]!, clusterPort: ports[size + i]! })),
    pingIntervalS: opts.pingIntervalS ?? 1,
    pingMax: opts.pingMax ?? 3,
  });
  const bin = clusterServerBin();
  const procs = files.map((f) => ({ file: f, proc: natsProcess(['-c', f.configFile], f.port, {}, bin) }));
  // Each waits for "Server is ready", which a clustered JetStream server prints before its peers are up.
  await Promise.all(procs.slice(0, opts.startNow ?? size).map((p) => p.proc.launch()));
  const urls = files.map((f) => f.url);
  const roles = new Map((await store.users()).map((u) => [`${u.tenant}/${u.name}`, u.role]));
  const as = (name: string, tenant = 'demo') => {
    const role = roles.get(`${tenant}/${name}`);
    if (!role) throw new Error(`no test user "${name}" in tenant "${tenant}"`);
    return {
      servers: [...urls],
      authenticator: credsAuthenticator(readFileSync(store.credsFile(tenant, name))),
      ...(role === 'client' || role === 'operator' ? { inboxPrefix: inboxPrefix(name) } : {}),
    };
  };
  const system = () => NatsTransport.connect({ servers: [...urls], creds: store.systemCredsFile, name: 'cluster-probe', maxReconnectAttempts: 0 });
  const handle: NatsClusterHandle = {
    servers: procs.map(({ file, proc }) => ({
      name: file.name,
      port: file.port,
      url: file.url,
      get running() {
        return proc.running();
      },
      kill: () => proc.signal('SIGKILL'),
      pause: () => void proc.signal('SIGSTOP'),
      resume: () => void proc.signal('SIGCONT'),
      restart: async () => {
        if (proc.running()) await proc.shutdown();
        await proc.launch();
      },
      log: () => proc.log(),
    })),
    url: urls.join(','),
    urls,
    dir,
    store,
    asNode: as('node'),
    as,
    credsFile: (name, tenant = 'demo') => store.credsFile(tenant, name),
    env: { TROUPE_NATS_CREDS: store.credsFile('demo', 'node'), TROUPE_NATS_URL: urls.join(',') },
    metaLeader: async () => {
      const t = await system();
      try {
        const replies = await t.requestMany('$SYS.REQ.SERVER.PING.JSZ', new TextEncoder().encode('{}'), { timeoutMs: 1_000, maxReplies: size });
        const seen: string[] = [];
        for (const r of replies) {
          const body = JSON.parse(new TextDecoder().decode(r.data)) as {
            server?: { name?: string };
            data?: { meta_cluster?: { leader?: string; cluster_size?: number } };
          };
          const leader = body.data?.meta_cluster?.leader;
          if (leader) return leader;
          seen.push(`${body.server?.name ?? '?'}: meta group of ${body.data?.meta_cluster?.cluster_size ?? '?'}`);
        }
        throw new Error(`no server names a JetStream meta leader (${replies.length} of ${size} answered${seen.length ? `; ${seen.join(', ')}` : ''})`);
      } finally {
        await t.close();
      }
    },
    streamLeader: async (stream) => {
      const t = await NatsTransport.connect({ ...as('node'), name: 'cluster-probe', maxReconnectAttempts: 0 });
      try {
        const jsm = await jetstreamManager(t.connection);
        // Asked again while the stream elects (no leader) or JetStream answers "temporarily unavailable"
        // (a CI run: right after a leader stepdown).
        return await retryTransient(
          async () => {
            const leader = (await jsm.streams.info(stream)).cluster?.leader;
            if (!leader) throw new Error(`stream ${stream} has no leader now`);
            return leader;
          },
          { deadlineMs: 30_000, transient: (err) => isTransientJetStreamError(err) || /has no leader now/.test(String(err)) },
        );
      } finally {
        await t.close();
      }
    },
    ready: async (timeoutMs = 60_000, readyOpts = {}) => {
      const deadline = Date.now() + timeoutMs;
      let last: unknown;
      let leaderlessSince: number | undefined;
      let next = 0;
      while (Date.now() < deadline) {
        try {
          // Each attempt bounded: a connection opened to a server that stops answering must not hold it.
          await withTimeout(
            (async () => {
              await handle.metaLeader();
              const t = await NatsTransport.connect({ ...as('node'), name: 'cluster-probe', maxReconnectAttempts: 0 });
              try {
                await (await jetstreamManager(t.connection)).getAccountInfo();
              } finally {
                void t.close().catch(() => undefined);
              }
            })(),
            10_000,
            'an attempt to reach JetStream',
          );
          return;
        } catch (err) {
          last = err;
          const leaderless = /no server names a JetStream meta leader/.test((err as Error).message);
          leaderlessSince = leaderless ? (leaderlessSince ?? Date.now()) : undefined;
          if (readyOpts.restartLeaderless && leaderlessSince !== undefined && Date.now() - leaderlessSince >= LEADERLESS_RESTART_MS) {
            const running = handle.servers.filter((sv) => sv.running);
            const server = running[next++ % running.length];
            if (server) {
              console.log(`[cluster] no server names a JetStream meta leader after ${LEADERLESS_RESTART_MS / 1000} s; restarting ${server.name}`);
              await server.restart().catch((e: unknown) => console.log(`[cluster] restarting ${server.name} failed: ${(e as Error).message}`));
            }
            leaderlessSince = Date.now();
          }
          await new Promise((r) => setTimeout(r, 200));
        }
      }
      throw new Error(`the cluster's JetStream was not ready within ${timeoutMs} ms: ${(last as Error)?.message}`);
    },
    placeable: (timeoutMs = 90_000) => placeable(handle, as('node'), system, size, timeoutMs),
    stop: async () => {
      await Promise.all(
        procs.map(async ({ proc }) => {
          proc.signal('SIGCONT').catch(() => undefined);
          await proc.shutdown();
        }),
      );
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await handle.ready(90_000, { restartLeaderless: true });
    // A fresh 2.10 cluster can elect its meta leader with a group short of a server, and then refuses to
    // place a stream on all of them ("no suitable peers for placement"): see `placeable`. Ready means a
    // bucket of `size` replicas can be made.
    if ((opts.startNow ?? size) === size && opts.placement !== false) await placeable(handle, as('node'), system, size, 90_000);
  } catch (err) {
    await handle.stop();
    throw err;
  }
  return handle;
}

/**
 * Waits until a bucket of `replicas` replicas can be created (and removes it).
 *
 * A fresh nats-server 2.10 cluster on a busy machine sometimes elects its meta leader with a group of two
 * and never adds the third server (`cluster_size: 2` in the leader's JSZ: 11 of 38 fresh clusters started
 * beside a chaos run on 2 cores, each stuck for as long as it was watched, up to 150 s): every stream
 * of 3 replicas is then refused ("no suitable peers for placement"). Restarting the server left out makes
 * the leader add it (placed about 1 s later in 4 of 4 such clusters), so that is what this does after 8 s.
 */
async function placeable(
  cluster: NatsClusterHandle,
  user: ClusterUserOptions,
  system: () => Promise<NatsTransport>,
  replicas: number,
  timeoutMs: number,
): Promise<void> {
  const t = await NatsTransport.connect({ ...user, name: 'cluster-placement-probe' });
  const started = Date.now();
  let lastRestart = 0;
  let restarted: string[] = [];
  try {
    let last = 'no attempt finished';
    const create = async () => {
      const made = await new Kvm(t.connection).create('cluster_ready_probe', { replicas }).then(
        (kv) => kv.destroy(),
        (err: unknown) => {
          last = (err as Error)?.message ?? String(err);
          return undefined;
        },
      );
      if (made) return made;
      if (Date.now() - started > 8_000 && Date.now() - lastRestart > 15_000) {
        const meta = await system()
          .then((t) => metaGroup(t, cluster.servers.length).finally(() => t.close()))
          .catch(() => undefined);
        if (meta?.leader) {
          const left = cluster.servers.filter((s) => s.running && !meta.members.includes(s.name));
          if (left.length) {
            lastRestart = Date.now();
            restarted = [...restarted, ...left.map((s) => s.name)];
            for (const s of left) await s.restart();
          }
        }
      }
      return undefined;
    };
    await waitUntil(create, `a bucket of ${replicas} replicas to be placed`, timeoutMs, 500).catch((err: unknown) => {
      throw new Error(
        `${(err as Error).message} (the cluster's last answer: ${last}${restarted.length ? `; restarted ${restarted.join(', ')}, left out of the JetStream meta group` : ''})`,
      );
    });
  } finally {
    await t.close();
  }
}
