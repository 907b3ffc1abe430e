/**
 * Seed 003's orchestrator API against the gateway, with the seed's own example payloads (verbatim, from
 * /work/shared/seeds/003_*.txt): `POST /a2a/<orchestrator-id>` answering in the seed's form, `message.kind`
 * checked, `role: "assistant"` accepted on a follow-up, the snake_case result keys; and the A2A form at `/`
 * unchanged by it.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadTeamConfig, threadConfigOf } from '../src/config/team.js';
import { defineAgent, reply } from '../src/sdk/index.js';
import { defineTeam } from '../src/team/team.js';
import { startEmbedded } from '../src/team/embedded.js';
import { silentLogger } from '../src/observability/logger.js';
import { startGateway, type Gateway } from '../src/gateway/index.js';
import type { RouterDecision } from '../src/protocol/index.js';
import type { RouterPolicy } from '../src/routing/policy.js';
import { SEED_003_REQUEST as SEED_REQUEST } from './fixtures/seed-003.js';

type Mesh = Awaited<ReturnType<typeof startEmbedded>>;

/** The seed's light and music agents; every message fans out to both (the seed's `agents_used`). */
const lights = defineAgent({
  card: { id: 'light-agent', name: 'Lights', description: 'Turns lights on and off' },
  handle: () => reply("I've turned on the kitchen lights.", { to: 'user' }),
});
const music = defineAgent({
  card: { id: 'music-agent', name: 'Music', description: 'Plays music' },
  handle: (_m, ctx) => reply(ctx.text.includes('jazz') ? 'Started playing jazz music.' : 'Playing.', { to: 'user' }),
});
const both: RouterPolicy = {
  name: 'both',
  decide: async (): Promise<RouterDecision> => ({ agentId: 'light-agent', confidence: 0.95, reasoning: 'lights and music', additionalAgents: ['music-agent'] }),
};
const homeTeam = defineTeam({ name: 'home', agents: [lights, music], policy: both, config: { entryAgent: 'light-agent', retries: 0 } });

let mesh: Mesh;
let gateway: Gateway;

beforeAll(async () => {
  mesh = await startEmbedded(homeTeam, silentLogger());
  gateway = await startGateway({ clients: { demo: mesh.client }, orchestratorPath: '/a2a/lucia-orchestrator' });
});

afterAll(async () => {
  await gateway?.close();
  await mesh?.stop();
});

/** A fresh copy of the seed's request, with its ids made unique for this test (same shape). */
function seedRequest(edit: (message: Record<string, unknown>) => void = () => undefined): Record<string, unknown> {
  const body = structuredClone(SEED_REQUEST) as { params: { message: Record<string, unknown> } } & Record<string, unknown>;
  body.params.message.messageId = crypto.randomUUID();
  body.params.message.contextId = crypto.randomUUID();
  edit(body.params.message);
  return body;
}

/** The answer's shape as the seed writes it (and the A2A Task's, for the comparison at `/`). */
interface SeedResult {
  kind: string;
  role: string;
  parts: Array<{ kind: string; text: string }>;
  messageId: string;
  contextId: string;
  taskId?: string | null;
  metadata: Record<string, unknown>;
  status: { message: SeedResult };
}
interface RpcBody {
  jsonrpc: string;
  id: unknown;
  result: SeedResult;
  error: { code: number; message: string };
}

async function post(path: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: RpcBody }> {
  const res = await fetch(`${gateway.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as RpcBody };
}

describe('seed 003: POST /a2a/<orchestrator-id>', () => {
  it('answers the seed example verbatim in the seed form: a message from the assistant with agents_used, execution_time_ms, task_state', async () => {
    const { status, body } = await post('/a2a/lucia-orchestrator', SEED_REQUEST);
    expect(status).toBe(200);
    expect(body.error).toBeUndefined();
    expect(body.jsonrpc).toBe('2.0');
    expect(body.id).toBe(1);
    const result = body.result;
    expect(result.kind).toBe('message');
    expect(result.role).toBe('assistant');
    expect(result.parts[0]!.kind).toBe('text');
    expect(result.parts[0]!.text).toContain('kitchen lights');
    expect(result.parts[0]!.text).toContain('jazz');
    expect(typeof result.messageId).toBe('string');
    expect(result.contextId).toBe('550e8400-e29b-41d4-a716-446655440001');
    expect(result.metadata.agents_used).toEqual(['light-agent', 'music-agent']);
    expect(Number.isInteger(result.metadata.execution_time_ms)).toBe(true);
    expect(['fresh', 'resumed', 'completed']).toContain(result.metadata.task_state);
    // Each fan-out agent's AgentResponse (seed 003: agentId, content, success, executionTimeMs).
    expect(result.metadata.results).toEqual([
      {
        agentId: 'light-agent',
        success: true,
        content: "I've turned on the kitchen lights.",
        latencyMs: expect.any(Number),
        executionTimeMs: expect.any(Number),
      },
      { agentId: 'music-agent', success: true, content: 'Started playing jazz music.', latencyMs: expect.any(Number), executionTimeMs: expect.any(Number) },
    ]);
    // The camelCase keys stay next to them.
    expect(result.metadata.agentsUsed).toEqual(result.metadata.agents_used);
    expect(result.metadata.executionTimeMs).toBe(result.metadata.execution_time_ms);
    expect(result.metadata.taskState).toBe(result.metadata.task_state);
  });

  it('takes role "assistant" on a follow-up as the caller\'s message, and says the context is resumed', async () => {
    const first = await post('/a2a/lucia-orchestrator', seedRequest());
    const contextId = first.body.result.contextId;
    const followUp = seedRequest((m) => {
      m.role = 'assistant';
      m.contextId = contextId;
    });
    const { body } = await post('/a2a/lucia-orchestrator', followUp);
    expect(body.error).toBeUndefined();
    expect(body.result.kind).toBe('message');
    expect(body.result.contextId).toBe(contextId);
    expect(body.result.metadata.task_state).toBe('resumed');
    const task = await mesh.client.task(body.result.taskId as string);
    const sentId = (followUp.params as { message: { messageId: string } }).message.messageId;
    const asked = task.history?.find((m) => m.messageId === sentId);
    expect(asked?.role).toBe('user');
    expect(asked?.metadata?.['troupe/callerRole']).toBe('assistant');
  });

  it('refuses a message whose kind is not "message" with -32602, on both paths', async () => {
    for (const path of ['/a2a/lucia-orchestrator', '/']) {
      const { status, body } = await post(
        path,
        seedRequest((m) => (m.kind = 'task')),
      );
      expect(status).toBe(200);
      expect(body.error.code).toBe(-32602);
      expect(body.error.message).toContain('message.kind must be "message"');
      expect(body.id).toBe(1);
    }
  });

  it('serves the A2A form at / for the same request: the Task, role agent, camelCase keys only', async () => {
    const { body } = await post('/', seedRequest());
    expect(body.error).toBeUndefined();
    expect(body.result.kind).toBe('task');
    const message = body.result.status.message;
    expect(message.role).toBe('agent');
    expect(message.metadata.agentsUsed).toEqual(['light-agent', 'music-agent']);
    expect(message.metadata.agents_used).toBeUndefined();
    expect(body.result.metadata.agents_used).toBeUndefined();
  });

  it('answers 404 at an orchestrator path it does not serve, 405 for GET at its own', async () => {
    expect((await post('/a2a/someone-else', SEED_REQUEST)).status).toBe(404);
    const res = await fetch(`${gateway.url}/a2a/lucia-orchestrator`);
    expect(res.status).toBe(405);
  });

  it('refuses an orchestrator path that shadows its own endpoints', async () => {
    await expect(startGateway({ clients: { demo: mesh.client }, orchestratorPath: '/rest/x' })).rejects.toThrow(/orchestrator path/);
    await expect(startGateway({ clients: { demo: mesh.client }, orchestratorPath: 'a2a' })).rejects.toThrow(/orchestrator path/);
  });
});

describe('seed 003: EnableMultiAgentCoordination (orchestration.multiAgent)', () => {
  let single: Mesh;
  let singleGateway: Gateway;

  beforeAll(async () => {
    const team = defineTeam({
      name: 'home-single',
      agents: [lights, music],
      policy: both,
      config: { entryAgent: 'light-agent', retries: 0, orchestration: { strategy: 'parallel', maxParallelAgents: 3, multiAgent: false } },
    });
    single = await startEmbedded(team, silentLogger());
    singleGateway = await startGateway({ clients: { demo: single.client } });
  });

  afterAll(async () => {
    await singleGateway?.close();
    await single?.stop();
  });

  it("switched off, the router's additional agents are not called: only the primary answers the seed request", async () => {
    const res = await fetch(singleGateway.orchestratorUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(SEED_REQUEST),
    });
    const body = (await res.json()) as RpcBody;
    expect(body.result.metadata.agents_used).toEqual(['light-agent']);
    expect(body.result.parts[0]!.text).toBe("I've turned on the kitchen lights.");
  });

  it('is orchestration.multi_agent in a team.yaml', () => {
    const dir = mkdtempSync(join(tmpdir(), 'troupe-multi-agent-'));
    try {
      writeFileSync(join(dir, 'team.yaml'), 'id: t\nname: T\nagents:\n  - id: a\norchestration:\n  multi_agent: false\n');
      expect(threadConfigOf(loadTeamConfig(join(dir, 'team.yaml'), {}).config, 'a').orchestration.multiAgent).toBe(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
