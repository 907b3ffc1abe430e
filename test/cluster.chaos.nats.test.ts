/**
 * Chaos on a real 3-server NATS cluster (replicas 3), 3 Troupe nodes and 2 echo agents, each its own
 * process, while conversations run without pause (every thread sends its next message as soon as the
 * previous one is answered):
 *   1. kill -9 of the JetStream meta leader, restarted;
 *   2. kill -9 of the leader of the thread bucket's stream, restarted;
 *   3. SIGSTOP of one server for longer than the route timeout (ping 1 s × 3), then SIGCONT;
 *   4. kill -9 of a Troupe node at random moments, CLUSTER_CHAOS_KILLS times (default 6 in the suite; the
 *      campaign, scripts/chaos-campaign.ts, runs 20 per run), each time the owner of a probe thread's
 *      partition, with a replacement started at once; the time from the kill to the answer of a probe
 *      message sent right after it is the takeover.
 * A client that gets no answer on `out` for 8 s reads the thread's stored history (a node killed between
 * its ack and its publish, or one that could not tell whether its ack took, leaves the answer there only),
 * and after 10 s sends a copy of its message (HEADERS.resend: taken only by a thread that never had the
 * message), as TroupeClient does.
 * Printed: turns attempted, answered, lost, duplicated, each message not answered exactly once, the takeover
 * times, and how the nodes settled a thread's latest message given to them again (their
 * troupe_redelivered_answers_total, scraped before each kill and at the end).
 * Asserted: 0 lost (every message answered on `out`, or its answer found in the stored history; 0 in every
 * run of every campaign since clients send copies), 0 duplicated (no answer published twice: counted by the
 * client's subscriber and by an observer pinned to each server, so a subscriber reconnecting cannot miss a
 * copy; 0 in every run of session 11's campaigns, docs/cluster.md has the tally), no turn ran twice (every answer to a message is
 * the same stored answer), answers in the order of their messages, every stored history in send order with
 * each answered message followed by its answer. A failure lists each message not answered exactly once with
 * what the chaos was doing and what the nodes logged about it. Nothing asserts a timing.
 *
 *   npx vitest run test/cluster.chaos.nats.test.ts
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { META } from '../src/protocol/metadata.js';
import { HEADERS, ThreadEventSchema, decode, encodeJson, type Message, type TaskStatusUpdateEvent } from '../src/protocol/index.js';
import { TroupeClient, userMessage } from '../src/sdk/client.js';
import { KvThreadStore } from '../src/store/kv.js';
import { partitionOf } from '../src/transport/jetstream/ingress.js';
import { NatsTransport } from '../src/transport/nats.js';
import { subjects } from '../src/transport/subjects.js';
import { startNatsCluster, type ClusterServerHandle, type NatsClusterHandle } from './helpers/nats-cluster.js';
import { ProcessGroup, spawnTroupe, type ManagedProcess } from './helpers/processes.js';
import { freePort } from './helpers/nats-server.js';
import { sleep, waitUntil } from './helpers/wait.js';

const PARTITIONS = 16;
const LEASE_TTL_MS = 3_000;
const THREADS = 24;
/**
 * Node kills in one run. Each costs a node process start (~5 s on 2 busy cores) and proves the same thing
 * again at another moment of the conversations: 6 in the suite (kills during a turn, between turns, of a node
 * started by the previous kill), 20 per run in the campaign (scripts/chaos-campaign.ts), where the counts
 * that docs/cluster.md quotes come from.
 */
const NODE_KILLS = Number(process.env.CLUSTER_CHAOS_KILLS ?? 6);
/** The pause between two tries of a publish the stream did not acknowledge (an election, a server down). */
const RETRY_PAUSE_MS = 150;
/** How long a user takes to read an answer before sending the next message (a think time, not a wait for anything). */
const USER_READS_MS = 100;
/** test/fixtures/cluster-chaos-team.ts: messages a thread's history keeps (1,000 turns). */
const CHAOS_HISTORY_LIMIT = 2_000;
const PAUSE_MS = 6_000;
const textOf = (m: Message | undefined) => (m?.parts ?? []).map((p) => (p.kind === 'text' ? p.text : '')).join('');

let cluster: NatsClusterHandle;
const group = new ProcessGroup();
const transports: NatsTransport[] = [];
const nodes: ManagedProcess[] = [];

async function transport(name: string, user = 'node'): Promise<NatsTransport> {
  const t = await NatsTransport.connect({ ...cluster.as(user), name, maxReconnectAttempts: -1 });
  transports.push(t);
  return t;
}

/**
 * The nodes' log level. Info by default: a node's decisions about a redelivered message (published, or not
 * and why) are logged at info, and a message not answered exactly once is reported with every node's lines
 * about it — a CI run that printed a duplicate at `error` had nothing to say about it (session 15).
 * CLUSTER_CHAOS_LOG_LEVEL=debug adds each round of asking.
 */
const LOG_LEVEL = process.env.CLUSTER_CHAOS_LOG_LEVEL ?? 'info';
/** Every node started, killed ones included (their logs). */
const everyNode: ManagedProcess[] = [];
/** Each node's metrics port, to read how it settled redelivered messages (troupe_redelivered_answers_total). */
const metricsPorts = new Map<ManagedProcess, number>();
/** Sum over the nodes scraped (each just before its kill, the survivors at the end), by decision. */
const redelivered: Record<string, number> = {};

async function startNode(name: string): Promise<ManagedProcess> {
  const port = await freePort();
  const node = await spawnTroupe(
    [
      'up',
      '--team',
      'test/fixtures/cluster-chaos-team.ts',
      '--no-agents',
      '--partitions',
      String(PARTITIONS),
      '--replicas',
      '3',
      '--lease-ttl',
      String(LEASE_TTL_MS),
      '--log-level',
      LOG_LEVEL,
      '--metrics-port',
      String(port),
    ],
    cluster.env,
    { name, readyTimeoutMs: 60_000 },
    group,
  );
  metricsPorts.set(node, port);
  everyNode.push(node);
  return node;
}

/** Adds a node's troupe_redelivered_answers_total to `redelivered` (a node that does not answer counts as unscraped). */
async function collectRedelivered(node: ManagedProcess): Promise<void> {
  try {
    const res = await fetch(`http://127.0.0.1:${metricsPorts.get(node)}/metrics`, { signal: AbortSignal.timeout(2_000) });
    const text = await res.text();
    for (const m of text.matchAll(/^troupe_redelivered_answers_total\{decision="(\w+)"\} (\d+)$/gm))
      redelivered[m[1]!] = (redelivered[m[1]!] ?? 0) + Number(m[2]);
    const copies = /^troupe_inbound_duplicates_total (\d+)$/m.exec(text);
    redelivered.streamCopies = (redelivered.streamCopies ?? 0) + Number(copies?.[1] ?? 0);
  } catch {
    redelivered.unscraped = (redelivered.unscraped ?? 0) + 1;
  }
}

async function owners(client: TroupeClient): Promise<Map<string, number[]>> {
  const found = (await client.ps(300)).flatMap((r) => r.actors).filter((a) => a.kind === 'node');
  return new Map(found.map((n) => [n.id, ((n.detail?.partitions as number[] | undefined) ?? []).slice().sort((a, b) => a - b)]));
}

/**
 * An observer of the answers pinned to one server of the cluster: how many times it saw each message
 * answered on `out`. With one on every server, an answer published twice is seen twice by every observer
 * that was connected both times, so a subscriber's reconnect (a killed or frozen server) cannot hide it.
 */
async function observerOn(server: ClusterServerHandle) {
  const t = await NatsTransport.connect({ ...cluster.as('node'), servers: [server.url], name: `chaos-observer-${server.name}`, maxReconnectAttempts: -1 });
  transports.push(t);
  const seen = new Map<string, number>();
  t.subscribe('troupe.demo.out.local.*', (m) => {
    const e = decode(ThreadEventSchema, m.data, 'event');
    if (e.kind !== 'status-update' || !e.final) return;
    const inReplyTo = String((e as TaskStatusUpdateEvent).status.message?.metadata?.[META.inReplyTo] ?? '?');
    seen.set(inReplyTo, (seen.get(inReplyTo) ?? 0) + 1);
  });
  await t.flush();
  return { server: server.name, seen, client: new TroupeClient(t) };
}

/** Threads that talk without pause: each message waits for its stream ack (retried), then for its answer. */
class Conversations {
  readonly sent = new Map<string, string[]>();
  /** Final answers per thread, in arrival order: the messageId each answers. */
  readonly finals = new Map<string, string[]>();
  readonly texts = new Map<string, string>();
  /** The answer message ids seen for each user message: more than one would mean its turn ran twice. */
  readonly answerIds = new Map<string, Set<string>>();
  readonly answeredAt = new Map<string, number>();
  /** What the chaos was doing when each message was sent (for the report of any lost or duplicated). */
  readonly phaseOf = new Map<string, string>();
  phase = 'warm-up';
  private readonly waiting = new Map<string, () => void>();
  private stopping = false;
  private loops: Promise<void>[] = [];

  /** Answers a client found in the thread's stored history after none came on `out` (TroupeClient does so too). */
  readonly recovered = new Set<string>();

  constructor(
    private readonly t: NatsTransport,
    private readonly client: TroupeClient,
  ) {
    t.subscribe('troupe.demo.out.local.*', (m) => {
      const e = decode(ThreadEventSchema, m.data, 'event');
      if (e.kind !== 'status-update' || !e.final) return;
      const message = (e as TaskStatusUpdateEvent).status.message;
      const inReplyTo = String(message?.metadata?.[META.inReplyTo] ?? '?');
      this.finals.set(e.taskId, [...(this.finals.get(e.taskId) ?? []), inReplyTo]);
      if (!this.texts.has(inReplyTo)) this.texts.set(inReplyTo, textOf(message));
      this.answerIds.set(inReplyTo, (this.answerIds.get(inReplyTo) ?? new Set()).add(message?.messageId ?? '?'));
      if (!this.answeredAt.has(inReplyTo)) this.answeredAt.set(inReplyTo, Date.now());
      this.waiting.get(inReplyTo)?.();
    });
  }

  get attempted(): number {
    return [...this.sent.values()].reduce((n, ids) => n + ids.length, 0);
  }

  get answered(): number {
    return [...this.sent.values()].flat().filter((id) => this.answeredAt.has(id)).length;
  }

  /** Sends one message and resolves once the stream has it; the answer is awaited separately. */
  /** Sends until the stream acknowledges; with `withinMs`, throws once that has passed without a PubAck. */
  async send(threadId: string, messageId: string, text: string, withinMs?: number): Promise<{ answered: Promise<void> }> {
    const deadline = withinMs === undefined ? undefined : Date.now() + withinMs;
    let last = 'no answer';
    const answered = new Promise<void>((resolve) => {
      if (this.answeredAt.has(messageId)) resolve();
      this.waiting.set(messageId, resolve);
    });
    const msg = userMessage(text, { messageId });
    for (;;) {
      try {
        const ack = await this.t.request(subjects.threadIn('demo', 'local', threadId), encodeJson(msg), {
          timeoutMs: 3_000,
          headers: { [HEADERS.msgId]: `${threadId}/${messageId}` },
        });
        // During an election JetStream answers with an error instead of a PubAck: send again (same id).
        const body = JSON.parse(new TextDecoder().decode(ack.data)) as { seq?: number };
        if (typeof body.seq === 'number') break;
        last = JSON.stringify(body).slice(0, 300);
      } catch (err) {
        // no answer (server down, reconnecting): the same Nats-Msg-Id makes the retry safe
        last = (err as Error).message;
      }
      if (deadline !== undefined && Date.now() > deadline) throw new Error(`the stream did not acknowledge ${messageId} within ${withinMs} ms (last: ${last})`);
      await sleep(RETRY_PAUSE_MS);
    }
    this.sent.set(threadId, [...(this.sent.get(threadId) ?? []), messageId]);
    this.phaseOf.set(messageId, this.phase);
    return { answered };
  }

  start(threads: string[]): void {
    this.loops = threads.map(async (threadId) => {
      for (let i = 0; !this.stopping; i++) {
        const messageId = `${threadId}-m${i}`;
        const text = `turn ${i} of ${threadId}`;
        const { answered } = await this.send(threadId, messageId, text);
        await this.answerOf(threadId, messageId, text, answered);
        await sleep(USER_READS_MS);
      }
    });
  }

  /**
   * Waits for the answer on `out`; when none comes for a while, reads the thread's stored history as a
   * client does: an answer committed by a node killed before it published is there.
   */
  async answerOf(threadId: string, messageId: string, text: string, answered: Promise<void>): Promise<void> {
    let done = false;
    void answered.then(() => (done = true));
    await Promise.race([answered, sleep(8_000)]);
    // As TroupeClient does (SendOptions.resendAfterMs): about 10 s without an answer, a copy; then after 20 s, 40 s.
    let resendAt = Date.now() + 2_000;
    let resendDelay = 20_000;
    while (!done && !this.stopped) {
      if (Date.now() >= resendAt) {
        await this.resend(threadId, messageId, text);
        resendAt = Date.now() + resendDelay;
        resendDelay *= 2;
      }
      const history = await this.client.task(threadId).then(
        (t) => t.history ?? [],
        () => [],
      );
      const i = history.findIndex((m) => m.messageId === messageId);
      const answer = i >= 0 ? history[i + 1] : undefined;
      if (answer?.role === 'agent' && !this.answeredAt.has(messageId)) {
        this.recovered.add(messageId);
        this.answeredAt.set(messageId, Date.now());
        this.texts.set(messageId, textOf(answer));
        return;
      }
      await Promise.race([answered, sleep(2_000)]);
    }
  }

  private stopped = false;

  /** Copies sent per message for want of an answer (HEADERS.resend). */
  readonly resent = new Map<string, number>();

  private async resend(threadId: string, messageId: string, text: string): Promise<void> {
    const n = (this.resent.get(messageId) ?? 0) + 1;
    this.resent.set(messageId, n);
    const headers = { [HEADERS.msgId]: `${threadId}/${messageId}#${n}`, [HEADERS.resend]: String(n) };
    await this.t
      .request(subjects.threadIn('demo', 'local', threadId), encodeJson(userMessage(text, { messageId })), { timeoutMs: 3_000, headers })
      .catch(() => undefined);
  }

  /**
   * Stops after each thread's current turn; resolves once every sent message is answered (or the deadline
   * passed) and each of the `liveNodes` running nodes has answered a `ps` on the client's connection: a node's
   * reply comes after every answer it published before it (one publisher, one subscriber: in order, across
   * the cluster's routes too), so a second answer any of them published is in `finals` by then.
   */
  async stop(timeoutMs: number, liveNodes: number): Promise<void> {
    this.stopping = true;
    await Promise.race([Promise.all(this.loops), sleep(timeoutMs)]);
    this.stopped = true;
    await waitUntil(async () => ((await owners(this.client)).size === liveNodes ? true : undefined), `a ps reply from each of the ${liveNodes} nodes`, 30_000);
  }
}

beforeAll(async () => {
  cluster = await startNatsCluster(3, { partitions: PARTITIONS, pingIntervalS: 1, pingMax: 3 });
}, 150_000);
/** Writes every node's whole log to .tmp/cluster-chaos/. */
function keepNodeLogs(why: string): void {
  const dir = join('.tmp', 'cluster-chaos');
  mkdirSync(dir, { recursive: true });
  for (const n of everyNode) writeFileSync(join(dir, `${n.name.replace(/\W+/g, '-')}.log`), n.stderr);
  console.log(`[cluster-chaos] ${why}: the nodes' logs (log level ${LOG_LEVEL}) are in ${dir}`);
}
afterEach((ctx) => {
  // A run that fails before its end (a timeout, a stall) keeps every node's log too, as the end does for a
  // run with a problem.
  if (ctx.task.result?.state === 'fail') keepNodeLogs('failed');
});
afterAll(async () => {
  await group.stopAll(2_000);
  await Promise.all(transports.map((t) => t.close().catch(() => undefined)));
  await cluster?.stop();
});

describe('chaos on a 3-server cluster, conversations running all along', () => {
  it(`server kills (meta leader, thread bucket leader), a paused server and ${NODE_KILLS} node kills: 0 lost, 0 duplicated, no turn runs twice, answers and histories in order`, async () => {
    const startedAt = Date.now();
    nodes.push(...(await Promise.all([startNode('node 1'), startNode('node 2'), startNode('node 3')])));
    const agentArgs = ['agent', 'examples/agents/echo.ts', '--heartbeat', '500', '--log-level', 'error'];
    const agentEnv = { TROUPE_NATS_URL: cluster.url, TROUPE_NATS_CREDS: cluster.credsFile('echo') };
    await Promise.all([group.spawnTroupe(agentArgs, agentEnv, { name: 'echo 1' }), group.spawnTroupe(agentArgs, agentEnv, { name: 'echo 2' })]);
    const clientT = await transport('chaos-client');
    const client = new TroupeClient(clientT);
    const observers = await Promise.all(cluster.servers.map((s) => observerOn(s)));
    await waitUntil(
      async () => {
        const o = await owners(client);
        return o.size === 3 && [...o.values()].flat().length === PARTITIONS ? true : undefined;
      },
      '3 nodes sharing the partitions',
      60_000,
    );

    const talk = new Conversations(clientT, client);
    await clientT.flush();
    talk.start(Array.from({ length: THREADS }, (_, i) => `chaos-${i}`));
    /** Every thread makes progress: `turns` more answers than now. */
    const progress = async (what: string, turns = THREADS) => {
      const base = talk.answered;
      await waitUntil(() => talk.answered >= base + turns || undefined, `${turns} more answers ${what}`, 90_000);
    };
    await progress('to warm up');
    const log = (s: string) => console.log(`[cluster-chaos] +${((Date.now() - startedAt) / 1000).toFixed(1)} s ${s} (answered so far ${talk.answered})`);
    const byName = (name: string): ClusterServerHandle => cluster.servers.find((s) => s.name === name)!;

    /** kill -9 of `server` (the `phase` leader), then a restart once every thread moved on without it. */
    const killAndRestart = async (server: ClusterServerHandle, role: string, phase: string) => {
      log(`kill -9 of nats-server ${server.name} (${role})`);
      talk.phase = `${phase} killed`;
      await server.kill();
      await progress(`with ${server.name} down`);
      await server.restart();
      // When the server came back: its replica of a stream not heard from since was never back at all.
      const restartedAt = Date.now();
      await cluster.ready(60_000);
      log(`${server.name} restarted`);
      talk.phase = `${phase} restarted`;
      await progress(`after ${server.name} came back`);
      // One fault at a time: the next one only once the restarted server has caught up on every stream
      // (else a second kill leaves two of three replicas of a stream impaired, and it has no quorum).
      const probe = await NatsTransport.connect({ ...cluster.asNode, name: 'chaos-replicas-probe' });
      try {
        const jsm = await jetstreamManager(probe.connection);
        for (const stream of ['KV_troupe_threads', 'TROUPE_IN']) {
          // The restarted server's replica as the last poll saw it: `active` is how long ago it was heard from.
          let lastOfServer: { active: number } | undefined;
          const caughtUp = (timeoutMs: number) => {
            // A follower is `current` only while it has every entry the leader applied (nats-server's raft
            // Peers: li >= applied). Under this test's steady writes the slower follower is often an entry or
            // two behind, so both current in one poll can take long on a busy machine. Caught up means: each
            // of the three seen current (or leading) at least once since the restart, none offline now.
            const seenCurrent = new Set<string>();
            let last = '(no stream info yet)';
            return waitUntil(
              async () => {
                const info = await jsm.streams.info(stream).catch(() => undefined);
                const leader = info?.cluster?.leader;
                const replicas = info?.cluster?.replicas ?? [];
                last = `leader ${leader ?? '(none)'}; ${replicas.map((r) => `${r.name}: ${r.current ? 'current' : 'behind'}, lag ${r.lag ?? '?'}, seen ${r.active} ns ago${r.offline ? ', offline' : ''}`).join('; ')}`;
                lastOfServer = replicas.find((r) => r.name === server.name);
                if (!leader || replicas.length !== 2) return undefined;
                seenCurrent.add(leader);
                for (const r of replicas) if (r.current) seenCurrent.add(r.name);
                return seenCurrent.size === 3 && replicas.every((r) => !r.offline) ? true : undefined;
              },
              `every replica of ${stream} caught up after ${server.name} came back`,
              timeoutMs,
              250,
            ).catch((err: Error) => {
              throw new Error(`${err.message} (seen current: ${[...seenCurrent].join(', ') || 'none'}; last poll: ${last})`);
            });
          };
          try {
            await caughtUp(40_000);
          } catch (err) {
            // The restarted server's replica not heard from since the restart: it never rejoined the stream's
            // group, a failure of nats-server's that a CI run met once (session 23; docs/cluster.md, "the
            // restarted server may not have rejoined the bucket's group"). Restarting that server is what an
            // operator does; the suite does it once, says so, and waits again. Anything else fails the run.
            const unheardMs = lastOfServer ? lastOfServer.active / 1e6 : 0;
            if (unheardMs < Date.now() - restartedAt - 5_000) throw err;
            log(`${server.name}'s replica of ${stream} not heard from in ${Math.round(unheardMs / 1000)} s since its restart: restarting ${server.name} again`);
            await server.kill();
            await server.restart();
            await cluster.ready(60_000);
            await caughtUp(60_000);
          }
        }
      } finally {
        await probe.close();
      }
    };

    // 1. The JetStream meta leader.
    await killAndRestart(byName(await cluster.metaLeader()), 'JetStream meta leader', 'meta leader');

    // 2. The leader of the thread bucket's stream.
    const bucketLeader = byName(await waitUntil(() => cluster.streamLeader('KV_troupe_threads').catch(() => undefined), 'a thread bucket leader', 30_000));
    await killAndRestart(bucketLeader, 'leader of KV_troupe_threads', 'bucket leader');

    // 3. A server frozen past the route timeout (its peers cut it off), then thawed.
    const frozen = byName(await waitUntil(() => cluster.streamLeader('TROUPE_IN').catch(() => undefined), 'an inbound stream leader', 30_000));
    log(`SIGSTOP of nats-server ${frozen.name} (leader of TROUPE_IN) for ${PAUSE_MS} ms`);
    talk.phase = 'server paused';
    frozen.pause();
    await sleep(PAUSE_MS);
    frozen.resume();
    log(`SIGCONT of ${frozen.name}`);
    talk.phase = 'server thawed';
    await cluster.ready(60_000);
    await progress(`after ${frozen.name} thawed`);

    // 4. Troupe nodes killed at random moments: each time the owner of the probe thread's partition.
    const probe = 'takeover-probe';
    const p = partitionOf(probe, PARTITIONS);
    const takeovers: number[] = [];
    let kills = 0;
    let ownerlessSince: number | undefined;
    for (let k = 0; k < NODE_KILLS; k++) {
      await sleep(200 + Math.random() * 800);
      const o = await owners(client);
      const ownerId = [...o].find(([, parts]) => parts.includes(p))?.[0];
      const victim = ownerId ? nodes.find((n) => n.stderr.includes(ownerId)) : undefined;
      if (!victim) {
        // The partition is between owners right now: look again, for a while.
        ownerlessSince ??= Date.now();
        if (Date.now() - ownerlessSince > 60_000) {
          throw new Error(
            `the probe's partition ${p} has had no owner among the running nodes for 60 s (before node kill ${k}); nodes and their partitions: ${JSON.stringify([...o])}`,
          );
        }
        k--;
        continue;
      }
      ownerlessSince = undefined;
      const killedAt = Date.now();
      talk.phase = `node kill ${k}`;
      await collectRedelivered(victim);
      await victim.kill('SIGKILL');
      kills++;
      nodes.splice(nodes.indexOf(victim), 1);
      const replacement = startNode(`node k${k}`);
      const { answered } = await talk.send(probe, `probe-${k}`, `probe after kill ${k}`, 60_000);
      await Promise.race([talk.answerOf(probe, `probe-${k}`, `probe after kill ${k}`, answered), sleep(60_000)]);
      const at = talk.answeredAt.get(`probe-${k}`);
      if (at !== undefined) takeovers.push(at - killedAt);
      nodes.push(await replacement);
      log(`node kill ${k} (${victim.name}): probe ${at === undefined ? 'not answered within 60 s' : `answered after ${at - killedAt} ms`}`);
    }
    log(`${kills} node kills done`);
    await progress('after the node kills');

    await talk.stop(30_000, nodes.length);
    // The same later marker on each observer's connection: every node's earlier answers are in its counts.
    for (const o of observers) {
      await waitUntil(async () => ((await owners(o.client)).size === nodes.length ? true : undefined), `a ps reply from each node through ${o.server}`, 30_000);
    }
    /** Answers published more than once, as the observers saw them: per message, the most copies any one saw, less one. */
    const seenTwice = [...talk.sent.values()].flat().flatMap((id) => {
      const most = Math.max(0, ...observers.map((o) => o.seen.get(id) ?? 0));
      return most > 1 ? [`${id} seen ${most}× (${observers.map((o) => `${o.server}: ${o.seen.get(id) ?? 0}`).join(', ')})`] : [];
    });
    if (seenTwice.length) console.log(`[cluster-chaos] answers the per-server observers saw more than once:\n  ${seenTwice.join('\n  ')}`);
    for (const node of nodes) await collectRedelivered(node);
    const storeT = await transport('chaos-store');
    const store = await KvThreadStore.open(storeT.connection);
    const problems: string[] = [];
    for (const [threadId, ids] of talk.sent) {
      const got = talk.finals.get(threadId) ?? [];
      const history = (await store.get('demo', threadId))?.record.task.history ?? [];
      for (const id of ids) {
        const n = got.filter((g) => g === id).length;
        if (n === 1 || (n === 0 && talk.recovered.has(id))) continue;
        const stored = history.findIndex((m) => m.messageId === id);
        problems.push(
          `${id} (${talk.phaseOf.get(id)}): answered ${n}×, in the stored history: ${stored < 0 ? 'no' : history[stored + 1]?.role === 'agent' ? 'with its answer' : 'without an answer'}, copies sent ${talk.resent.get(id) ?? 0}`,
        );
      }
    }
    if (problems.length) console.log(`[cluster-chaos] not answered exactly once:\n  ${problems.join('\n  ')}`);
    for (const problem of problems) {
      const id = problem.slice(0, problem.indexOf(' '));
      const lines = everyNode.flatMap((n) =>
        n.stderr
          .split('\n')
          .filter((l) => l.includes(`${id}"`))
          .map((l) => `${n.name}: ${l}`),
      );
      if (lines.length) console.log(`[cluster-chaos] what the nodes logged about ${id} (log level ${LOG_LEVEL}):\n  ${lines.join('\n  ')}`);
    }
    if ((problems.length || process.env.CLUSTER_CHAOS_KEEP_LOGS) && LOG_LEVEL !== 'error') {
      // Every node's whole log, for what the lines above do not show (sequences, partitions, leases), or
      // always with CLUSTER_CHAOS_KEEP_LOGS=1 (e.g. to see where a slow takeover waited).
      keepNodeLogs(problems.length ? 'not answered exactly once' : 'CLUSTER_CHAOS_KEEP_LOGS');
    }
    const sorted = [...takeovers].sort((a, b) => a - b);
    let duplicated = 0;
    let lost = 0;
    for (const [threadId, ids] of talk.sent) {
      const got = talk.finals.get(threadId) ?? [];
      duplicated += got.length - new Set(got).size;
      // (an answer recovered from the store came on `out` 0 times)
      lost += ids.filter((id) => !talk.answeredAt.has(id)).length;
    }
    console.log(
      `[cluster-chaos] turns attempted ${talk.attempted}, answered ${talk.answered} (${talk.recovered.size} of them read from the stored history: their node was killed between the ack and the publish, or could not tell whether its ack took), lost ${lost}, duplicated ${duplicated}, sent again for want of an answer ${talk.resent.size}; ` +
        `node kills ${kills}, takeover (kill -9 to the answer of a message sent right after it, lease ttl ${LEASE_TTL_MS} ms) ` +
        `min ${sorted[0]} ms, median ${sorted[Math.floor(sorted.length / 2)]} ms, max ${sorted[sorted.length - 1]} ms; whole run ${((Date.now() - startedAt) / 1000).toFixed(0)} s; ` +
        `a thread's latest message given again to a node that had not answered it (scraped before each kill and at the end): not published again ${redelivered.marker ?? 0} (its published-answer marker) + ${redelivered.node ?? 0} (the node that answered said so), published ${redelivered.published ?? 0}; second stored copies of a message (the stream's duplicate detection missed them) not answered again ${redelivered.streamCopies ?? 0}` +
        (redelivered.unscraped ? `, nodes not scraped ${redelivered.unscraped}` : ''),
    );
    // The same figures for scripts/chaos-campaign.ts, which tallies many runs.
    console.log(
      `[cluster-chaos] figures ${JSON.stringify({
        attempted: talk.attempted,
        answered: talk.answered,
        recovered: talk.recovered.size,
        lost,
        duplicated,
        duplicatedSeenByObservers: seenTwice.length,
        copies: talk.resent.size,
        kills,
        takeover: { minMs: sorted[0] ?? null, medianMs: sorted[Math.floor(sorted.length / 2)] ?? null, maxMs: sorted[sorted.length - 1] ?? null },
        seconds: Math.round((Date.now() - startedAt) / 1000),
      })}`,
    );
    expect(kills).toBe(NODE_KILLS);
    // Each message not answered exactly once is listed above, with what the chaos was doing when it was
    // sent and the lines the nodes logged about it.
    expect(lost, 'messages never answered nor stored, copies included (listed above)').toBe(0);
    // 0 in every run of session 11's campaigns on c07d602 and later (docs/cluster.md has the tally).
    expect(duplicated, 'answers published twice (listed above)').toBe(0);
    expect(seenTwice, 'answers an observer on some server saw more than once').toEqual([]);
    // What holds on the cluster (and is asserted): no turn ran twice (a message's answers are one stored
    // answer); answers arrive in the order of their messages; every stored history holds its thread's
    // messages in the order sent, each answered message followed by its answer.
    for (const [id, answers] of talk.answerIds) expect(answers.size, `answers to ${id}`).toBe(1);
    for (const [threadId, ids] of talk.sent) {
      // (An answer the client read from the store — its node was killed between the ack and the publish —
      // may come on `out` later, from the next owner: that copy is a late duplicate, not out of order.)
      const firsts = [...new Set(talk.finals.get(threadId) ?? [])].filter((id) => !talk.recovered.has(id));
      expect(firsts, `answers of ${threadId}`).toEqual(ids.filter((id) => firsts.includes(id)));
      for (const id of ids) if (talk.texts.has(id)) expect(talk.texts.get(id), id).toMatch(/^echo\(\d+\): /);
    }
    for (const [threadId, ids] of talk.sent) {
      const history = (await store.get('demo', threadId))?.record.task.history ?? [];
      const users = history.filter((m) => m.role === 'user').map((m) => m.messageId);
      expect(users, `history of ${threadId}`).toEqual(ids.filter((id) => users.includes(id)));
      // A long run can pass the history limit (historyLimit in the team): the oldest turns have left it.
      const kept = ids.slice(Math.max(0, ids.indexOf(users[0] ?? '')));
      if (history.length >= CHAOS_HISTORY_LIMIT) expect(ids.indexOf(users[0] ?? ''), `the oldest turn kept in the history of ${threadId}`).toBeGreaterThan(0);
      for (const id of kept) {
        if (!talk.answeredAt.has(id)) continue;
        const i = history.findIndex((m) => m.messageId === id);
        expect(i, `${id} in the history of ${threadId}`).toBeGreaterThanOrEqual(0);
        expect(history[i + 1]?.role, `the answer to ${id} after it`).toBe('agent');
      }
    }
    await store.close();
  }, 600_000);
});
