import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { LlmRouterPolicy, parseDecision, type LlmRouterPolicyOptions } from '../src/routing/llm-policy.js';
import { TroupeError, type Message } from '../src/protocol/index.js';
import { ROUTING_TEAM } from './fixtures/routing-team.js';

/** What the fake server answers to one request. */
type Reply = { kind: 'content'; content: string } | { kind: 'status'; status: number; body?: string } | { kind: 'hang' };

interface SeenRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: {
    model: string;
    temperature: number;
    max_tokens: number;
    response_format: { type: string };
    messages: Array<{ role: string; content: string }>;
  };
}

/** A local chat-completions server: replies come from a script, the last one repeats. */
class FakeChatServer {
  readonly requests: SeenRequest[] = [];
  private script: Reply[] = [];
  private server!: Server;
  baseUrl = '';

  async start(): Promise<void> {
    this.server = createServer((req, res) => void this.handle(req, res));
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    const { port } = this.server.address() as AddressInfo;
    this.baseUrl = `http://127.0.0.1:${port}/v1`;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  reset(...script: Reply[]): void {
    this.requests.length = 0;
    this.script = script;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'not found' } }));
      return;
    }
    this.requests.push({
      method: req.method,
      url: req.url,
      headers: req.headers,
      body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as SeenRequest['body'],
    });
    const reply = this.script.length > 1 ? this.script.shift()! : this.script[0]!;
    if (reply.kind === 'hang') return; // never answers
    if (reply.kind === 'status') {
      res.writeHead(reply.status, { 'content-type': 'application/json' }).end(reply.body ?? JSON.stringify({ error: { message: 'boom' } }));
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        id: `chatcmpl-${this.requests.length}`,
        object: 'chat.completion',
        created: Math.floor(Date.now() / 1000),
        model: this.requests.at(-1)!.body.model,
        choices: [{ index: 0, message: { role: 'assistant', content: reply.content }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120 },
      }),
    );
  }
}

const server = new FakeChatServer();
beforeAll(() => server.start());
afterAll(() => server.stop());
beforeEach(() => server.reset({ kind: 'content', content: '{}' }));

const message = (text: string): Message => ({ kind: 'message', role: 'user', messageId: `m-${text.length}`, parts: [{ kind: 'text', text }] });
const answer = (value: unknown): Reply => ({ kind: 'content', content: typeof value === 'string' ? value : JSON.stringify(value) });
const policy = (options: Partial<LlmRouterPolicyOptions> = {}) =>
  new LlmRouterPolicy({ baseUrl: server.baseUrl, model: 'router-model', retryDelayMs: 0, ...options });
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
  it('returns the decision of a valid answer, and sends a well-formed chat-completions request', async () => {
    server.reset(answer({ agentId: 'billing', confidence: 0.92, reasoning: 'a declined card is a payment issue' }));
    const d = await policy({ apiKey: 'sk-test' }).decide(
      input('My card was declined', { history: [message('hi there'), { ...message('Hello! How can I help?'), role: 'agent' }] }),
    );
    expect(d).toEqual({ agentId: 'billing', confidence: 0.92, reasoning: 'a declined card is a payment issue' });

    expect(server.requests).toHaveLength(1);
    const [req] = server.requests;
    expect(req!.method).toBe('POST');
    expect(req!.url).toBe('/v1/chat/completions');
    expect(req!.headers.authorization).toBe('Bearer sk-test');
    expect(req!.headers['content-type']).toMatch(/application\/json/);
    expect(req!.body.model).toBe('router-model');
    expect(req!.body.temperature).toBe(0.3);
    expect(req!.body.max_tokens).toBe(500);
    expect(req!.body.response_format).toEqual({ type: 'json_object' });
    const prompt = req!.body.messages.map((m) => m.content).join('\n');
    for (const agent of ROUTING_TEAM) expect(prompt).toContain(`id: ${agent.id}`);
    expect(prompt).toContain('Refunds and disputes'); // skills
    expect(prompt).toContain('My card was declined');
    expect(prompt).toContain('hi there'); // history
    expect(prompt).toMatch(/agentId.*confidence.*reasoning.*additionalAgents/s);
    expect(req!.body.messages[0]!.role).toBe('system');
  });

  it('honours temperature and maxTokens, and sends no Authorization without an apiKey', async () => {
    server.reset(answer({ agentId: 'weather', confidence: 0.8, reasoning: 'forecast' }));
    await policy({ temperature: 0, maxTokens: 50 }).decide(input('Will it rain?'));
    expect(server.requests[0]!.body.temperature).toBe(0);
    expect(server.requests[0]!.body.max_tokens).toBe(50);
    expect(server.requests[0]!.headers.authorization).toBeUndefined();
  });

  it('refuses additional agents that are unknown, repeated or the primary, and retries with what was wrong', async () => {
    const two = (additionalAgents: string[]) => answer({ agentId: 'weather', confidence: 0.85, reasoning: 'two requests', additionalAgents });
    server.reset(two(['travel-booking', 'nobody']), two(['travel-booking', 'weather']), two(['travel-booking', 'travel-booking']), two(['travel-booking']));
    const d = await policy({ maxAttempts: 4 }).decide(input("What's the weather in Paris and can you book me a flight there?"));
    expect(d.agentId).toBe('weather');
    expect(d.additionalAgents).toEqual(['travel-booking']);
    expect(server.requests).toHaveLength(4);
    const feedback = server.requests.slice(1).map((r) => r.body.messages.at(-1)!.content);
    expect(feedback[0]).toContain('"nobody" are not among');
    expect(feedback[1]).toContain('repeats the primary agent "weather"');
    expect(feedback[2]).toContain('names an agent twice');
  });

  it('builds the prompt from configured pieces: system with the catalog, user template, no examples', async () => {
    server.reset(answer({ agentId: 'hr', confidence: 0.9, reasoning: 'PTO' }));
    const history = Array.from({ length: 14 }, (_, i) => message(`earlier ${i}`));
    await policy({
      prompts: {
        system: 'ROUTE FOR ACME.\n{{catalog}}\nJSON only.',
        userTemplate: 'HISTORY<{{history}}> NOW<{{message}}>',
        catalogHeader: 'Team members:',
        includeExamples: false,
      },
    }).decide(input('How many PTO days do I have?', { history }));
    const [system, user] = server.requests[0]!.body.messages;
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
    server.reset(answer('```json\n{"agentId":"hr","confidence":0.9,"reasoning":"PTO"}\n```'));
    expect((await policy().decide(input('How many PTO days do I have?'))).agentId).toBe('hr');
  });

  it('retries an answer that is not JSON, and tells the model what was wrong', async () => {
    server.reset(answer('Sure! I would route this to billing.'), answer({ agentId: 'billing', confidence: 0.9, reasoning: 'payment' }));
    const d = await policy().decide(input());
    expect(d.agentId).toBe('billing');
    expect(server.requests).toHaveLength(2);
    const retry = server.requests[1]!.body.messages;
    expect(retry.at(-2)).toEqual({ role: 'assistant', content: 'Sure! I would route this to billing.' });
    expect(retry.at(-1)!.role).toBe('user');
    expect(retry.at(-1)!.content).toMatch(/not JSON/);
  });

  it('retries an unknown agentId', async () => {
    server.reset(
      answer({ agentId: 'payments-bot', confidence: 0.9, reasoning: 'payment' }),
      answer({ agentId: 'billing', confidence: 0.9, reasoning: 'payment' }),
    );
    const d = await policy().decide(input());
    expect(d.agentId).toBe('billing');
    expect(server.requests).toHaveLength(2);
    expect(server.requests[1]!.body.messages.at(-1)!.content).toMatch(/"payments-bot" is not one of/);
  });

  it('retries an answer that breaks the schema (confidence out of range)', async () => {
    server.reset(answer({ agentId: 'billing', confidence: 7, reasoning: 'payment' }), answer({ agentId: 'billing', confidence: 0.7, reasoning: 'payment' }));
    expect((await policy().decide(input())).confidence).toBe(0.7);
    expect(server.requests).toHaveLength(2);
  });

  it('throws ROUTER_FAILURE after maxAttempts invalid answers, saying what went wrong', async () => {
    server.reset(answer('no idea'));
    const err = await failure(policy({ maxAttempts: 3 }).decide(input()));
    expect(err).toBeInstanceOf(TroupeError);
    expect(err.code).toBe('ROUTER_FAILURE');
    expect(err.message).toMatch(/after 3 attempt/);
    expect(err.message).toMatch(/not JSON/);
    expect(err.details?.attempts).toBe(3);
    expect(server.requests).toHaveLength(3);
  });

  it('retries an HTTP 500', async () => {
    server.reset({ kind: 'status', status: 500 }, answer({ agentId: 'legal', confidence: 0.88, reasoning: 'contract' }));
    const d = await policy().decide(input('Review my NDA'));
    expect(d.agentId).toBe('legal');
    expect(server.requests).toHaveLength(2);
  });

  it('throws ROUTER_FAILURE when every attempt gets an HTTP 503', async () => {
    server.reset({ kind: 'status', status: 503 });
    const err = await failure(policy({ maxAttempts: 2 }).decide(input()));
    expect(err.code).toBe('ROUTER_FAILURE');
    expect(err.message).toMatch(/HTTP 503/);
    expect(server.requests).toHaveLength(2);
  });

  it('does not retry an HTTP 401 (a retry cannot fix a bad key)', async () => {
    server.reset({ kind: 'status', status: 401, body: '{"error":{"message":"invalid api key"}}' });
    const err = await failure(policy({ maxAttempts: 3 }).decide(input()));
    expect(err.code).toBe('ROUTER_FAILURE');
    expect(err.message).toMatch(/HTTP 401.*invalid api key/);
    expect(server.requests).toHaveLength(1);
  });

  it('throws ROUTER_FAILURE on timeout, after retrying', async () => {
    server.reset({ kind: 'hang' });
    const err = await failure(policy({ timeoutMs: 200, maxAttempts: 2 }).decide(input()));
    expect(err.code).toBe('ROUTER_FAILURE');
    expect(err.message).toMatch(/no answer within 200 ms/);
    // Both attempts were made, and each ended by its own timeout (the message says so): no answer came.
    expect(server.requests).toHaveLength(2);
  });

  it('recovers when only the first attempt times out', async () => {
    server.reset({ kind: 'hang' }, answer({ agentId: 'weather', confidence: 0.9, reasoning: 'rain' }));
    const d = await policy({ timeoutMs: 200 }).decide(input('Will it rain?'));
    expect(d.agentId).toBe('weather');
    expect(server.requests).toHaveLength(2);
  });

  it('throws ROUTER_FAILURE when the server is unreachable', async () => {
    const p = new LlmRouterPolicy({ baseUrl: 'http://127.0.0.1:1/v1', model: 'm', maxAttempts: 2, retryDelayMs: 0 });
    const err = await failure(p.decide(input()));
    expect(err.code).toBe('ROUTER_FAILURE');
    expect(err.message).toMatch(/request failed/);
  });

  it('stops when the caller aborts', async () => {
    server.reset({ kind: 'hang' });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
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
