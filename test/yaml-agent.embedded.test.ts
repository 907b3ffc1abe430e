/**
 * A YAML agent on the in-process mesh with turns in flight at once: the loop's logic is built once per
 * agent and each turn finds its own I/O by its turn id, so concurrent threads keep their own streamed
 * deltas, tools and answers; `status()` lists one loop per turn while they run.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { AgentConfigSchema } from '../src/config/agent.js';
import { createLlmAgent } from '../src/llm/agent.js';
import { silentLogger } from '../src/observability/logger.js';
import type { ThreadEvent } from '../src/protocol/index.js';
import type { AgentDefinition } from '../src/sdk/agent.js';
import { OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';
import { waitUntil } from './helpers/wait.js';

const chunksOf = (events: ThreadEvent[]) => events.flatMap((e) => (e.kind === 'artifact-update' ? e.artifact.parts.map((p) => (p.kind === 'text' ? p.text : '')) : []));
const lastUser = (req: SeenRequest) => (req.body.messages as Array<{ role: string; content: string }>).filter((m) => m.role === 'user').at(-1)?.content;

describe('a YAML agent with concurrent turns', () => {
  const model = new OpenAIScriptedServer();
  let agent: AgentDefinition;
  let mesh: Awaited<ReturnType<typeof startEmbedded>>;
  let releaseSlow!: () => void;

  beforeAll(async () => {
    await model.start();
    const slowGate = new Promise<void>((resolve) => (releaseSlow = resolve));
    model.respondWith((req) => {
      const asked = lastUser(req);
      if (asked === 'slow') return { gate: slowGate, then: { chunks: ['slow ', 'answer'] } };
      return { chunks: ['fast ', 'answer'] };
    });
    agent = await createLlmAgent(
      {
        config: AgentConfigSchema.parse({ name: 'solo', model: { provider: 'openai', name: 'm', base_url: model.baseURL }, instructions: { inline: 'Answer.' } }),
        file: 'inline',
        dir: process.cwd(),
      },
      { env: {} },
    );
    mesh = await startEmbedded({ name: 'solo', agents: [agent], config: { entryAgent: 'solo' } }, silentLogger());
  });

  afterAll(async () => {
    await mesh?.stop();
    await model.stop();
  });

  it('keeps each turn apart while another waits on the model', async () => {
    const slowEvents: ThreadEvent[] = [];
    const fastEvents: ThreadEvent[] = [];
    const slow = mesh.client.send('slow', { threadId: 'slow-thread', onEvent: (e) => slowEvents.push(e) });
    await waitUntil(() => model.requests.some((r) => lastUser(r) === 'slow'), 'the slow turn to reach the model');
    expect(agent.status?.().actors).toEqual([expect.objectContaining({ kind: 'llm-agent', id: 'solo/slow-thread', state: 'thinking', threadId: 'slow-thread' })]);

    const fast = await mesh.client.send('fast', { threadId: 'fast-thread', onEvent: (e) => fastEvents.push(e) });
    expect(fast.text).toBe('fast answer');
    expect(agent.status?.().actors?.map((a) => a.id)).toEqual(['solo/slow-thread']);

    releaseSlow();
    expect((await slow).text).toBe('slow answer');
    expect(chunksOf(fastEvents)).toEqual(['fast ', 'answer']);
    expect(chunksOf(slowEvents)).toEqual(['slow ', 'answer']);
    expect(agent.status?.()).toEqual({ detail: { model: { provider: 'openai', name: 'm', endpoint: model.baseURL }, loops: [] }, actors: [] });
  });
});
