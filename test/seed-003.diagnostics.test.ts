/**
 * Seed 003's diagnostics and logs through the gateway: the task routes rate-limited like the message
 * endpoint ("rate-limited to prevent misuse"), the redacted task view showing its own task id, and the
 * structured logs carrying routing confidence, agents used and duration. The turn is the seed's own
 * example request, verbatim.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineAgent, reply } from '../src/sdk/index.js';
import { defineTeam } from '../src/team/team.js';
import { startEmbedded } from '../src/team/embedded.js';
import { startGateway, type Gateway } from '../src/gateway/index.js';
import type { RouterDecision } from '../src/protocol/index.js';
import type { RouterPolicy } from '../src/routing/policy.js';
import { capturingLogger, type LogLine } from './helpers/log-lines.js';
import { waitUntil } from './helpers/wait.js';
import { SEED_003_REQUEST as SEED_REQUEST } from './fixtures/seed-003.js';

type Mesh = Awaited<ReturnType<typeof startEmbedded>>;

const OPERATOR = 'operator-token-0123456789';
const lights = defineAgent({ card: { id: 'light-agent', name: 'Lights', description: 'Lights' }, handle: () => reply('Lights on.', { to: 'user' }) });
const music = defineAgent({ card: { id: 'music-agent', name: 'Music', description: 'Music' }, handle: () => reply('Jazz playing.', { to: 'user' }) });
const policy: RouterPolicy = {
  name: 'seed',
  decide: async (): Promise<RouterDecision> => ({ agentId: 'light-agent', confidence: 0.92, reasoning: 'lights and music', additionalAgents: ['music-agent'] }),
};

let mesh: Mesh;
let gateway: Gateway;
const node = capturingLogger();
const edge = capturingLogger();
let taskId = '';

beforeAll(async () => {
  mesh = await startEmbedded(defineTeam({ name: 'home', agents: [lights, music], policy, config: { entryAgent: 'light-agent', retries: 0 } }), node.log);
  gateway = await startGateway({
    clients: { demo: mesh.client },
    logger: edge.log,
    rateLimit: { perSecond: 0.001, burst: 2 },
    diagnostics: { token: OPERATOR, client: mesh.client },
  });
  const res = await fetch(`${gateway.url}/`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(SEED_REQUEST) });
  const body = (await res.json()) as { result: { id: string } };
  taskId = body.result.id;
});

afterAll(async () => {
  await gateway?.close();
  await mesh?.stop();
});

const diagnostics = (path: string, method = 'GET') => fetch(`${gateway.diagnosticsUrl}${path}`, { method, headers: { authorization: `Bearer ${OPERATOR}` } });

describe('seed 003 diagnostics', () => {
  it('shows the redacted task view with its own task id, and rate-limits the task routes like the message endpoint', async () => {
    const view = await diagnostics(`/threads/${taskId}`);
    expect(view.status).toBe(200);
    const record = ((await view.json()) as { record: { task: { id: string; history: Array<{ taskId?: string }> } } }).record;
    expect(record.task.id).toBe(taskId);
    expect(record.task.history.every((m) => m.taskId === undefined || m.taskId === taskId)).toBe(true);
    // The bucket holds 2: the view took one, one rehydrate passes, the next is 429 with Retry-After.
    const statuses: number[] = [];
    let retryAfter: string | null = null;
    for (let i = 0; i < 8; i++) {
      const res = await diagnostics(`/threads/${taskId}/rehydrate`, 'POST');
      statuses.push(res.status);
      if (res.status === 429) retryAfter = res.headers.get('retry-after');
      await res.body?.cancel();
    }
    expect(statuses).toEqual([200, 429, 429, 429, 429, 429, 429, 429]);
    expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
  });

  it('logs each route step with its confidence, the agents used and the time so far, and each answered turn with all three', async () => {
    const routed = await waitUntil(() => {
      const lines = node.lines.filter((l: LogLine) => l.msg === 'routed' && l.thread === taskId);
      return lines.length >= 1 && lines;
    }, 'the routed line');
    // The fan-out is one route step: the router's decision, with its confidence and both agents.
    expect(routed[0]).toMatchObject({ from: 'user', hop: 0, confidence: 0.92, agentsUsed: ['light-agent', 'music-agent'] });
    for (const line of routed) expect(typeof line.durationMs).toBe('number');
    const answered = edge.lines.find((l: LogLine) => l.msg === 'turn answered' && l.thread === taskId);
    expect(answered).toMatchObject({ agentsUsed: ['light-agent', 'music-agent'], confidence: 0.92, taskState: 'fresh' });
    expect(typeof answered?.executionTimeMs).toBe('number');
  });
});
