/**
 * The LLM router policy through a model provider, against local servers speaking the providers' real
 * APIs (test/helpers/model-servers.ts): OpenAI chat completions, streamed as the provider asks, and
 * Anthropic messages. What the model answers is scripted per test; the provider's official SDK, its error
 * table and the policy's retries are the real ones.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ModelConfig } from '../src/config/agent.js';
import { createProvider } from '../src/llm/providers/index.js';
import { LlmRouterPolicy, parseDecision, type LlmRouterPolicyOptions } from '../src/routing/llm-policy.js';
import { TroupeError, type Message } from '../src/protocol/index.js';
import { ROUTING_TEAM } from './fixtures/routing-team.js';
import { AnthropicScriptedServer, OpenAIScriptedServer, type ScriptStep, type SeenRequest } from './helpers/model-servers.js';

const server = new OpenAIScriptedServer();
beforeAll(() => server.start());
afterAll(() => server.stop());
beforeEach(() => server.reset());

/** Scripts the server's answers in order; the last one answers every request after it. */
function serve(...steps: ScriptStep[]): void {
  const last = steps.at(-1)!;
  server
    .reset()
    .script(...steps.slice(0, -1))
    .respondWith(() => last);
}

/** The chat messages a request sent (the OpenAI wire format: role and text content). */
const sent = (req: SeenRequest | undefined) => req!.body.messages as Array<{ role: string; content: string }>;

const ROUTER_MODEL: ModelConfig = { provider: 'openai', name: 'router-model', temperature: 0.3, max_tokens: 500 };
const openai = (model: Partial<ModelConfig> = {}, env: NodeJS.ProcessEnv = { OPENAI_API_KEY: 'sk-test' }) =>
  createProvider({ ...ROUTER_MODEL, base_url: server.baseURL, ...model } as ModelConfig, { env });
const message = (text: string): Message => ({ kind: 'message', role: 'user', messageId: `m-${text.length}`, parts: [{ kind: 'text', text }] });
const answer = (value: unknown): ScriptStep => ({ text: typeof value === 'string' ? value : JSON.stringify(value) });
const policy = (options: Partial<LlmRouterPolicyOptions> = {}) => new LlmRouterPolicy({ provider: openai(), retryDelayMs: 0, ...options });
const input = (text = 'My card was declined', extra: Partial<Parameters<LlmRouterPolicy['decide']>[0]> = {}) => ({
  message: message(text),
  agents: ROUTING_TEAM,
  ...extra,
});
const failure = (p: Promise<unknown>) =>
  p.then(
    () => expect.unreachable('expected ROUTER_FAILURE'),
    (e: unknown) => e as TroupeError,
  );

describe('LlmRouterPolicy', () => {
  it('returns the decision of a valid answer, and sends a well-formed chat-completions request through the provider', async () => {
    serve(answer({ agentId: 'billing', confidence: 0.92, reasoning: 'a declined card is a payment issue' }));
    const d = await policy().decide(input('My card was declined', { history: [message('hi there'), { ...message('Hello! How can I help?'), role: 'agent' }] }));
    expect(d).toEqual({ agentId: 'billing', confidence: 0.92, reasoning: 'a declined card is a payment issue' });

    expect(server.requests).toHaveLength(1);
    const [req] = server.requests;
    expect(req!.method).toBe('POST');
    expect(req!.path).toBe('/v1/chat/completions');
    expect(req!.headers.authorization).toBe('Bearer sk-test');
    expect(req!.headers['content-type']).toMatch(/application\/json/);
    expect(req!.body).toMatchObject({ model: 'router-model', temperature: 0.3, max_tokens: 500 });
    const prompt = sent(req)
      .map((m) => m.content)
      .join('\n');
    for (const agent of ROUTING_TEAM) expect(prompt).toContain(`id: ${agent.id}`);
    expect(prompt).toContain('Refunds and disputes'); // skills
    expect(prompt).toContain('My card was declined');
    expect(prompt).toContain('hi there'); // history
    expect(prompt).toMatch(/agentId.*confidence.*reasoning.*additionalAgents/s);
    expect(sent(req)[0]!.role).toBe('system');
  });

  it("sends the model block's temperature and max tokens", async () => {
    serve(answer({ agentId: 'weather', confidence: 0.8, reasoning: 'forecast' }));
    await new LlmRouterPolicy({ provider: openai({ temperature: 0, max_tokens: 50 }) }).decide(input('Will it rain?'));
    expect(server.requests[0]!.body).toMatchObject({ temperature: 0, max_tokens: 50 });
  });

  it('asks any provider: the same decision through the Anthropic messages API', async () => {
    const anthropic = await new AnthropicScriptedServer().start();
    try {
      anthropic.script(answer({ agentId: 'legal', confidence: 0.9, reasoning: 'contract' }));
      const provider = createProvider({ provider: 'anthropic', name: 'claude-router', max_tokens: 300 }, { env: { ANTHROPIC_BASE_URL: anthropic.baseURL } });
      const d = await new LlmRouterPolicy({ provider }).decide(input('Review my NDA'));
      expect(d).toEqual({ agentId: 'legal', confidence: 0.9, reasoning: 'contract' });
      expect(anthropic.requests).toHaveLength(1);
      expect(anthropic.requests[0]!.body).toMatchObject({ model: 'claude-router', max_tokens: 300 });
      expect(String(anthropic.requests[0]!.body.system)).toContain('id: legal');
    } finally {
      await anthropic.stop();
    }
  });

  it('refuses additional agents that are unknown, repeated or the primary, and retries with what was wrong', async () => {
    const two = (additionalAgents: string[]) => answer({ agentId: 'weather', confidence: 0.85, reasoning: 'two requests', additionalAgents });
    serve(two(['travel-booking', 'nobody']), two(['travel-booking', 'weather']), two(['travel-booking', 'travel-booking']), two(['travel-booking']));
    const d = await policy({ maxAttempts: 4 }).decide(input("What's the weather in Paris and can you book me a flight there?"));
    expect(d.agentId).toBe('weather');
    expect(d.additionalAgents).toEqual(['travel-booking']);
    expect(server.requests).toHaveLength(4);
    const feedback = server.requests.slice(1).map((r) => sent(r).at(-1)!.content);
    expect(feedback[0]).toContain('"nobody" are not among');
    expect(feedback[1]).toContain('repeats the primary agent "weather"');
    expect(feedback[2]).toContain('names an agent twice');
  });

  it('builds the prompt from configured pieces: system with the catalog, user template, no examples', async () => {
    serve(answer({ agentId: 'hr', confidence: 0.9, reasoning: 'PTO' }));
    const history = Array.from({ length: 14 }, (_, i) => message(`earlier ${i}`));
    await policy({
      prompts: {
        system: 'ROUTE FOR ACME.\n{{catalog}}\nJSON only.',
        userTemplate: 'HISTORY<{{history}}> NOW<{{message}}>',
        catalogHeader: 'Team members:',
        includeExamples: false,
      },
    }).decide(input('How many PTO days do I have?', { history }));
    const [system, user] = sent(server.requests[0]);
    expect(system!.content.startsWith('ROUTE FOR ACME.\nTeam members:\n- id: billing')).toBe(true);
    expect(system!.content.endsWith('JSON only.')).toBe(true);
    expect(system!.content).not.toContain(' e.g. ');
    expect(user!.content).toContain('NOW<How many PTO days do I have?>');
    // The last 10 earlier messages by default.
    expect(user!.content).toContain('earlier 13');
    expect(user!.content).toContain('earlier 4');
    expect(user!.content).not.toContain('earlier 3\n');
  });

  it('accepts an answer wrapped in a code fence', async () => {
    serve(answer('```json\n{"agentId":"hr","confidence":0.9,"reasoning":"PTO"}\n```'));
    expect((await policy().decide(input('How many PTO days do I have?'))).agentId).toBe('hr');
  });

  it('retries an answer that is not JSON, and tells the model what was wrong', async () => {
    serve(answer('Sure! I would route this to billing.'), answer({ agentId: 'billing', confidence: 0.9, reasoning: 'payment' }));
    const d = await policy().decide(input());
    expect(d.agentId).toBe('billing');
    expect(server.requests).toHaveLength(2);
    const retry = sent(server.requests[1]);
    expect(retry.at(-2)).toEqual({ role: 'assistant', content: 'Sure! I would route this to billing.' });
    expect(retry.at(-1)!.role).toBe('user');
    expect(retry.at(-1)!.content).toMatch(/not JSON/);
  });

  it('retries an empty answer', async () => {
    serve(answer(''), answer({ agentId: 'billing', confidence: 0.9, reasoning: 'payment' }));
    expect((await policy().decide(input())).agentId).toBe('billing');
    expect(server.requests).toHaveLength(2);
  });

  it('retries an unknown agentId', async () => {
    serve(answer({ agentId: 'payments-bot', confidence: 0.9, reasoning: 'payment' }), answer({ agentId: 'billing', confidence: 0.9, reasoning: 'payment' }));
    const d = await policy().decide(input());
    expect(d.agentId).toBe('billing');
    expect(server.requests).toHaveLength(2);
    expect(sent(server.requests[1]).at(-1)!.content).toMatch(/"payments-bot" is not one of/);
  });

  it('retries an answer that breaks the schema (confidence out of range)', async () => {
    serve(answer({ agentId: 'billing', confidence: 7, reasoning: 'payment' }), answer({ agentId: 'billing', confidence: 0.7, reasoning: 'payment' }));
    expect((await policy().decide(input())).confidence).toBe(0.7);
    expect(server.requests).toHaveLength(2);
  });

  it('throws ROUTER_FAILURE after maxAttempts invalid answers, saying what went wrong', async () => {
    serve(answer('no idea'));
    const err = await failure(policy({ maxAttempts: 3 }).decide(input()));
    expect(err).toBeInstanceOf(TroupeError);
    expect(err.code).toBe('ROUTER_FAILURE');
    expect(err.message).toMatch(/after 3 attempt/);
    expect(err.message).toMatch(/not JSON/);
    expect(err.details?.attempts).toBe(3);
    expect(server.requests).toHaveLength(3);
  });

  it('retries an HTTP 500', async () => {
    serve({ status: 500 }, answer({ agentId: 'legal', confidence: 0.88, reasoning: 'contract' }));
    const d = await policy().decide(input('Review my NDA'));
    expect(d.agentId).toBe('legal');
    expect(server.requests).toHaveLength(2);
  });

  it('retries an HTTP 429 (the provider table of retryable statuses)', async () => {
    serve({ status: 429, message: 'slow down' }, answer({ agentId: 'legal', confidence: 0.88, reasoning: 'contract' }));
    expect((await policy().decide(input('Review my NDA'))).agentId).toBe('legal');
    expect(server.requests).toHaveLength(2);
  });

  it('throws ROUTER_FAILURE when every attempt gets an HTTP 503', async () => {
    serve({ status: 503, message: 'overloaded' });
    const err = await failure(policy({ maxAttempts: 2 }).decide(input()));
    expect(err.code).toBe('ROUTER_FAILURE');
    expect(err.message).toMatch(/503 overloaded/);
    expect(server.requests).toHaveLength(2);
  });

  it('does not retry an HTTP 401 (a retry cannot fix a bad key)', async () => {
    serve({ status: 401, message: 'invalid api key' });
    const err = await failure(policy({ maxAttempts: 3 }).decide(input()));
    expect(err.code).toBe('ROUTER_FAILURE');
    expect(err.message).toMatch(/401 invalid api key/);
    expect(err.message).not.toContain('sk-test');
    expect(server.requests).toHaveLength(1);
  });

  it('throws ROUTER_FAILURE on timeout, after retrying', async () => {
    serve({ hang: true });
    const err = await failure(policy({ timeoutMs: 200, maxAttempts: 2 }).decide(input()));
    expect(err.code).toBe('ROUTER_FAILURE');
    expect(err.message).toMatch(/no answer within 200 ms/);
    // Both attempts were made, and each ended by its own timeout (the message says so): no answer came.
    expect(server.requests).toHaveLength(2);
  });

  it('recovers when only the first attempt times out', async () => {
    serve({ hang: true }, answer({ agentId: 'weather', confidence: 0.9, reasoning: 'rain' }));
    const d = await policy({ timeoutMs: 200 }).decide(input('Will it rain?'));
    expect(d.agentId).toBe('weather');
    expect(server.requests).toHaveLength(2);
  });

  it('throws ROUTER_FAILURE when the server is unreachable, after retrying', async () => {
    const p = new LlmRouterPolicy({ provider: openai({ base_url: 'http://127.0.0.1:1/v1' }), maxAttempts: 2, retryDelayMs: 0 });
    const err = await failure(p.decide(input()));
    expect(err.code).toBe('ROUTER_FAILURE');
    expect(err.message).toMatch(/Connection error/);
    expect(err.details?.attempts).toBe(2);
  });

  it('stops when the caller aborts', async () => {
    const controller = new AbortController();
    server.respondWith(() => {
      controller.abort();
      return { hang: true };
    });
    const err = await failure(policy({ timeoutMs: 10_000, maxAttempts: 3 }).decide(input('x', { signal: controller.signal })));
    expect(err.code).toBe('ROUTER_FAILURE');
    expect(err.message).toMatch(/aborted/);
    expect(server.requests).toHaveLength(1);
  });

  it('throws ROUTER_FAILURE with no agents, without calling the model', async () => {
    const err = await failure(policy().decide({ message: message('hello'), agents: [] }));
    expect(err.code).toBe('ROUTER_FAILURE');
    expect(server.requests).toHaveLength(0);
  });

  it('parseDecision validates on its own', () => {
    expect(parseDecision('{"agentId":"hr","confidence":0.5,"reasoning":"r"}', ROUTING_TEAM)).toEqual({
      agentId: 'hr',
      confidence: 0.5,
      reasoning: 'r',
    });
    expect(() => parseDecision('{"agentId":"hr"}', ROUTING_TEAM)).toThrow(/schema/);
  });
});
