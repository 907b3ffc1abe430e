/**
 * An agent.yaml `name` is the agent's id on the mesh, as written: seed 002 allows 1–100 characters, so
 * the one id rule (protocol/ids.ts) allows 100. Here an agent named with exactly 100 characters runs as
 * its own `troupe agent` process over a real nats-server, with credentials of an agent user of that
 * name (its subjects, registry entry and permissions all carry the full id), and `troupe send --to`
 * reaches it. 101 characters are refused where the id enters.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { validateAgentFile } from '../src/config/agent.js';
import { idProblem } from '../src/protocol/ids.js';
import { TroupeClient } from '../src/sdk/client.js';
import { NatsTransport } from '../src/transport/nats.js';
import { OpenAIScriptedServer } from './helpers/model-servers.js';
import { startNatsServer, type NatsServerHandle } from './helpers/nats-server.js';
import { ProcessGroup, runTroupe } from './helpers/processes.js';
import { waitUntil } from './helpers/wait.js';

const LONG = `Agent-${'x'.repeat(90)}-end`;

describe('an agent named with 100 characters', () => {
  let nats: NatsServerHandle;
  const model = new OpenAIScriptedServer();
  const procs = new ProcessGroup();
  const dir = mkdtempSync(join(tmpdir(), 'troupe-long-name-'));
  let transport: NatsTransport;

  beforeAll(async () => {
    expect(LONG).toHaveLength(100);
    nats = await startNatsServer();
    await model.start();
    model.respondWith(() => ({ text: 'Hello from the long-named agent.' }));
    await nats.addUser({ tenant: 'demo', role: 'agent', name: LONG });
    writeFileSync(join(dir, 'agent.yaml'), `name: ${LONG}\nmodel: {provider: openai, name: m, base_url: "${model.baseURL}"}\ninstructions: {inline: Greet.}\n`);
    await procs.spawnTroupe(['up', '--nats', nats.url], nats.env, { name: 'node' });
    await procs.spawnTroupe(['agent', join(dir, 'agent.yaml'), '--nats', nats.url, '--creds', nats.credsFile(LONG)], nats.env, { name: 'long agent' });
    transport = await NatsTransport.connect({ ...nats.asNode, name: 'long-name-test' });
  });

  afterAll(async () => {
    await transport?.close().catch(() => undefined);
    await procs.stopAll();
    await model.stop();
    await nats?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('joins under its full name with its own credentials and answers troupe send --to', async () => {
    const client = new TroupeClient(transport, 'demo');
    await waitUntil(
      async () => {
        const reg = (await client.ps(300)).flatMap((r) => r.actors).find((a) => a.kind === 'registry');
        return ((reg?.detail?.agents as string[] | undefined) ?? []).some((a) => a.split('×')[0] === LONG);
      },
      'the registry to list the long-named agent',
      20_000,
    );
    const res = await runTroupe(['send', 'Hello', '--to', LONG, '--nats', nats.url, '--json'], nats.env, { timeoutMs: 30_000 });
    expect(res.code, res.stderr).toBe(0);
    expect(JSON.stringify(JSON.parse(res.stdout))).toContain('Hello from the long-named agent.');
    expect(model.requests).toHaveLength(1);
  });

  it('refuses 101 characters, in the agent.yaml and as an id', () => {
    writeFileSync(join(dir, 'long.yaml'), `name: ${LONG}x\nmodel: {provider: openai, name: m}\ninstructions: {inline: Greet.}\n`);
    expect(validateAgentFile(join(dir, 'long.yaml')).problems.map((p) => p.message)).toEqual(['must be at most 100 characters (it has 101)']);
    expect(idProblem('agent', `${LONG}x`)).toBe('agent id is 101 characters long; the limit is 100');
  });
});
