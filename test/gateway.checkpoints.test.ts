/**
 * The gateway's checkpoint extension (`/troupe/tasks/{id}/checkpoints`): a user reads, diffs and forks the
 * checkpoints of their own task; another user's request is answered as for a task that does not exist.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import demoTeam from '../src/bin/demo/team.js';
import { startGateway, type Gateway } from '../src/gateway/index.js';
import { waitUntil } from './helpers/wait.js';

const ALICE = 'alice-token-0123456789';
const BOB = 'bob-token-0123456789abc';
let mesh: Awaited<ReturnType<typeof startEmbedded>>;
let gateway: Gateway;

const get = async (path: string, token?: string, method = 'GET') => {
  const res = await fetch(`${gateway.url}${path}`, { method, headers: token ? { authorization: `Bearer ${token}` } : {} });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
};

beforeAll(async () => {
  mesh = await startEmbedded(demoTeam, silentLogger());
  gateway = await startGateway({
    clients: { demo: mesh.client },
    tokens: { [ALICE]: { tenant: 'demo', user: 'alice' }, [BOB]: { tenant: 'demo', user: 'bob' } },
  });
});
afterAll(async () => {
  await gateway?.close();
  await mesh?.stop();
});

describe("gateway: a task's checkpoints for its owner", () => {
  it('lists, reads, diffs and forks them for the owner; for anyone else the task does not exist', async () => {
    const { threadId } = await mesh.client.send('Is the sea cold?', { user: 'alice' });
    await mesh.client.send('Write a poem', { threadId, user: 'alice' });
    const base = `/troupe/tasks/${threadId}/checkpoints`;
    const listed = await waitUntil(async () => {
      const r = await get(base, ALICE);
      return (r.body.checkpoints as unknown[] | undefined)?.length === 2 ? r : undefined;
    }, 'two checkpoints');
    expect(listed.status).toBe(200);
    expect(listed.body).toMatchObject({ kind: 'history', threadId, keep: 50 });

    const one = await get(`${base}/1`, ALICE);
    expect(one.status).toBe(200);
    expect((one.body.checkpoint as { history: unknown[] }).history).toHaveLength(4);

    const diff = await get(`${base}/1..2`, ALICE);
    expect(diff.status).toBe(200);
    expect((diff.body.added as Array<{ text: string }>)[0]?.text).toBe('Write a poem');

    const forked = await get(`${base}/1/fork`, ALICE, 'POST');
    expect(forked.status).toBe(200);
    expect(forked.body).toMatchObject({ kind: 'fork', forkedFrom: { threadId, checkpoint: 1 } });
    expect((await mesh.client.task(String(forked.body.threadId), { user: 'alice' })).history).toHaveLength(4);

    for (const [path, method] of [
      [base, 'GET'],
      [`${base}/1`, 'GET'],
      [`${base}/1/fork`, 'POST'],
    ] as const) {
      const theirs = await get(path, BOB, method);
      expect(theirs.status).toBe(404);
      expect(theirs.body).toEqual({ error: { code: 'THREAD_NOT_FOUND', message: `Task not found: ${threadId}`, hint: expect.any(String) as unknown } });
    }
    expect((await get(`${base}/9`, ALICE)).body).toMatchObject({ error: { code: 'CHECKPOINT_NOT_FOUND' } });
    expect((await get(`${base}/zero`, ALICE)).status).toBe(400);
    expect((await fetch(`${gateway.url}${base}`)).status).toBe(401);
  });
});
