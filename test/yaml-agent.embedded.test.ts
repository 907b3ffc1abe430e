/**
 * A YAML agent on the in-process mesh with turns in flight at once: the loop's logic is built once per
 * agent and each turn finds its own I/O by its turn id, so concurrent threads keep their own streamed
 * deltas, tools and answers; `status()` lists one loop per turn while they run. A prompt tool written
 * in seed 002's `{param}` form sends its filled template to its model, and the agent.yaml's warnings
 * are logged when the agent starts.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { AgentConfigSchema } from '../src/config/agent.js';
import { createLlmAgent, loadYamlAgent } from '../src/llm/agent.js';
import { silentLogger } from '../src/observability/logger.js';
import type { ThreadEvent } from '../src/protocol/index.js';
import type { AgentDefinition } from '../src/sdk/agent.js';
import { capturingLogger } from './helpers/log-lines.js';
import { OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';
import { waitUntil } from './helpers/wait.js';

const chunksOf = (events: ThreadEvent[]) =>
  events.flatMap((e) => (e.kind === 'artifact-update' ? e.artifact.parts.map((p) => (p.kind === 'text' ? p.text : '')) : []));
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
        config: AgentConfigSchema.parse({
          name: 'solo',
          model: { provider: 'openai', name: 'm', base_url: model.baseURL },
          instructions: { inline: 'Answer.' },
        }),
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
    expect(agent.status?.().actors).toEqual([
      expect.objectContaining({ kind: 'llm-agent', id: 'solo/slow-thread', state: 'thinking', threadId: 'slow-thread' }),
    ]);

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

describe("a prompt tool in seed 002's {param} form", () => {
  const model = new OpenAIScriptedServer();
  const dir = mkdtempSync(join(tmpdir(), 'troupe-prompt-'));
  beforeAll(() => model.start());
  afterAll(async () => {
    await model.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('fills {param} and {{ param }}, keeps JSON braces and \\{ escapes as text, and logs the unused parameter at start', async () => {
    const file = join(dir, 'agent.yaml');
    writeFileSync(
      file,
      [
        'name: geo',
        `model: {provider: openai, name: agent, base_url: "${model.baseURL}"}`,
        'instructions: {inline: Answer geography questions.}',
        'tools:',
        '  - name: capital',
        '    description: Names the capital of a country',
        '    type: prompt',
        `    template: 'Capital of {country} ({{ country }})? Reply as {"capital": "…"}; keep \\{country} as it is.'`,
        '    model: {provider: openai, name: tool-model}',
        '    parameters:',
        '      country: {type: str, description: The country}',
        '      tone: {type: str, description: How to say it}',
        '',
      ].join('\n'),
    );
    const { lines, log } = capturingLogger();
    const agent = await loadYamlAgent(file, { env: { OPENAI_BASE_URL: model.baseURL }, logger: log });
    expect(lines.filter((l) => l.level === 40).map((l) => l.msg)).toEqual([
      `${file}:12:7 tools[0].parameters.tone: the template never uses {tone}: the model is asked for it and it goes nowhere`,
    ]);
    const mesh = await startEmbedded({ name: 'geo', agents: [agent], config: { entryAgent: 'geo' } }, silentLogger());
    try {
      model.scriptFor('agent', { toolCalls: [{ name: 'capital', arguments: { country: 'Peru', tone: 'dry' } }] }, { text: 'Lima.' });
      model.scriptFor('tool-model', { text: '{"capital": "Lima"}' });
      expect((await mesh.client.send('What is the capital of Peru?')).text).toBe('Lima.');
      const [toolCall] = model.requestsFor('tool-model');
      expect(toolCall!.body.messages).toEqual([{ role: 'user', content: 'Capital of Peru (Peru)? Reply as {"capital": "…"}; keep {country} as it is.' }]);
    } finally {
      await mesh.stop();
    }
  });
});
