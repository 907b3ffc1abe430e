/**
 * Structured answers of a YAML agent (agent.yaml `output`) and of one built in code with a zod schema, on
 * the in-process mesh, the model a local server speaking OpenAI's chat completions API: the request
 * carries `response_format` json_schema and the schema in the prompt; an answer that does not match is
 * asked for again with what was wrong, and the one that matches comes back as text and as a data part;
 * past the retries the turn ends with OUTPUT_INVALID.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AgentConfigSchema } from '../src/config/agent.js';
import { createLlmAgent, type LlmAgentOptions } from '../src/llm/agent.js';
import { silentLogger } from '../src/observability/logger.js';
import { META, type TurnUsage } from '../src/protocol/index.js';
import { startEmbedded } from '../src/team/embedded.js';
import { OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';

const WEATHER = {
  type: 'object',
  properties: { city: { type: 'string' }, temperature_c: { type: 'number' } },
  required: ['city', 'temperature_c'],
  additionalProperties: false,
};

const messagesOf = (req: SeenRequest) => req.body.messages as Array<{ role: string; content: string }>;

describe('structured answers', () => {
  const model = new OpenAIScriptedServer();
  const meshes: Array<Awaited<ReturnType<typeof startEmbedded>>> = [];

  async function agentMesh(name: string, yaml: Record<string, unknown>, opts: LlmAgentOptions = {}) {
    const config = AgentConfigSchema.parse({
      name,
      model: { provider: 'openai', name, base_url: model.baseURL },
      instructions: { inline: 'Report the weather.' },
      ...yaml,
    });
    const agent = await createLlmAgent({ config, file: 'inline', dir: process.cwd() }, { env: {}, maxRetries: 0, ...opts });
    const mesh = await startEmbedded({ name, agents: [agent], config: { entryAgent: name, retries: 0 } }, silentLogger());
    meshes.push(mesh);
    return mesh;
  }

  beforeAll(async () => {
    await model.start();
  });

  afterAll(async () => {
    await Promise.all(meshes.map((m) => m.stop()));
    await model.stop();
  });

  it('asks with response_format, retries an answer that does not match with the error, and replies with a data part', async () => {
    const mesh = await agentMesh('weather', { output: { name: 'weather', schema: WEATHER } });
    model.scriptFor('weather', { text: '{"city": "Oslo"}' }, { text: '```json\n{"city": "Oslo", "temperature_c": -3.5}\n```' });
    const res = await mesh.client.send('Weather in Oslo?');
    expect(res.error).toBeUndefined();
    const message = res.final.status.message!;
    expect(message.parts).toEqual([
      { kind: 'text', text: '{"city": "Oslo", "temperature_c": -3.5}' },
      { kind: 'data', data: { city: 'Oslo', temperature_c: -3.5 } },
    ]);

    const [first, second] = model.requestsFor('weather');
    expect(first!.body.response_format).toEqual({ type: 'json_schema', json_schema: { name: 'weather', schema: WEATHER, strict: false } });
    expect(messagesOf(first!)[0]!.content).toContain(`matches this JSON Schema:\n${JSON.stringify(WEATHER)}`);
    // The second try sees its first answer and what was wrong with it.
    expect(messagesOf(second!).slice(-2)).toEqual([
      { role: 'assistant', content: '{"city": "Oslo"}' },
      {
        role: 'user',
        content: expect.stringMatching(
          /^That answer does not match the required JSON Schema: .*temperature_c.*Answer again with only the corrected JSON object\.$/,
        ),
      },
    ]);
    const usage = message.metadata?.[META.usage] as TurnUsage;
    expect(usage.calls.map((c) => c.purpose)).toEqual(['answer', 'repair']);
    expect(usage).toMatchObject({ inputTokens: 20, outputTokens: 10 });
  });

  it('ends the turn with OUTPUT_INVALID when no answer matches within the retries', async () => {
    const mesh = await agentMesh('stubborn', { output: { schema: WEATHER, retries: 1 } });
    model.scriptFor('stubborn', { text: 'It is cold in Oslo.' }, { text: '{"city": 7}' });
    const res = await mesh.client.send('Weather in Oslo?');
    expect(res.error?.code).toBe('OUTPUT_INVALID');
    expect(res.error?.message).toContain('after 2 tries');
    expect(model.requestsFor('stubborn')).toHaveLength(2);
    expect(messagesOf(model.requestsFor('stubborn')[1]!).at(-1)!.content).toContain('it is not JSON');
  });

  it('takes a zod schema in code: its JSON Schema goes to the model, the answer is parsed with it', async () => {
    const Forecast = z.object({ city: z.string(), days: z.array(z.object({ day: z.string(), rain: z.boolean() })).min(1) });
    const mesh = await agentMesh('forecast', {}, { output: { schema: Forecast, name: 'forecast' } });
    model.scriptFor('forecast', { text: '{"city": "Bergen", "days": []}' }, { text: '{"city": "Bergen", "days": [{"day": "Mon", "rain": true}]}' });
    const res = await mesh.client.send('Forecast for Bergen?');
    expect(res.error).toBeUndefined();
    expect(res.final.status.message!.parts[1]).toEqual({ kind: 'data', data: { city: 'Bergen', days: [{ day: 'Mon', rain: true }] } });
    const [first] = model.requestsFor('forecast');
    const format = first!.body.response_format as { json_schema: { name: string; schema: { type: string; required: string[] } } };
    expect(format.json_schema.name).toBe('forecast');
    expect(format.json_schema.schema).toMatchObject({ type: 'object', required: ['city', 'days'] });
    expect(messagesOf(model.requestsFor('forecast')[1]!).at(-1)!.content).toContain('days');
  });
});
