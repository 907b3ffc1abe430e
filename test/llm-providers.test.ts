/**
 * Model providers through the official SDKs against local servers speaking the real wire formats
 * (test/helpers/model-servers.ts): OpenAI chat completions (also Azure's paths and headers) and Anthropic
 * messages, both streamed over SSE with text and tool-call deltas; errors typed for the retry decision;
 * keys from the environment and never in an error message.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ModelConfig } from '../src/config/agent.js';
import { createEmbeddingProvider, createProvider } from '../src/llm/providers/index.js';
import { decodeEmbedding } from '../src/llm/providers/openai.js';
import { ModelCallError, type ChatMessage, type ToolDefinition } from '../src/model/types.js';
import { TroupeError } from '../src/protocol/errors.js';
import { waitFor } from './helpers/wait.js';
import { AnthropicScriptedServer, bagOfWordsVector, base64Floats, EMBEDDING_DIMS, OpenAIScriptedServer } from './helpers/model-servers.js';

const KEY = 'sk-test-0123456789abcdef';
const LOOKUP: ToolDefinition = {
  name: 'lookup_order',
  description: 'Looks an order up',
  parameters: { type: 'object', properties: { order_id: { type: 'string', description: 'the number' } }, required: ['order_id'] },
};

async function rejection(p: Promise<unknown>): Promise<ModelCallError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof ModelCallError) return err;
    throw err;
  }
  throw new Error('expected a rejection');
}

describe('openai provider', () => {
  const server = new OpenAIScriptedServer();
  const model: ModelConfig = { provider: 'openai', name: 'gpt-test', temperature: 0.3, max_tokens: 200, top_p: 0.8 };
  const provider = () => createProvider({ ...model, base_url: server.baseURL }, { env: { OPENAI_API_KEY: KEY } });

  beforeAll(async () => {
    await server.start();
  });
  afterAll(() => server.stop());
  beforeEach(() => server.reset());

  it('streams text deltas in order and sends the settings, the key and stream: true', async () => {
    server.script({ chunks: ['Hel', 'lo ', 'there', '!'] });
    const deltas: string[] = [];
    const out = await provider().complete({
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hi' },
      ],
      onDelta: (d) => deltas.push(d),
    });
    expect(deltas).toEqual(['Hel', 'lo ', 'there', '!']);
    expect(out).toMatchObject({ text: 'Hello there!', toolCalls: [], stopReason: 'stop' });
    const [req] = server.requests;
    expect(req!.path).toBe('/v1/chat/completions');
    expect(req!.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(req!.body).toMatchObject({
      model: 'gpt-test',
      stream: true,
      temperature: 0.3,
      max_tokens: 200,
      top_p: 0.8,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hi' },
      ],
    });
    expect(req!.body.tools).toBeUndefined();
  });

  it('assembles parallel tool calls from their deltas and offers tools as functions', async () => {
    server.script({
      text: 'Checking both.',
      toolCalls: [
        { id: 'call_a', name: 'lookup_order', arguments: { order_id: '42' } },
        { id: 'call_b', name: 'lookup_order', arguments: { order_id: '43' } },
      ],
    });
    const out = await provider().complete({ messages: [{ role: 'user', content: 'Where are 42 and 43?' }], tools: [LOOKUP] });
    expect(out.stopReason).toBe('tool_calls');
    expect(out.text).toBe('Checking both.');
    expect(out.toolCalls).toEqual([
      { id: 'call_a', name: 'lookup_order', arguments: '{"order_id":"42"}' },
      { id: 'call_b', name: 'lookup_order', arguments: '{"order_id":"43"}' },
    ]);
    expect(server.requests[0]!.body.tools).toEqual([
      { type: 'function', function: { name: 'lookup_order', description: 'Looks an order up', parameters: LOOKUP.parameters } },
    ]);
  });

  it('sends earlier tool calls and their results in the chat-completions shape', async () => {
    server.script({ text: 'Order 42 has shipped.' });
    const messages: ChatMessage[] = [
      { role: 'user', content: 'Where is 42?' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'call_a', name: 'lookup_order', arguments: '{"order_id":"42"}' }] },
      { role: 'tool', toolCallId: 'call_a', name: 'lookup_order', content: '{"status":"shipped"}' },
    ];
    await provider().complete({ messages, tools: [LOOKUP] });
    expect(server.requests[0]!.body.messages).toEqual([
      { role: 'user', content: 'Where is 42?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'lookup_order', arguments: '{"order_id":"42"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_a', content: '{"status":"shipped"}' },
    ]);
  });

  it('types failures: 429 and 5xx retryable (with Retry-After), 400 not; one request each (the loop retries, not the SDK)', async () => {
    server.script({ status: 429, headers: { 'retry-after': '2' } }, { status: 503 }, { status: 400, message: 'bad request' });
    const rateLimited = await rejection(provider().complete({ messages: [{ role: 'user', content: 'x' }] }));
    expect(rateLimited).toMatchObject({ retryable: true, status: 429, retryAfterMs: 2000 });
    const unavailable = await rejection(provider().complete({ messages: [{ role: 'user', content: 'x' }] }));
    expect(unavailable).toMatchObject({ retryable: true, status: 503 });
    const bad = await rejection(provider().complete({ messages: [{ role: 'user', content: 'x' }] }));
    expect(bad).toMatchObject({ retryable: false, status: 400 });
    expect(bad.message).toContain('bad request');
    expect(server.requests).toHaveLength(3);
  });

  it('never repeats the key in an error, even when the server echoes it', async () => {
    server.script({ status: 401, message: `Incorrect API key provided: ${KEY}` });
    const err = await rejection(provider().complete({ messages: [{ role: 'user', content: 'x' }] }));
    expect(err.message).not.toContain(KEY);
    expect(err.message).toContain('[redacted]');
    expect(err.retryable).toBe(false);
  });

  it('a lost connection is retryable; the same after streamed text is not (a retry would repeat it)', async () => {
    const stopped = new OpenAIScriptedServer();
    await stopped.start();
    const url = stopped.baseURL;
    await stopped.stop();
    const gone = await rejection(
      createProvider({ ...model, base_url: url }, { env: { OPENAI_API_KEY: KEY } }).complete({ messages: [{ role: 'user', content: 'x' }] }),
    );
    expect(gone.retryable).toBe(true);

    server.script({ chunks: ['Half ', 'an '], dropConnection: true });
    const deltas: string[] = [];
    const cut = await rejection(provider().complete({ messages: [{ role: 'user', content: 'x' }], onDelta: (d) => deltas.push(d) }));
    expect(deltas).toEqual(['Half ', 'an ']);
    expect(cut.retryable).toBe(false);
    expect(cut.message).toContain('not retried');
  });

  it('takes OPENAI_BASE_URL from the environment, and needs no key with a base URL', async () => {
    server.script({ text: 'local' });
    const local = createProvider({ provider: 'openai', name: 'llama3' }, { env: { OPENAI_BASE_URL: server.baseURL } });
    expect(local.endpoint).toBe(server.baseURL);
    expect((await local.complete({ messages: [{ role: 'user', content: 'x' }] })).text).toBe('local');
    expect(server.requests[0]!.headers.authorization).toBe('Bearer no-key');
  });

  it('refuses to start without a key or a base URL, naming the variable', () => {
    expect(() => createProvider({ provider: 'openai', name: 'gpt-4o' }, { env: {} })).toThrow(TroupeError);
    expect(() => createProvider({ provider: 'openai', name: 'gpt-4o' }, { env: {} })).toThrow(/OPENAI_API_KEY/);
    expect(() => createProvider({ provider: 'azure_openai', name: 'dep' }, { env: {} })).toThrow(
      /AZURE_OPENAI_ENDPOINT \(or base_url\) and AZURE_OPENAI_API_KEY/,
    );
    expect(() => createProvider({ provider: 'anthropic', name: 'claude' }, { env: {} })).toThrow(/ANTHROPIC_API_KEY/);
  });
});

describe('azure_openai provider', () => {
  const server = new OpenAIScriptedServer();
  beforeAll(async () => {
    await server.start();
  });
  afterAll(() => server.stop());

  it('calls the deployment with the api-key header and api-version from the environment', async () => {
    server.scriptFor('support-gpt', { chunks: ['from ', 'azure'] });
    const provider = createProvider(
      { provider: 'azure_openai', name: 'support-gpt' },
      { env: { AZURE_OPENAI_ENDPOINT: server.url, AZURE_OPENAI_API_KEY: 'azure-key-123', OPENAI_API_VERSION: '2024-10-21' } },
    );
    const deltas: string[] = [];
    const out = await provider.complete({ messages: [{ role: 'user', content: 'hi' }], onDelta: (d) => deltas.push(d) });
    expect(out.text).toBe('from azure');
    expect(deltas).toEqual(['from ', 'azure']);
    const [req] = server.requests;
    expect(req!.path).toBe('/openai/deployments/support-gpt/chat/completions');
    expect(req!.headers['api-key']).toBe('azure-key-123');
    expect(provider.endpoint).not.toContain('azure-key-123');
  });
});

describe('anthropic provider', () => {
  const server = new AnthropicScriptedServer();
  const model: ModelConfig = { provider: 'anthropic', name: 'claude-test', temperature: 0.5 };
  const provider = () => createProvider(model, { env: { ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: server.baseURL } });

  beforeAll(async () => {
    await server.start();
  });
  afterAll(() => server.stop());
  beforeEach(() => server.reset());

  it('streams text deltas in order; system prompt apart; max_tokens defaults to 4096; the key as the SDK sends it', async () => {
    server.script({ chunks: ['Bon', 'jour', ' !'] });
    const deltas: string[] = [];
    const out = await provider().complete({
      messages: [
        { role: 'system', content: 'Speak French.' },
        { role: 'user', content: 'Hello' },
      ],
      onDelta: (d) => deltas.push(d),
    });
    expect(deltas).toEqual(['Bon', 'jour', ' !']);
    expect(out).toMatchObject({ text: 'Bonjour !', stopReason: 'stop', toolCalls: [] });
    const [req] = server.requests;
    // @anthropic-ai/sdk 1.x sends an API key as a bearer token.
    expect(req!.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(req!.headers['anthropic-version']).toBeDefined();
    expect(req!.body).toMatchObject({
      model: 'claude-test',
      system: 'Speak French.',
      max_tokens: 4096,
      temperature: 0.5,
      stream: true,
      messages: [{ role: 'user', content: 'Hello' }],
    });
  });

  it('assembles tool_use blocks from input_json deltas and sends results back as tool_result blocks', async () => {
    server.script(
      {
        text: 'Let me look.',
        toolCalls: [
          { id: 'toolu_1', name: 'lookup_order', arguments: { order_id: '42' } },
          { id: 'toolu_2', name: 'lookup_order', arguments: { order_id: '43' } },
        ],
      },
      { text: 'Both shipped.' },
    );
    const first = await provider().complete({ messages: [{ role: 'user', content: 'Where are 42 and 43?' }], tools: [LOOKUP] });
    expect(first).toMatchObject({
      text: 'Let me look.',
      stopReason: 'tool_calls',
      toolCalls: [
        { id: 'toolu_1', name: 'lookup_order', arguments: '{"order_id":"42"}' },
        { id: 'toolu_2', name: 'lookup_order', arguments: '{"order_id":"43"}' },
      ],
    });
    expect(server.requests[0]!.body.tools).toEqual([{ name: 'lookup_order', description: 'Looks an order up', input_schema: LOOKUP.parameters }]);
    await provider().complete({
      messages: [
        { role: 'user', content: 'Where are 42 and 43?' },
        { role: 'assistant', content: first.text, toolCalls: first.toolCalls },
        { role: 'tool', toolCallId: 'toolu_1', name: 'lookup_order', content: '{"status":"shipped"}' },
        { role: 'tool', toolCallId: 'toolu_2', name: 'lookup_order', content: '{"error":"no such order"}', isError: true },
      ],
      tools: [LOOKUP],
    });
    expect(server.requests[1]!.body.messages).toEqual([
      { role: 'user', content: 'Where are 42 and 43?' },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Let me look.' },
          { type: 'tool_use', id: 'toolu_1', name: 'lookup_order', input: { order_id: '42' } },
          { type: 'tool_use', id: 'toolu_2', name: 'lookup_order', input: { order_id: '43' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_1', content: '{"status":"shipped"}' },
          { type: 'tool_result', tool_use_id: 'toolu_2', content: '{"error":"no such order"}', is_error: true },
        ],
      },
    ]);
  });

  it('types failures: 529 overloaded retryable, 400 not, one request each', async () => {
    server.script({ status: 529, message: 'Overloaded' }, { status: 400, message: 'messages: field required' });
    expect(await rejection(provider().complete({ messages: [{ role: 'user', content: 'x' }] }))).toMatchObject({ retryable: true, status: 529 });
    const bad = await rejection(provider().complete({ messages: [{ role: 'user', content: 'x' }] }));
    expect(bad).toMatchObject({ retryable: false, status: 400 });
    expect(bad.message).toContain('messages: field required');
    expect(server.requests).toHaveLength(2);
  });

  it('a call its caller aborts is not retryable (the SDK, imported on first use, names its abort)', async () => {
    server.script({ hang: true });
    const controller = new AbortController();
    const call = rejection(provider().complete({ messages: [{ role: 'user', content: 'x' }], signal: controller.signal }));
    await waitFor(() => server.requests.length === 1, 'the request at the server');
    controller.abort();
    expect(await call).toMatchObject({ retryable: false });
  });
});

describe('images in user messages, and embeddings', () => {
  const openai = new OpenAIScriptedServer();
  const anthropic = new AnthropicScriptedServer();
  const PNG = Buffer.from('a tiny picture').toString('base64');
  const withImage: ChatMessage = {
    role: 'user',
    content: [
      { type: 'text', text: 'What is this?' },
      { type: 'image', mimeType: 'image/png', data: PNG },
    ],
  };

  beforeAll(async () => {
    await openai.start();
    await anthropic.start();
  });
  afterAll(async () => {
    await openai.stop();
    await anthropic.stop();
  });

  it('sends an image as an image_url data URL to OpenAI and as a base64 image block to Anthropic', async () => {
    openai.script({ text: 'a picture' });
    anthropic.script({ text: 'a picture' });
    await createProvider({ provider: 'openai', name: 'm', base_url: openai.baseURL }, { env: {} }).complete({ messages: [withImage] });
    await createProvider({ provider: 'anthropic', name: 'c' }, { env: { ANTHROPIC_BASE_URL: anthropic.baseURL } }).complete({ messages: [withImage] });
    expect((openai.requests[0]!.body.messages as unknown[])[0]).toEqual({
      role: 'user',
      content: [
        { type: 'text', text: 'What is this?' },
        { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } },
      ],
    });
    expect((anthropic.requests[0]!.body.messages as unknown[])[0]).toEqual({
      role: 'user',
      content: [
        { type: 'text', text: 'What is this?' },
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } },
      ],
    });
  });

  it('embeds through the embeddings endpoint (asking for floats), also at an Azure deployment', async () => {
    const embedder = createEmbeddingProvider({ provider: 'openai', name: 'chat', base_url: openai.baseURL }, 'embedder', { env: {} });
    const [tea, ship] = await embedder.embed(['green tea', 'ship to Canada']);
    expect(tea).toHaveLength(EMBEDDING_DIMS);
    bagOfWordsVector('green tea').forEach((x, i) => expect(tea![i]).toBeCloseTo(x, 6));
    bagOfWordsVector('ship to Canada').forEach((x, i) => expect(ship![i]).toBeCloseTo(x, 6));
    expect(openai.embeddingRequests).toEqual([{ model: 'embedder', input: ['green tea', 'ship to Canada'], encoding_format: 'float' }]);

    const azure = createEmbeddingProvider({ provider: 'azure_openai', name: 'chat-deployment' }, 'embedding-deployment', {
      env: { AZURE_OPENAI_ENDPOINT: openai.url, AZURE_OPENAI_API_KEY: 'azure-key-123' },
    });
    await azure.embed(['green tea']);
    expect(openai.embeddingRequests.at(-1)).toEqual({ model: 'embedding-deployment', input: ['green tea'], encoding_format: 'float' });

    // The SDK retries embeddings itself (they run at start, outside the model loop's retries).
    const before = openai.embeddingRequests.length;
    openai.embeddingFailures.push(429);
    expect(await embedder.embed(['x'])).toHaveLength(1);
    expect(openai.embeddingRequests.length - before).toBe(2);
    openai.embeddingFailures.push(400);
    expect(await rejection(embedder.embed(['x']))).toMatchObject({ retryable: false, status: 400 });

    // Whatever encoding the server picks, the numbers come back the same; one it cannot read is not retried.
    openai.embeddingEncoding = 'base64';
    const [fromBase64] = await embedder.embed(['green tea']);
    bagOfWordsVector('green tea').forEach((x, i) => expect(fromBase64![i]).toBeCloseTo(x, 6));
    openai.embeddingEncoding = 'asked';
    expect(decodeEmbedding(base64Floats([1.5, -2, 0.25]), 'test', 0)).toEqual([1.5, -2, 0.25]);
    expect(() => decodeEmbedding('not base64!', 'test', 3)).toThrow(
      'test: embedding 3 is a string that is not base64 float32s (11 characters), not a list of numbers',
    );
    expect(() => decodeEmbedding('AAA=', 'test', 0)).toThrow(/not base64 float32s/);
    expect(() => decodeEmbedding({ values: [1] }, 'test', 1)).toThrow('test: embedding 1 is object, not a list of numbers');
  });
});
