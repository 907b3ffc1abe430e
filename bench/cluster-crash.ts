/**
 * What a crash of a JetStream server costs a thread: a 3-server cluster (replicas 3), a node, an echo agent
 * and a client all on the first server; each round sends a turn on a thread, kills (-9) the server leading
 * that thread's partition consumer (moved off the first server by stepdowns), sends the next turn 500 ms
 * later and times it from its send to its answer, then restarts the server. It prints each round with the
 * node's lines about the partition and its leases, timed from the kill (bench/PROFILE.md, session 23):
 *
 *   node --conditions=source --import tsx bench/cluster-crash.ts
 *   CRASH_LEASES=1 CRASH_LEASE_TTL_MS=15000 node --conditions=source --import tsx bench/cluster-crash.ts
 *
 * CRASH_ROUNDS (default 4); CRASH_LOG_LEVEL=debug also counts how leases were taken back (reclaimed or created);
 * CRASH_LEASES=1 first moves the leader of the leases' bucket to the server to be
 * killed (then the node's leases lapse unless the TTL outlasts the election); CRASH_LEASE_TTL_MS the node's
 * lease TTL (default 5,000, as `troupe up`); CRASH_NODE_SERVER=1 gives every connection all the servers'
 * URLs and kills the server the node is connected to (the node reconnects and restarts its consumers).
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { AgentHost } from '../src/actors/agent-host.js';
import { TroupeNode } from '../src/actors/node.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { KvThreadStore } from '../src/store/kv.js';
import { INGRESS_STREAM, partitionOf } from '../src/transport/jetstream/ingress.js';
import { NatsTransport } from '../src/transport/nats.js';
import { capturingLogger } from '../test/helpers/log-lines.js';
import { startNatsCluster } from '../test/helpers/nats-cluster.js';

const PARTITIONS = 64;
const ROUNDS = Number(process.env.CRASH_ROUNDS ?? 4);
const LEASE_TTL_MS = Number(process.env.CRASH_LEASE_TTL_MS ?? 5_000);
const MOVE_LEASES = process.env.CRASH_LEASES === '1';
const KILL_NODE_SERVER = process.env.CRASH_NODE_SERVER === '1';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const cluster = await startNatsCluster(3, { partitions: PARTITIONS });
const home = cluster.servers[0]!;
// CRASH_NODE_SERVER=1: every connection may move to any server, and the server killed is the node's.
const connect = (user: string, name: string) =>
  NatsTransport.connect({ ...cluster.as(user), ...(KILL_NODE_SERVER ? {} : { servers: [home.url] }), name, maxReconnectAttempts: -1 });
const [nodeT, agentT, clientT] = await Promise.all([connect('node', 'crash-node'), connect('echo', 'crash-echo'), connect('client', 'crash-client')]);
const { lines, log } = capturingLogger(process.env.CRASH_LOG_LEVEL ?? 'info');
const echo = defineAgent({ card: { id: 'echo', name: 'Echo', description: 'echoes' }, handle: (_m, ctx) => reply(ctx.text, { to: 'user' }) });
const host = await new AgentHost({ transport: agentT, agent: echo }).start();
const store = await KvThreadStore.open(nodeT.connection, { replicas: 3 });
const node = await new TroupeNode({
  transport: nodeT,
  logger: log,
  store,
  durable: { nc: nodeT.connection, partitions: PARTITIONS, replicas: 3, leaseTtlMs: LEASE_TTL_MS },
  config: { entryAgent: 'echo' },
}).start();
const client = new TroupeClient(clientT, { tenant: 'demo', principal: 'client' });
const jsm = await jetstreamManager(nodeT.connection);
const consumerLeader = async (p: number) => (await jsm.consumers.info(INGRESS_STREAM, `p${p}`)).cluster?.leader;
const stepdown = (api: string) => nodeT.request(`$JS.API.${api}`, new Uint8Array(), { timeoutMs: 10_000 });

try {
  await node.registry.waitFor(['echo']);
  while (((node.ps().actors[0]?.detail?.partitions as number[] | undefined) ?? []).length < PARTITIONS) await sleep(100);
  console.log(
    `lease TTL ${LEASE_TTL_MS} ms${MOVE_LEASES ? '; the leases bucket led by the server killed' : ''}${KILL_NODE_SERVER ? "; the server killed is the node's" : ''}`,
  );
  for (let round = 0; round < ROUNDS; round++) {
    const threadId = `crash-${round}`;
    const p = partitionOf(threadId, PARTITIONS);
    await client.send('before', { threadId, timeoutMs: 30_000 });
    for (let i = 0; !KILL_NODE_SERVER && i < 10 && (await consumerLeader(p)) === home.name; i++) {
      await stepdown(`CONSUMER.LEADER.STEPDOWN.${INGRESS_STREAM}.p${p}`);
      await sleep(1_000);
    }
    const leader = KILL_NODE_SERVER ? nodeT.connection.info?.server_name : await consumerLeader(p);
    const victim = cluster.servers.find((s) => s.name === leader);
    if (!victim || (!KILL_NODE_SERVER && victim === home)) throw new Error(`the consumer of partition ${p} stayed on ${home.name}`);
    for (let i = 0; MOVE_LEASES && i < 10 && (await cluster.streamLeader('KV_troupe_leases')) !== leader; i++) {
      await stepdown('STREAM.LEADER.STEPDOWN.KV_troupe_leases');
      await sleep(1_500);
    }
    const leaders = `${INGRESS_STREAM} ${await cluster.streamLeader(INGRESS_STREAM)}, threads ${await cluster.streamLeader('KV_troupe_threads')}, leases ${await cluster.streamLeader('KV_troupe_leases')}`;
    const mark = lines.length;
    let electedAt: number | undefined;
    const elected = nodeT.connection.subscribe('$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.KV_troupe_leases', {
      callback: () => void (electedAt ??= Date.now()),
    });
    const killedAt = Date.now();
    await victim.kill();
    await sleep(500);
    const sentAt = performance.now();
    await client.send('after the crash', { threadId, timeoutMs: 120_000, unavailableRetryMs: 120_000 });
    const ms = performance.now() - sentAt;
    const said = lines.slice(mark).filter((l) => l.level >= 30 && l.partition === p);
    const lost = lines.slice(mark).filter((l) => l.msg === 'lease lost');
    const byReason = [...new Set(lost.map((l) => l.reason as string))].map((r) => `${lost.filter((l) => l.reason === r).length} ${r}`).join(', ');
    const lapsed = `${lost.length}${byReason ? ` (${byReason})` : ''}`;
    // At debug (CRASH_LOG_LEVEL=debug): renewals that landed but timed out, and how partitions were taken back.
    const unanswered = lines.slice(mark).filter((l) => l.msg === 'own lease write had landed unanswered; writing on its revision').length;
    const how = lines.slice(mark).filter((l) => l.msg === 'lease acquired');
    const taken = how.length
      ? `; leases taken: ${['reclaimed', 'created'].map((h) => `${how.filter((l) => l.how === h).length} ${h}`).join(', ')}; writes that had landed unanswered: ${unanswered}`
      : '';
    elected.unsubscribe();
    const election = electedAt === undefined ? '' : `; the leases' bucket elected a leader at +${electedAt - killedAt} ms`;
    console.log(
      `round ${round}: killed ${victim.name} (leader of p${p}; leaders: ${leaders}); the turn 500 ms later took ${ms.toFixed(0)} ms; leases lost: ${lapsed}${election}${taken}`,
    );
    for (const l of said) console.log(`  +${(l.time as number) - killedAt} ms  ${l.msg}${l.consumer ? ` (consumer ${l.consumer as string})` : ''}`);
    // Every partition's way back, not only the turn's: when they were consumed again, and how.
    const restarts = lines.slice(mark).filter((l) => l.msg === 'restarting partition consumer').length;
    const notYet = lines.slice(mark).filter((l) => l.msg === 'could not make the partition consumer yet; trying again').length;
    const restarted = lines.slice(mark).filter((l) => l.msg === 'partition consumer restarted');
    const keptAgain = restarted.filter((l) => l.consumer === 'kept').length;
    const whyAgain = [...new Set(restarted.flatMap((l) => (l.madeBecause ? [l.madeBecause as string] : [])))];
    const lastAgain = restarted.length ? `, the last at +${Math.max(...restarted.map((l) => l.time as number)) - killedAt} ms` : '';
    if (restarts > 0) {
      console.log(
        `  partition consumers restarting: ${restarts}; restarted: ${restarted.length} (${keptAgain} kept${whyAgain.length ? `; made: ${whyAgain.join('; ')}` : ''})${lastAgain}; "could not make the partition consumer yet": ${notYet}`,
      );
    }
    const back = lines.slice(mark).filter((l) => l.msg === 'consuming partition');
    if (back.length > 0) {
      const at = back.map((l) => (l.time as number) - killedAt).sort((a, b) => a - b);
      const kept = back.filter((l) => l.consumer === 'kept').length;
      const why = [...new Set(back.flatMap((l) => (l.madeBecause ? [l.madeBecause as string] : [])))];
      console.log(
        `  partitions consumed again: ${back.length} (${kept} consumers kept, ${back.length - kept} made${why.length ? `: ${why.join('; ')}` : ''}), from +${at[0]} to +${at.at(-1)} ms`,
      );
    }
    await victim.restart();
    await cluster.ready(60_000);
    await sleep(3_000);
  }
} finally {
  await node.stop();
  await host.stop();
  await store.close();
  await Promise.all([nodeT, agentT, clientT].map((t) => t.close()));
  await cluster.stop();
}
