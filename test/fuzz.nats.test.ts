/**
 * Nothing a participant sends can crash, stall or poison a node (issue 7), on a real nats-server in the
 * shipped operator-mode setup, with the node as its own process: more than 10,000 generated hostile
 * inputs at every NATS ingress —
 *   - messages into threads as a client principal (bad ids, broken JSON, schema violations, hostile
 *     nesting and sizes, prototype-named recipients, reused message ids, bad user headers, header blocks the client library cannot read),
 *   - owner-checked client requests (task, cancel) with junk,
 *   - agent replies and streamed chunks from a hostile entry agent (garbage, 900 KB replies, 50,000-deep
 *     metadata, lies in routing and handoff metadata, silence),
 *   - registry events from that agent (cards for other ids, floods of instances, huge cards, endless ttl),
 *   - control requests as the operator (junk on every verb)
 * — while a control conversation with a healthy agent runs throughout. It asserts: the node never exits,
 * the control conversation never fails, no thread is left working, every message into a thread with a
 * valid id got a final event (an answer or a typed error) and every other one was refused by the client
 * library, the broker or the dead-letter stream, and the node's heap comes back down. Counts are printed.
 * The generator is seeded (FUZZ_SEED) so a failure can be replayed.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, headers as natsHeaders, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import echo from '../examples/agents/echo.js';
import { AgentHost } from '../src/actors/agent-host.js';
import { ErrorReplySchema, HEADERS, LIMITS, ThreadEventSchema, isValidId } from '../src/protocol/index.js';
import { TroupeClient } from '../src/sdk/client.js';
import { DEAD_LETTER_STREAM, INGRESS_STREAM } from '../src/transport/jetstream/ingress.js';
import { NatsTransport } from '../src/transport/nats.js';
import { agentReplyBody, chunkBody, ctlBody, int, pick, registryBody, rng, threadIdCandidate, userMessageBody } from './helpers/fuzz.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup, type ManagedProcess } from './helpers/processes.js';
import { waitUntil, waitWhileProgressing } from './helpers/wait.js';

const SEED = Number(process.env.FUZZ_SEED ?? 20261126);
const N = { inbound: 4_000, requests: 1_000, registry: 2_000, ctl: 2_000 };
const enc = new TextEncoder();
const dec = new TextDecoder();
const T = 'troupe.demo';

describe('fuzz: every NATS ingress of a node', () => {
  const procs = new ProcessGroup();
  let nats: NatsServerHandle;
  let node: ManagedProcess;
  const conns: NatsConnection[] = [];
  const transports: NatsTransport[] = [];
  let echoHost: AgentHost;

  const open = async (user: string) => {
    const nc = await connect({ ...nats.as(user), name: `fuzz-${user}` });
    conns.push(nc);
    return nc;
  };

  beforeAll(async () => {
    nats = await startNatsServer();
    // --expose-gc: `ctl memory` can then measure what the node holds after a full collection.
    node = await procs.spawnTroupe(
      ['up', '--nats', nats.url, '--team', 'test/fixtures/fuzz-team.ts', '--idle', '2000', '--log-level', 'error'],
      { ...nats.env, NODE_OPTIONS: '--expose-gc' },
      { name: 'node' },
    );
    const echoT = await NatsTransport.connect({ ...nats.as('echo'), name: 'fuzz-echo' });
    transports.push(echoT);
    echoHost = await new AgentHost({ transport: echoT, agent: echo, heartbeatMs: 1_000 }).start();
  });

  afterAll(async () => {
    await echoHost?.stop().catch(() => undefined);
    await Promise.all(transports.map((t) => t.close()));
    await Promise.all(conns.map((c) => c.close()));
    await procs.stopAll();
    await nats?.stop();
  });

  it(`survives ${Object.values(N).reduce((a, b) => a + b, 0)}+ hostile inputs with a control conversation running throughout`, async () => {
    const r = rng(SEED);
    const started = performance.now();
    const counts = {
      inboundPublished: 0,
      inboundRefusedByClient: 0,
      rawHeaderBlocks: 0,
      jsDuplicates: 0,
      agentCalls: 0,
      agentReplies: 0,
      chunks: 0,
      registry: 0,
      ctl: 0,
      ctlTyped: 0,
      ctlOther: 0,
      ctlInspectUnheld: 0,
      requests: 0,
      requestsTyped: 0,
      requestsAnswered: 0,
    };

    // --- the hostile entry agent `triage` and its registry lies ---
    const triage = await open('triage');
    const card = JSON.stringify({ kind: 'announce', instanceId: 'fuzz-triage', ttlMs: 15_000, card: { id: 'triage', name: 'Triage', description: 'hostile' } });
    triage.publish(`${T}.registry.triage`, card);
    const announcer = setInterval(() => triage.publish(`${T}.registry.triage`, card), 1_000);
    triage.subscribe(`${T}.agent.triage`, {
      queue: 'agent-triage',
      callback: (_err, m) => {
        counts.agentCalls++;
        if (r() < 0.05) return; // silence: the call times out
        // Chunks to the call's chunk subject, and now and then to a made-up one of its own (no open call).
        const chunkSubject = m.headers?.get(HEADERS.chunks) ?? '';
        for (let i = int(r, 4); i > 0; i--) {
          counts.chunks++;
          triage.publish(r() < 0.1 ? `${T}.chunks.triage.${int(r, 1_000)}.${int(r, 1_000)}` : chunkSubject, enc.encode(chunkBody(r)));
        }
        counts.agentReplies++;
        const body = agentReplyBody(r);
        try {
          m.respond(enc.encode(body));
        } catch {
          // over max_payload: the client library refuses; the call times out, which is its answer
        }
      },
    });

    // --- the control conversation: one thread, a healthy agent, running throughout ---
    const cliT = await NatsTransport.connect({ ...nats.as('cli'), name: 'fuzz-control' });
    transports.push(cliT);
    const cli = new TroupeClient(cliT, { principal: 'cli' });
    await waitUntil(
      async () =>
        (await cli.send('warm up', { to: 'echo', timeoutMs: 10_000 }).then(
          (x) => x.text.includes('warm up'),
          () => false,
        )) || undefined,
      'the mesh to answer',
      30_000,
    );
    const operatorT = await NatsTransport.connect({ ...nats.as('operator'), name: 'fuzz-operator' });
    transports.push(operatorT);
    const operator = new TroupeClient(operatorT, { principal: 'operator' });
    const nodeStats = async () =>
      (await operator.ctl('memory', { gc: true })) as { collected: boolean; heapUsedBytes: number; rssBytes: number; liveThreads: number };
    const baseline = await nodeStats();
    const control = { ok: 0, failed: [] as string[] };
    let storming = true;
    const controlLoop = (async () => {
      // Stops when the test ends, however it ends (afterAll closes the connections: no spinning on errors).
      onTestFinished(() => {
        storming = false;
      });
      for (let i = 0; storming; i++) {
        const text = `control ${i}`;
        try {
          const res = await cli.send(text, { threadId: 't-control', to: 'echo', timeoutMs: 30_000 });
          if (res.text.endsWith(text) && !res.error) control.ok++;
          else control.failed.push(`${text}: ${res.text} ${JSON.stringify(res.error)}`);
        } catch (err) {
          control.failed.push(`${text}: ${(err as Error).message}`);
        }
      }
    })();

    // --- messages into threads, as the client principal ---
    const client = await open('client');
    // The observer of every thread's events is this busy process: the server may cut it off as a slow
    // consumer, and core NATS does not replay what it missed meanwhile (clients read it from the store).
    let observerDisconnects = 0;
    void (async () => {
      for await (const st of client.status()) if (st.type === 'disconnect') observerDisconnects++;
    })();
    const finals = new Map<string, number>();
    /** `<thread>/<inReplyTo>:<state>` of every final event, and the messageIds accepted per thread (diagnostics). */
    const answeredIds = new Set<string>();
    const acceptedIds = new Map<string, string[]>();
    /**
     * The same messages by the id a refusal names when the body does not decode (then the node only has
     * the Nats-Msg-Id, `<thread>/<i>`, and names `<i>`).
     */
    const headerIds = new Map<string, string[]>();
    /**
     * Messages re-sent into a thread with a messageId it already had (counted and printed). Each is a
     * message of its own: it gets a final event of its own (the first one's answer again, or a typed
     * error), and the first one keeps its own.
     */
    let reusedIds = 0;
    client.subscribe(`${T}.out.client.*`, {
      callback: (_err, m) => {
        const parsed = ThreadEventSchema.safeParse(JSON.parse(dec.decode(m.data)));
        if (parsed.success && parsed.data.kind === 'status-update' && parsed.data.final) {
          finals.set(parsed.data.taskId, (finals.get(parsed.data.taskId) ?? 0) + 1);
          const to = parsed.data.status.message?.metadata?.['troupe/inReplyTo'];
          answeredIds.add(`${parsed.data.taskId}/${typeof to === 'string' ? to : '?'}:${parsed.data.status.state}`);
        }
      },
    });
    const expected = new Map<string, number>();
    let invalidStored = 0;
    const inbound = async (i: number) => {
      const threadId = threadIdCandidate(r);
      const body = userMessageBody(r);
      let h: MsgHdrs = natsHeaders();
      h.set(HEADERS.msgId, `${threadId.slice(0, 64)}/${i}`);
      if (r() < 0.1) h.set(HEADERS.user, pick(r, ['bob', 'x'.repeat(500), 'has space', '__proto__']));
      // A header block the client library would refuse to write or to read (a bad name, a bare line break
      // in a value, an empty name), written raw: the client's publish takes a header object's encode().
      if (r() < 0.05) {
        const bad = pick(r, ['Bad Key: x', `${HEADERS.user}: a\nb`, ': empty', 'Bäd: x', '__proto__: x', 'no colon at all']);
        const block = enc.encode(`NATS/1.0\r\n${HEADERS.msgId}: ${threadId.slice(0, 64)}/${i}\r\n${bad}\r\n\r\n`);
        h = { encode: () => block } as unknown as MsgHdrs;
        counts.rawHeaderBlocks++;
      }
      try {
        const ack = JSON.parse(dec.decode((await client.request(`${T}.in.client.${threadId}`, enc.encode(body), { headers: h, timeout: 10_000 })).data)) as {
          duplicate?: boolean;
          error?: unknown;
        };
        counts.inboundPublished++;
        if (ack.duplicate) counts.jsDuplicates++;
        else if (isValidId('thread', threadId)) {
          let mid = '?';
          try {
            mid = String((JSON.parse(body) as { messageId?: unknown }).messageId);
          } catch {
            // not JSON: refused by the node
          }
          const ids = acceptedIds.get(threadId) ?? [];
          // A messageId this thread was already sent (see the note on reusedIds above).
          if (mid !== '?' && ids.includes(mid)) reusedIds++;
          expected.set(threadId, (expected.get(threadId) ?? 0) + 1);
          acceptedIds.set(threadId, [...ids, mid]);
          headerIds.set(threadId, [...(headerIds.get(threadId) ?? []), String(i)]);
        } else invalidStored++;
      } catch {
        counts.inboundRefusedByClient++; // over max_payload, or a subject the client library refuses
      }
    };
    // --- owner-checked requests, registry lies, control junk ---
    const request = async () => {
      counts.requests++;
      const verb = pick(r, ['task', 'cancel', 'nope']);
      const answered = await client.request(`${T}.req.client.${verb}`, enc.encode(ctlBody(r)), { timeout: 10_000 }).then(
        // A typed error, or the thread's task / new state when the junk happened to name one of its own threads.
        (m) => {
          const json = JSON.parse(dec.decode(m.data)) as { kind?: string };
          if (ErrorReplySchema.safeParse(json).success) counts.requestsTyped++;
          return json.kind === 'error' || json.kind === 'task' || json.kind === 'ok';
        },
        (err: unknown) => verb === 'nope' && /no responders/i.test(String(err)), // an unknown verb: the broker answers
      );
      if (answered) counts.requestsAnswered++;
    };
    const registry = () => {
      counts.registry++;
      triage.publish(`${T}.registry.triage`, enc.encode(registryBody(r, 'triage')));
    };
    const operatorNc = await open('operator');
    const unanswered: string[] = [];
    const ctl = async () => {
      counts.ctl++;
      // Listing verbs read the whole store: rare, as from an operator; the rest as often as junk can come.
      const verb = r() < 0.04 ? pick(r, ['threads', 'dlq']) : pick(r, ['ps', 'inspect', 'thread', 'rehydrate', 'cancel', 'memory', 'inspection']);
      const body = ctlBody(r);
      // Scatter-gather (inspect): only a node holding the actor answers, so a short window, as the CLI uses.
      const m = await operatorNc.request(`${T}.ctl.${verb}`, enc.encode(body), { timeout: verb === 'inspect' ? 1_000 : 60_000 }).catch(() => undefined);
      if (!m) {
        // A well-formed inspect of an actor no node holds gets no answer, by design.
        if (verb === 'inspect') counts.ctlInspectUnheld++;
        else unanswered.push(`${verb} ${body.slice(0, 200)}`);
        return;
      }
      const json = JSON.parse(dec.decode(m.data)) as unknown;
      if (ErrorReplySchema.safeParse(json).success) counts.ctlTyped++;
      else counts.ctlOther++; // ps, memory and inspection answer whatever the body (inspection: its state)
    };

    const phase = (what: string) => console.log(`[fuzz] ${what} at ${Math.round(performance.now() - started)} ms`);
    const work: Array<() => Promise<void> | void> = [
      ...Array.from({ length: N.inbound }, (_, i) => () => inbound(i)),
      ...Array.from({ length: N.requests }, () => request),
      ...Array.from({ length: N.registry }, () => registry),
      ...Array.from({ length: N.ctl }, () => ctl),
    ].sort(() => r() - 0.5);
    // 64 at a time, each worker taking the next input as soon as its last one is answered.
    let next = 0;
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        while (next < work.length) await work[next++]!();
      }),
    );
    phase('storm sent');

    // Every turn of the storm ends: nothing stays working.
    // A working thread is always live (only idle threads passivate), so ps sees every one.
    await waitUntil(
      async () => {
        const actors = (await operator.ps(500)).flatMap((p) => p.actors);
        return actors.some((a) => a.kind === 'node') && !actors.some((a) => a.kind === 'thread' && a.state.startsWith('working')) ? true : undefined;
      },
      'no thread left working',
      60_000,
    );
    phase('no thread working');
    // Every accepted message into a valid thread got its final event (an answer or a typed error).
    let finalCount = 0;
    // A loaded machine drains slowly; a lost message stops the count (no final event for 60 s) and fails the test.
    await waitWhileProgressing(
      () => [...expected].every(([id, n]) => (finals.get(id) ?? 0) >= n) || undefined,
      () => (finalCount = [...finals.values()].reduce((a, b) => a + b, 0)),
      'a final event for every accepted message',
      60_000,
    ).catch(async (err: unknown) => {
      const missing = [...expected].filter(([id, n]) => (finals.get(id) ?? 0) < n).slice(0, 5);
      const missed = [...expected].reduce((n, [id, want]) => n + Math.max(0, want - (finals.get(id) ?? 0)), 0);
      const jsmDiag = await jetstreamManager(await open('node'));
      const inState = (await jsmDiag.streams.info(INGRESS_STREAM)).state;
      const inbound = inState.messages;
      const stuck =
        inbound > 0
          ? await jsmDiag.streams
              .getMessage(INGRESS_STREAM, { seq: inState.first_seq })
              .then(
                (m) =>
                  m === null
                    ? 'gone'
                    : `${m.subject} ${JSON.stringify(Object.fromEntries([...(m.header?.keys() ?? [])].map((k) => [k, m.header?.get(k)])))} ${dec.decode(m.data).slice(0, 300)}`,
                (e: unknown) => String(e),
              )
              .catch((e: unknown) => `headers the client cannot read: ${String(e)}`)
          : '';
      const consumers: string[] = [];
      for await (const ci of jsmDiag.consumers.list(INGRESS_STREAM))
        consumers.push(`${ci.name}: pending ${ci.num_pending} ackPending ${ci.num_ack_pending} redelivered ${ci.num_redelivered} waiting ${ci.num_waiting}`);
      for (const [id] of missing) {
        const ids = acceptedIds.get(id) ?? [];
        const seen = [...answeredIds].filter((a) => a.startsWith(`${id}/`));
        const alt = headerIds.get(id) ?? [];
        const unanswered = ids.filter((m, k) => !seen.some((a) => a.startsWith(`${id}/${m}:`) || a.startsWith(`${id}/${alt[k]}:`)));
        console.log(
          `[fuzz] ${id}: accepted ${ids.length}, finals ${finals.get(id) ?? 0}; accepted ids without a final naming them: ${JSON.stringify(unanswered.slice(0, 20))}; finals not naming one: ${JSON.stringify(seen.filter((a) => a.includes('/?:')).slice(0, 10))}; repeated ids: ${ids.length - new Set(ids).size}`,
        );
      }
      console.log(`[fuzz] stuck in TROUPE_IN: ${stuck}\n[fuzz] consumers: ${consumers.join(' | ')}`);
      const records = await Promise.all(missing.map(([id]) => operator.ctl('thread', { threadId: id }).catch((e: unknown) => String(e))));
      throw new Error(
        `${(err as Error).message}: ${missed} accepted messages got no final event (${finalCount} final events; observer disconnects ${observerDisconnects}, TROUPE_IN holds ${inbound}); without one: ${JSON.stringify(missing)} — ${JSON.stringify(records).slice(0, 1_500)}\nnode log (errors):\n${node.stderr.slice(-4_000)}`,
        { cause: err },
      );
    });
    storming = false;
    await controlLoop;
    clearInterval(announcer);

    const jsm = await jetstreamManager(await open('node'));
    // Every message ever stored there (the stream keeps the newest within its size limit).
    const deadLettered = (await jsm.streams.info(DEAD_LETTER_STREAM)).state.last_seq;
    // Idle threads passivate (--idle 2000); then what the node holds, after a full collection.
    const after = await waitUntil(
      async () => {
        const s = await nodeStats();
        return s.liveThreads <= 1 ? s : undefined;
      },
      'idle threads to passivate',
      30_000,
    );
    expect(after.collected).toBe(true);
    const total = N.inbound + N.requests + N.registry + N.ctl + counts.agentReplies + counts.chunks;
    console.log(
      `[fuzz] seed ${SEED}: ${total} hostile inputs — ${JSON.stringify(counts)}; accepted into valid threads ${[...expected.values()].reduce((a, b) => a + b, 0)}, ` +
        `stored with invalid ids ${invalidStored}, dead-lettered ${deadLettered}; control conversation ${control.ok} turns ok, ${control.failed.length} failed; re-sent messageIds ${reusedIds} (final events beyond one per accepted message: ${[...finals.values()].reduce((a, b) => a + b, 0) - [...expected.values()].reduce((a, b) => a + b, 0)}); every accepted message got its final event (observer disconnects ${observerDisconnects}); ` +
        `node heap ${Math.round(baseline.heapUsedBytes / 1e6)} MB before, ${Math.round(after.heapUsedBytes / 1e6)} MB after (rss ${Math.round(baseline.rssBytes / 1e6)} → ${Math.round(after.rssBytes / 1e6)} MB)`,
    );

    expect(node.running, `the node exited:\n${node.stderr.slice(-3_000)}`).toBe(true);
    expect(control.failed).toEqual([]);
    expect(control.ok).toBeGreaterThan(0);
    expect(total).toBeGreaterThanOrEqual(10_000);
    // Messages whose thread id is not valid never reach a thread: the node dead-letters them.
    expect(deadLettered).toBeGreaterThanOrEqual(invalidStored);
    expect(counts.requestsAnswered).toBe(counts.requests);
    // Raw header blocks the client library could not read were sent (and those accepted are answered above).
    expect(counts.rawHeaderBlocks).toBeGreaterThan(0);
    expect(unanswered).toEqual([]);
    expect(counts.ctlTyped + counts.ctlOther + counts.ctlInspectUnheld).toBe(counts.ctl);
    // The registry kept its caps: the liar is one agent, with a bounded number of instances.
    const ps = (await operator.ps(300)).find((p) => p.actors.some((a) => a.kind === 'registry'));
    const reg = ps?.actors.find((a) => a.kind === 'registry')?.detail as { agents: string[]; refused: number };
    expect(reg.agents.every((a) => /^(echo|triage)×\d+$/.test(a))).toBe(true);
    expect(Number(reg.agents.find((a) => a.startsWith('triage'))?.split('×')[1] ?? 0)).toBeLessThanOrEqual(LIMITS.instancesPerAgent);
    expect(reg.refused).toBeGreaterThan(0);
    // The heap came back down after the storm (passivated threads hold nothing).
    expect(after.heapUsedBytes).toBeLessThan(baseline.heapUsedBytes + 64 * 1024 * 1024);
  }, 600_000);
});
