/**
 * A takeover consumes its partitions at once. The threads that go on without a message (an open handoff
 * and its deadline, an answer committed but not yet published) are found by listing the store, beside the
 * consumption, not before it: that listing reads the tenant's keys and the taken partitions' records, and
 * with many stored threads it takes seconds (20,000 records: 6.7 s on a loaded 2-core machine). A node
 * that listed first held every message of the partitions it took for as long; a chaos run on a busy
 * cluster measured 3 s median and 14 s at the 90th percentile from lease to consumption.
 *
 * Real `troupe up` processes on a real nats-server; the agent and the client in this process.
 */
import { Kvm } from '@nats-io/kv';
import { describe, expect, it } from 'vitest';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { partitionOf } from '../src/transport/jetstream/ingress.js';
import { natsSuite } from './helpers/nats-suite.js';
import { spawnTroupe, type ManagedProcess } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const LEASE_TTL_MS = 1_500;
const PARTITIONS = 8;
/** Threads stored before the takeover: enough that listing them takes far longer than a turn. */
const STORED = 10_000;

const suite = natsSuite();

function startNode(name: string): Promise<ManagedProcess> {
  return spawnTroupe(
    [
      'up',
      '--nats',
      suite.nats.url,
      '--team',
      'test/fixtures/durable-team.ts',
      '--no-agents',
      '--lease-ttl',
      String(LEASE_TTL_MS),
      '--partitions',
      String(PARTITIONS),
    ],
    { ...suite.nats.env, TROUPE_LOG_LEVEL: 'info' },
    { name },
    suite.group,
  );
}

interface ResumePass {
  partitions: number[];
  listed: number;
  resumed: number;
  ms: number;
  time: number;
}

/** The resume passes a node has logged so far (JSON log lines on stderr). */
function passes(node: ManagedProcess): ResumePass[] {
  return node.stderr
    .split('\n')
    .filter((l) => l.includes('"resume pass done"'))
    .map((l) => JSON.parse(l) as ResumePass);
}

describe('a takeover does not wait for the threads to resume', () => {
  it(`the next owner consumes a taken partition before its pass over ${STORED.toLocaleString('en')} stored threads ends, answers the message waiting there, and the pass still ends`, async () => {
    const agentT = await suite.connect('agent');
    const echo = defineAgent({
      card: { id: 'slowecho', name: 'Echo', description: 'Echoes' },
      handle: (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }),
    });
    const host = await new AgentHost({ transport: agentT, agent: echo, heartbeatMs: 500 }).start();
    const clientT = await suite.connect('client');
    const client = new TroupeClient(clientT);
    const threadId = 'taken-1';
    const p = partitionOf(threadId, PARTITIONS);

    const nodeA = await startNode('node A');
    expect((await client.send('first', { threadId, timeoutMs: 15_000 })).text).toBe('echo: first');

    // Threads from before, finished long ago: nothing to resume, but the pass has to look at each.
    const kv = await new Kvm(clientT.connection).open('troupe_threads');
    const at = new Date().toISOString();
    for (let i = 0; i < STORED; i += 500) {
      await Promise.all(
        Array.from({ length: Math.min(500, STORED - i) }, (_, k) => {
          const id = `stored-${i + k}`;
          const record = {
            version: 1,
            tenant: 'demo',
            threadId: id,
            task: { kind: 'task', id, contextId: id, status: { state: 'completed', timestamp: at }, history: [] },
            snapshot: {},
            updatedAt: at,
          };
          return kv.put(`demo.${id}`, JSON.stringify(record));
        }),
      );
    }

    await nodeA.kill('SIGKILL');
    // Waits in the stream for the partition's next owner.
    const answer = client.send('second', { threadId, timeoutMs: 60_000 });
    const nodeB = await startNode('node B');
    expect((await answer).text).toBe('echo: second');

    // The pass goes on beside the consumption and ends, having looked at every stored thread of its
    // partitions. (On a starved machine node B may lose its 1.5 s leases for a moment: a pass cut short by
    // that lists nothing and the next one, after the leases are back, does the work.)
    const inTaken = (partitions: number[]) =>
      Array.from({ length: STORED }, (_, i) => `stored-${i}`).filter((id) => partitions.includes(partitionOf(id, PARTITIONS))).length;
    const pass = await waitUntil(
      () => passes(nodeB).find((x) => x.partitions.includes(p) && x.listed >= inTaken(x.partitions)),
      'a resume pass of the taken partitions that lists every stored thread of them',
      60_000,
    );
    expect(pass.resumed).toBe(0);
    // Node B's own log, in its order: it consumed the taken partition before that pass over the stored
    // threads ended (a node that listed first logs the pass first). The order of one process's lines, not
    // how fast anything ran: the answer itself may come after the pass on a busy machine.
    const lines = nodeB.stderr.split('\n');
    const passAt = lines.findIndex(
      (l) => l.includes('"resume pass done"') && (JSON.parse(l) as ResumePass).time === pass.time && (JSON.parse(l) as ResumePass).partitions.includes(p),
    );
    const consumedAt = lines.findLastIndex(
      (l, i) => i < passAt && l.includes('"consuming partition"') && (JSON.parse(l) as { partition?: number }).partition === p,
    );
    // Since node B last held the partition: a pass cut short stopped its consumption, and the next began again.
    const stoppedAt = lines.findLastIndex(
      (l, i) => i < passAt && l.includes('"stopped consuming partition"') && (JSON.parse(l) as { partition?: number }).partition === p,
    );
    expect(passAt, "the pass is in node B's log").toBeGreaterThanOrEqual(0);
    expect(consumedAt, 'node B consumed the taken partition before that pass ended').toBeGreaterThan(stoppedAt);
    console.log(
      `[takeover] partition ${p} consumed before the resume pass of partitions ${pass.partitions.join(',')} ended (${pass.listed} threads listed in ${pass.ms} ms)`,
    );
    await nodeB.kill('SIGTERM');
    await host.stop();
  }, 120_000);
});
