/**
 * Checkpoints in the embedded mesh (memory stores): a team that turns them off keeps none and says so; a
 * checkpoint where the task had ended forks into an open thread with its conversation; a diff names the
 * messages pruned at the history limit; and what a checkpoint costs in bytes next to its record.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TroupeNode } from '../src/actors/node.js';
import { AgentHost } from '../src/actors/agent-host.js';
import { defineAgent, reply } from '../src/sdk/agent.js';
import { TroupeClient } from '../src/sdk/client.js';
import { diffCheckpoints } from '../src/sdk/history.js';
import { MemoryBus, MemoryTransport } from '../src/transport/memory.js';
import { MemoryCheckpointStore, encodeCheckpoint } from '../src/store/checkpoints.js';
import { encodeRecord } from '../src/store/codec.js';
import { waitUntil } from './helpers/wait.js';

const stops: Array<() => Promise<void>> = [];

async function mesh(config: Record<string, unknown>, checkpoints?: MemoryCheckpointStore): Promise<{ client: TroupeClient; node: TroupeNode }> {
  const bus = new MemoryBus();
  const node = await new TroupeNode({
    transport: new MemoryTransport({ bus }),
    config: { entryAgent: 'echo', ...config },
    ...(checkpoints ? { checkpoints } : {}),
  }).start();
  const echo = defineAgent({
    card: { id: 'echo', name: 'Echo', description: 'Echoes' },
    handle: async (_m, ctx) => reply(`echo: ${ctx.text}`, { to: 'user' }),
  });
  const host = await new AgentHost({ transport: new MemoryTransport({ bus }), agent: echo }).start();
  await node.registry.waitFor(['echo']);
  stops.push(async () => {
    await host.stop();
    await node.stop();
  });
  return { client: new TroupeClient(new MemoryTransport({ bus })), node };
}

afterAll(async () => {
  for (const stop of stops) await stop();
});

describe('checkpoints (embedded)', () => {
  let on: Awaited<ReturnType<typeof mesh>>;
  beforeAll(async () => {
    on = await mesh({ historyLimit: 4 });
  });

  it('turned off (checkpoints: 0): none kept, the listing says so, a checkpoint is not found', async () => {
    const off = await mesh({ checkpoints: 0 }, new MemoryCheckpointStore({ keep: 0 }));
    const { threadId } = await off.client.send('hello');
    expect(await off.client.checkpoints('history', { threadId })).toEqual({ kind: 'history', threadId, keep: 0, checkpoints: [] });
    await expect(off.client.checkpoints('checkpoint', { threadId, n: 1 })).rejects.toMatchObject({ code: 'CHECKPOINT_NOT_FOUND' });
    await expect(off.client.checkpoints('history', { threadId: 'never-was' })).rejects.toMatchObject({ code: 'THREAD_NOT_FOUND' });
  });

  it('a checkpoint where the task had ended forks into an open thread that starts with its conversation', async () => {
    const { threadId } = await on.client.send('before the end');
    await on.client.cancel(threadId, 'done here');
    const listed = await waitUntil(async () => {
      const h = await on.client.checkpoints('history', { threadId });
      return h.checkpoints.length === 2 ? h.checkpoints : undefined;
    }, 'the canceled checkpoint');
    expect(listed.map((c) => c.state)).toEqual(['input-required', 'canceled']);
    const forked = await on.client.checkpoints('fork', { threadId, n: 2 });
    expect(forked.state).toBe('submitted');
    expect((await on.client.send('after the end', { threadId: forked.threadId })).text).toBe('echo: after the end');
    const task = await on.client.task(forked.threadId);
    expect(task.status.state).toBe('input-required');
    expect(task.history?.map((m) => (m.parts[0]?.kind === 'text' ? m.parts[0].text : ''))).toEqual([
      'before the end',
      'echo: before the end',
      'after the end',
      'echo: after the end',
    ]);
  });

  it('a diff names the messages pruned at the history limit (4) as removed, the new ones as added', async () => {
    const { threadId } = await on.client.send('one');
    await on.client.send('two', { threadId });
    await on.client.send('three', { threadId });
    await waitUntil(async () => ((await on.client.checkpoints('history', { threadId })).checkpoints.length === 3 ? true : undefined), 'three checkpoints');
    const [a, b] = await Promise.all([2, 3].map(async (n) => (await on.client.checkpoints('checkpoint', { threadId, n })).checkpoint));
    const diff = diffCheckpoints(a!, b!);
    expect(diff.removed.map((m) => m.text)).toEqual(['one', 'echo: one']);
    expect(diff.added.map((m) => m.text)).toEqual(['three', 'echo: three']);
    expect(diff.state).toBeUndefined();
    expect(diff.context).toContainEqual({ field: 'turns', from: 2, to: 3 });
  });

  it('a checkpoint is its record plus a little: the turn, and no catalog of agents', async () => {
    const { threadId } = await on.client.send('how big is a checkpoint?');
    const stored = await waitUntil(async () => (await on.node.threads.history(threadId)).checkpoints[0], 'the checkpoint');
    const checkpointBytes = encodeCheckpoint(stored).byteLength;
    const recordBytes = encodeRecord(stored.record).data.byteLength;
    expect(checkpointBytes).toBeGreaterThan(recordBytes);
    expect(checkpointBytes - recordBytes).toBeLessThan(1024);
  });
});
