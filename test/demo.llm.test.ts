/**
 * `troupe demo --llm` (what `npm start -- --llm` runs) against a local server speaking the OpenAI
 * chat-completions format: the Q&A scene is routed by the LLM router (fan-out, partial failure,
 * clarification as the model decides) and the YAML support agent answers with a tool; without a model
 * in the environment it says what to set and exits 2; `troupe demo` still needs no key.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OpenAIScriptedServer } from './helpers/model-servers.js';
import { runTroupe } from './helpers/processes.js';

interface DemoStep {
  team: string;
  text: string;
  answer: string;
  route: Array<{ to: string; confidence?: number }>;
  state: string;
  error?: { code: string };
}

describe('troupe demo --llm', () => {
  const openai = new OpenAIScriptedServer();

  beforeAll(async () => {
    await openai.start();
  });

  afterAll(async () => {
    await openai.stop();
  });

  it('plays the scenes with the LLM router and the YAML support agent', async () => {
    const decide = (d: Record<string, unknown>) => ({ text: JSON.stringify(d) });
    openai.scriptFor(
      'router-model',
      decide({ agentId: 'weather', confidence: 0.9, reasoning: 'weather and a flight', additionalAgents: ['travel'] }),
      decide({ agentId: 'billing', confidence: 0.85, reasoning: 'a charge and the weather', additionalAgents: ['weather'] }),
      decide({ agentId: 'weather', confidence: 0.2, reasoning: 'too vague' }),
    );
    openai.scriptFor('support-model', { toolCalls: [{ name: 'lookup_order', arguments: { order_id: 'A-1001' } }] }, { text: 'Order A-1001 has shipped.' });
    const res = await runTroupe(
      ['demo', '--llm', '--json'],
      { OPENAI_BASE_URL: openai.baseURL, OPENAI_API_KEY: 'sk-test', TROUPE_DEMO_MODEL: 'router-model', SUPPORT_MODEL: 'support-model' },
      { timeoutMs: 60_000 },
    );
    expect(res.code, res.stderr).toBe(0);
    const steps = JSON.parse(res.stdout) as DemoStep[];
    const qa = steps.filter((s) => s.team === 'qa');
    expect(qa.map((s) => s.route.map((r) => r.to))).toEqual([['weather', 'travel'], ['billing', 'weather'], []]);
    expect(qa[0]!.route[0]!.confidence).toBe(0.9);
    expect(qa[1]!.answer).toContain('billing failed');
    expect(qa[2]!.state).toBe('input-required');
    const yaml = steps.find((s) => s.team === 'yaml')!;
    expect(yaml.answer).toBe('Order A-1001 has shipped.');
    expect(openai.requestsFor('router-model')).toHaveLength(3);
    expect(openai.requestsFor('support-model')).toHaveLength(2);
  }, 90_000);

  it('troupe demo (npm start) plays every scene without a model key', async () => {
    const res = await runTroupe(['demo', '--json'], { OPENAI_API_KEY: '', OPENAI_BASE_URL: '' }, { timeoutMs: 60_000 });
    expect(res.code, res.stderr).toBe(0);
    const steps = JSON.parse(res.stdout) as DemoStep[];
    expect([...new Set(steps.map((s) => s.team))]).toEqual(['demo', 'qa', 'handoff']);
  }, 90_000);

  it('without a model in the environment, says what to set and exits 2', async () => {
    const res = await runTroupe(['demo', '--llm'], { OPENAI_API_KEY: '', OPENAI_BASE_URL: '' });
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('OPENAI_API_KEY');
    expect(res.stdout).toBe('');
  });
});
