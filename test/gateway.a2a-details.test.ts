/**
 * A2A details of the gateway found from outside (issue 45): a mesh card without skills still says
 * `skills: []` in its v1.0 JSON (A2A 1.0 requires the field; the TCK's CARD-STRUCT-001 reads it), with
 * `--card-version 1.0` and with the header; ListTasks refuses `historyLength: -1` as GetTask does, over
 * JSON-RPC and REST; a partial ListTasks (fields given empty) is answered the same over both.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import demoTeam from '../src/bin/demo/team.js';
import { startGateway, type Gateway } from '../src/gateway/index.js';
import { rpc } from './helpers/a2a.js';

type Mesh = Awaited<ReturnType<typeof startEmbedded>>;

let mesh: Mesh;
/** As `troupe gateway --nats … --card-version 1.0` makes it: no skills (a client user may not read the registry). */
let gateway: Gateway;

beforeAll(async () => {
  mesh = await startEmbedded(demoTeam, silentLogger());
  gateway = await startGateway({ clients: { demo: mesh.client }, cardVersionWithoutHeader: '1.0' });
});

afterAll(async () => {
  await gateway?.close();
  await mesh?.stop();
});

describe('the v1.0 card of a mesh without skills', () => {
  it('says skills: [] without the header (--card-version 1.0) and with A2A-Version: 1.0', async () => {
    const variants: Array<Record<string, string>> = [{}, { 'a2a-version': '1.0' }];
    for (const headers of variants) {
      const card = (await (await fetch(`${gateway.url}/.well-known/agent-card.json`, { headers })).json()) as {
        skills?: unknown;
        supportedInterfaces?: unknown;
      };
      expect(card.supportedInterfaces).toBeDefined();
      expect(card.skills).toEqual([]);
    }
  });
});

describe('historyLength: -1', () => {
  it('is refused by ListTasks as by GetTask (-32602), over JSON-RPC', async () => {
    const list = await rpc(gateway.url, 'ListTasks', { historyLength: -1 }, { version: '1.0' });
    expect(list.body.error?.code).toBe(-32602);
    expect(list.body.error?.message).toContain('historyLength');
    const get = await rpc(gateway.url, 'GetTask', { id: 'c-nothing', historyLength: -1 }, { version: '1.0' });
    expect(get.body.error?.code).toBe(-32602);
    const fine = await rpc(gateway.url, 'ListTasks', { historyLength: 0 }, { version: '1.0' });
    expect(fine.body.error).toBeUndefined();
  });

  it('is refused by ListTasks over REST (400)', async () => {
    const res = await fetch(`${gateway.url}/rest/tasks?historyLength=-1`, { headers: { 'a2a-version': '1.0' } });
    expect(res.status).toBe(400);
    const ok = await fetch(`${gateway.url}/rest/tasks?historyLength=1`, { headers: { 'a2a-version': '1.0' } });
    expect(ok.status).toBe(200);
  });
});

describe('a partial ListTasks request', () => {
  it('is answered over JSON-RPC as over REST (empty fields are absent); an unknown status is refused by both the same way', async () => {
    await mesh.client.send('hello there');
    const partial = await rpc(gateway.url, 'ListTasks', { contextId: '', status: '', pageSize: '', pageToken: '', historyLength: '' }, { version: '1.0' });
    expect(partial.body.error).toBeUndefined();
    const rest = await fetch(`${gateway.url}/rest/tasks?contextId=&status=&pageSize=&pageToken=&historyLength=`, { headers: { 'a2a-version': '1.0' } });
    expect(rest.status).toBe(200);
    const restBody = (await rest.json()) as { tasks: Array<{ id: string }>; pageSize: number; totalSize: number };
    const rpcBody = partial.body.result as { tasks: Array<{ id: string }>; pageSize: number; totalSize: number };
    expect(rpcBody.totalSize).toBeGreaterThanOrEqual(1);
    expect({ ids: rpcBody.tasks.map((t) => t.id), pageSize: rpcBody.pageSize, totalSize: rpcBody.totalSize }).toEqual({
      ids: restBody.tasks.map((t) => t.id),
      pageSize: restBody.pageSize,
      totalSize: restBody.totalSize,
    });

    const badRpc = await rpc(gateway.url, 'ListTasks', { status: 'sleeping' }, { version: '1.0' });
    const badRest = await fetch(`${gateway.url}/rest/tasks?status=sleeping`, { headers: { 'a2a-version': '1.0' } });
    expect(badRpc.body.error?.code).toBe(-32602);
    expect(badRest.status).toBe(400);
    expect(((await badRest.json()) as { error: { message: string } }).error.message).toBe(badRpc.body.error?.message);
  });
});
