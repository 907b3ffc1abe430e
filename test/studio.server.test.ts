/**
 * The studio server over real HTTP, without a mesh (a replay): the page and its bundled assets, the
 * inspection stream as server-sent events (every known actor first, definitions before snapshots), and
 * the refusals that keep other web pages from driving it through a browser.
 */
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { InspectionRecord } from '../src/protocol/inspection.js';
import { startStudio, type Studio } from '../src/studio/server.js';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { startGateway } from '../src/gateway/index.js';
import demoTeam from '../src/bin/demo/team.js';
import { waitUntil } from './helpers/wait.js';

let studio: Studio;

const base = { v: 1 as const, process: 'node-1', rootId: 't-1', threadId: 't-1', at: new Date(0).toISOString(), status: 'active' as const };
const actor: InspectionRecord = {
  ...base,
  kind: 'actor',
  seq: 1,
  actorId: 't-1',
  machineId: 'thread',
  value: 'submitted',
  definition: { id: 'thread', initial: 'submitted', states: { submitted: {}, working: {} } },
};
const step: InspectionRecord = {
  ...base,
  kind: 'snapshot',
  seq: 2,
  actorId: 't-1',
  machineId: 'thread',
  value: 'working',
  from: 'submitted',
  event: { type: 'troupe.user.message' },
};
const orphan: InspectionRecord = { ...base, kind: 'snapshot', seq: 3, actorId: 't-1/router', machineId: 'router', value: 'decided', event: { type: 'x' } };

/** A raw request, so the Host and Origin headers are ours to set. */
function call(path: string, opts: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<{ status: number; body: string }> {
  const url = new URL(path, studio.url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: url.port, path: url.pathname, method: opts.method ?? 'GET', headers: { host: url.host, ...opts.headers } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

beforeAll(async () => {
  studio = await startStudio({ mode: 'replay', tenant: 'demo', port: 0 });
  studio.push(actor);
  studio.push(step);
  studio.push(orphan);
});
afterAll(() => studio.close());

describe('studio server', () => {
  it('serves the page and the app bundled from npm packages (no CDN)', async () => {
    const page = await call('/');
    expect(page.status).toBe(200);
    expect(page.body).toContain('/assets/app.js');
    expect(page.body).not.toMatch(/https?:\/\//);
    const js = await call('/assets/app.js');
    expect(js.status).toBe(200);
    expect(js.body.length).toBeGreaterThan(100_000);
    expect(js.body).not.toMatch(/https:\/\/(unpkg|cdn\.jsdelivr|esm\.sh)/);
    expect((await call('/api/info')).body).toBe(JSON.stringify({ mode: 'replay', tenant: 'demo', chat: false, mesh: false, inspection: [] }));
  });

  it('streams what it knows first (definition, then latest state) and drops snapshots of actors it never saw defined', async () => {
    const res = await fetch(`${studio.url}/api/stream`);
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    await waitUntil(async () => {
      const { value } = await reader.read();
      text += value ?? '';
      return text.includes('event: ready');
    }, 'the replayed records');
    await reader.cancel();
    const records = [...text.matchAll(/event: record\ndata: (.*)\n/g)].map((m) => JSON.parse(m[1]!) as InspectionRecord);
    expect(records.map((r) => `${r.kind}:${r.actorId}`)).toEqual(['actor:t-1', 'snapshot:t-1']);
  });

  it('refuses requests another web page could make through a browser', async () => {
    expect((await call('/', { headers: { host: 'evil.example:80' } })).status).toBe(403);
    expect((await call('/api/info', { headers: { origin: 'http://evil.example' } })).status).toBe(403);
    const form = await call('/a2a', {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: '{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}',
    });
    expect(form.status).toBe(403);
    // Same origin and JSON: it gets as far as saying there is no gateway to talk to.
    const json = await call('/a2a', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(json.status).toBe(409);
    expect(JSON.parse(json.body).error).toContain('--gateway');
    expect((await call('/api/inspection', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"on":true}' })).status).toBe(409);
  });

  it("chats through a gateway that asks for a token with the one it was given (--gateway-token); without it the gateway's 401 comes back", async () => {
    const mesh = await startEmbedded(demoTeam, silentLogger());
    const gateway = await startGateway({ clients: { demo: mesh.client }, tokens: { 'studio-user-token-0123': { tenant: 'demo', user: 'ada' } } });
    const withToken = await startStudio({ mode: 'replay', tenant: 'demo', port: 0, gatewayUrl: gateway.url, gatewayToken: 'studio-user-token-0123' });
    const without = await startStudio({ mode: 'replay', tenant: 'demo', port: 0, gatewayUrl: gateway.url });
    try {
      const send = JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'message/send',
        params: { message: { kind: 'message', role: 'user', messageId: 'm-studio-1', parts: [{ kind: 'text', text: 'Will it be sunny in Rome?' }] } },
      });
      const post = (to: Studio) => {
        const url = new URL('/a2a', to.url);
        return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', origin: url.origin }, body: send });
      };
      const ok = await post(withToken);
      expect(ok.status).toBe(200);
      expect(JSON.stringify(await ok.json())).toMatch(/sunny/i);
      expect((await post(without)).status).toBe(401);
    } finally {
      await Promise.all([withToken.close(), without.close()]);
      await gateway.close();
      await mesh.stop();
    }
  });
});
