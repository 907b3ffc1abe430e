/**
 * Local HTTP servers that speak real model-provider wire formats, scripted per test: the OpenAI chat
 * completions API (JSON and SSE streaming with tool-call deltas; also under Azure's deployment paths)
 * and the Anthropic messages API (SSE with text and input_json deltas). The official SDKs talk to them
 * exactly as they talk to the real services; nothing of Troupe is replaced.
 *
 *   const openai = await new OpenAIScriptedServer().start();
 *   openai.script({ text: 'Hello there' }, { toolCalls: [{ name: 'lookup', arguments: { id: 7 } }] }, { status: 500 });
 *   // OPENAI_BASE_URL = openai.baseURL ; every request is kept in openai.requests
 *
 * Each request takes the next step of its model's script (`scriptFor(model, …)`), else of the default
 * script; a request with no step left gets HTTP 500 saying so, and is listed in `unexpected`.
 *
 * The OpenAI server also answers the embeddings API (`/v1/embeddings`) with deterministic bag-of-words
 * vectors (`bagOfWordsVector`): texts that share words are near, so a search over them ranks like a
 * keyword search, and every request is kept in `embeddingRequests`. It answers in the encoding asked
 * for (float arrays, or base64 float32s) unless `embeddingEncoding` makes it answer one regardless, as
 * some compatible servers do; `embeddingDims` sets the dimension (a server whose model changed) and
 * `mangleEmbedding` breaks vectors on the way out (NaN, a wrong length, zeros).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Dimensions of the scripted embeddings. */
export const EMBEDDING_DIMS = 256;
const STOPWORDS = new Set(
  'a an and are as at be by can do does for from how i in is it its my of on or should the to what when where which who why with you your'.split(' '),
);

/** The words of a text as the scripted embeddings see them: lower case, no stopwords, a plural `s` dropped. */
function embeddingWords(text: string): string[] {
  return (text.toLowerCase().match(/[a-z0-9]+/g) ?? [])
    .filter((w) => !STOPWORDS.has(w))
    .map((w) => (w.length > 3 && w.endsWith('s') && !w.endsWith('ss') ? w.slice(0, -1) : w));
}

/** A deterministic embedding: each word hashed (FNV-1a) into one of `dims` buckets, L2-normalised. */
export function bagOfWordsVector(text: string, dims = EMBEDDING_DIMS): number[] {
  const v = new Array<number>(dims).fill(0);
  for (const word of embeddingWords(text)) {
    let h = 0x811c9dc5;
    for (let i = 0; i < word.length; i++) h = Math.imul(h ^ word.charCodeAt(i), 0x01000193) >>> 0;
    v[h % dims]! += 1;
  }
  const norm = Math.hypot(...v);
  // An empty text still needs a unit vector: a fixed bucket no word is likely to share.
  if (norm === 0) v[dims - 1] = 1;
  return norm === 0 ? v : v.map((x) => x / norm);
}

/** Little-endian float32s in base64: the OpenAI API's `encoding_format: "base64"`. */
export function base64Floats(vector: number[]): string {
  return Buffer.from(new Float32Array(vector).buffer).toString('base64');
}

interface ScriptedToolCall {
  id?: string;
  name: string;
  /** An object (sent as JSON) or the raw argument text (e.g. invalid JSON). */
  arguments: unknown;
}

export type ScriptStep =
  /**
   * An answer: text (streamed as `chunks` when given, else word by word) and/or tool calls. With
   * `dropConnection` the stream breaks off after the text (a connection lost mid-answer). `usage`: the
   * tokens the answer reports (default 10 in, 5 out; OpenAI streams send them when the request asks,
   * `stream_options.include_usage`).
   */
  | { text?: string; chunks?: string[]; toolCalls?: ScriptedToolCall[]; stop?: string; dropConnection?: boolean; usage?: { input: number; output: number } }
  /** An HTTP error with the provider's error body. */
  | { status: number; message?: string; headers?: Record<string, string> }
  /** Answers with `then` once `gate` resolves (the request is visible in `requests` meanwhile). */
  | { gate: Promise<unknown>; then: ScriptStep }
  /** Never answers (until the client gives up or the server stops). */
  | { hang: true };

export interface SeenRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: Record<string, unknown>;
  /** The `model` of the body, or the Azure deployment of the path. */
  model: string;
  at: number;
}

/** Text split into word-sized deltas (spaces kept), so a stream has several chunks in order. */
function wordChunks(text: string): string[] {
  return text.match(/\S+\s*|\s+/g) ?? (text ? [text] : []);
}

function argumentText(args: unknown): string {
  return typeof args === 'string' ? args : JSON.stringify(args ?? {});
}

/** Splits a string into `n` roughly equal pieces (argument deltas arrive in pieces on the real wire). */
function pieces(text: string, n = 3): string[] {
  if (text.length < n) return [text];
  const size = Math.ceil(text.length / n);
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

abstract class ScriptedServer {
  readonly requests: SeenRequest[] = [];
  /** Requests that found no step left. */
  readonly unexpected: SeenRequest[] = [];
  private server?: Server;
  private readonly queues = new Map<string, ScriptStep[]>();
  private responder?: (req: SeenRequest) => ScriptStep | Promise<ScriptStep>;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res).catch((err: unknown) => this.fail(res, err)));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    const { port } = this.server.address() as AddressInfo;
    this.url = `http://127.0.0.1:${port}`;
    return this;
  }

  async stop(): Promise<void> {
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server!.close(() => resolve()));
    this.server = undefined;
  }

  /** Replaces the default script (used by requests for any model without a script of its own). */
  script(...steps: ScriptStep[]): this {
    this.queues.set('', [...steps]);
    return this;
  }

  /** Replaces the script of one model (or Azure deployment). */
  scriptFor(model: string, ...steps: ScriptStep[]): this {
    this.queues.set(model, [...steps]);
    return this;
  }

  /** Answers every request with whatever `fn` returns (after the scripts are used up). */
  respondWith(fn: (req: SeenRequest) => ScriptStep | Promise<ScriptStep>): this {
    this.responder = fn;
    return this;
  }

  reset(): this {
    this.requests.length = 0;
    this.unexpected.length = 0;
    this.queues.clear();
    this.responder = undefined;
    return this;
  }

  /** Requests for one model. */
  requestsFor(model: string): SeenRequest[] {
    return this.requests.filter((r) => r.model === model);
  }

  /** Requests a subclass answers itself, outside the scripts (true when it did). */
  protected direct(_path: string, _body: Record<string, unknown>, _res: ServerResponse): boolean {
    return false;
  }

  protected abstract route(path: string): { model?: string } | undefined;
  protected abstract answer(
    req: SeenRequest,
    step: Exclude<ScriptStep, { status: number } | { gate: Promise<unknown> } | { hang: true }>,
    res: ServerResponse,
  ): void;
  protected abstract errorBody(status: number, message: string): unknown;

  private fail(res: ServerResponse, err: unknown): void {
    if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
    res.end(JSON.stringify(this.errorBody(500, `scripted server failed: ${String(err)}`)));
  }

  private nextStep(req: SeenRequest): ScriptStep | Promise<ScriptStep> | undefined {
    const own = this.queues.get(req.model);
    if (own?.length) return own.shift();
    const shared = this.queues.get('');
    if (shared?.length) return shared.shift();
    return this.responder?.(req);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const path = (req.url ?? '/').split('?')[0]!;
    const body = req.method === 'POST' ? (JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Record<string, unknown>) : {};
    if (req.method === 'POST' && this.direct(path, body, res)) return;
    const match = req.method === 'POST' ? this.route(path) : undefined;
    if (!match) {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify(this.errorBody(404, `no route ${req.method} ${path}`)));
      return;
    }
    const seen: SeenRequest = {
      method: req.method!,
      path,
      headers: req.headers,
      body,
      model: match.model ?? String(body.model ?? ''),
      at: this.requests.length,
    };
    this.requests.push(seen);
    let step = await this.nextStep(seen);
    if (!step) {
      this.unexpected.push(seen);
      res
        .writeHead(500, { 'content-type': 'application/json' })
        .end(JSON.stringify(this.errorBody(500, `scripted server: no step left for request ${seen.at}`)));
      return;
    }
    while ('gate' in step) {
      await step.gate;
      step = step.then;
    }
    if ('hang' in step) return;
    if ('status' in step) {
      res
        .writeHead(step.status, { 'content-type': 'application/json', ...step.headers })
        .end(JSON.stringify(this.errorBody(step.status, step.message ?? `scripted ${step.status}`)));
      return;
    }
    this.answer(seen, step, res);
  }
}

type AnswerStep = Extract<ScriptStep, { dropConnection?: boolean }>;

/** OpenAI chat completions at `/v1/chat/completions`, and Azure's `/openai/deployments/<d>/chat/completions`. */
export class OpenAIScriptedServer extends ScriptedServer {
  /** Every embeddings request: the model (or Azure deployment), its input texts and the encoding it asked for. */
  readonly embeddingRequests: Array<{ model: string; input: string[]; encoding_format?: unknown }> = [];
  /** HTTP statuses the next embeddings requests fail with, in order. */
  readonly embeddingFailures: number[] = [];
  /** `asked`: the encoding the request names (the API's default, float, when none); else always this one. */
  embeddingEncoding: 'asked' | 'float' | 'base64' = 'asked';
  /** The dimension of the vectors answered. */
  embeddingDims = EMBEDDING_DIMS;
  /** Changes a vector before it is sent (NaN goes out as `null` in a float answer, as JSON has no NaN). */
  mangleEmbedding?: (vector: number[], text: string, index: number) => number[];

  /** For OPENAI_BASE_URL / `base_url`. */
  get baseURL(): string {
    return `${this.url}/v1`;
  }

  override reset(): this {
    this.embeddingRequests.length = 0;
    this.embeddingFailures.length = 0;
    this.embeddingEncoding = 'asked';
    this.embeddingDims = EMBEDDING_DIMS;
    this.mangleEmbedding = undefined;
    return super.reset();
  }

  protected override direct(path: string, body: Record<string, unknown>, res: ServerResponse): boolean {
    const azure = /^\/openai\/deployments\/([^/]+)\/embeddings$/.exec(path);
    if (path !== '/v1/embeddings' && !azure) return false;
    const model = azure ? decodeURIComponent(azure[1]!) : String(body.model ?? '');
    const input = (Array.isArray(body.input) ? body.input : [body.input]).map(String);
    this.embeddingRequests.push({ model, input, ...(body.encoding_format !== undefined ? { encoding_format: body.encoding_format } : {}) });
    const failure = this.embeddingFailures.shift();
    if (failure !== undefined) {
      res.writeHead(failure, { 'content-type': 'application/json' }).end(JSON.stringify(this.errorBody(failure, `scripted embeddings ${failure}`)));
      return true;
    }
    const encoding = this.embeddingEncoding === 'asked' ? (body.encoding_format === 'base64' ? 'base64' : 'float') : this.embeddingEncoding;
    const data = input.map((text, index) => {
      const clean = bagOfWordsVector(text, this.embeddingDims);
      const vector = this.mangleEmbedding ? this.mangleEmbedding(clean, text, index) : clean;
      return { object: 'embedding', index, embedding: encoding === 'base64' ? base64Floats(vector) : vector };
    });
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ object: 'list', data, model, usage: { prompt_tokens: input.length, total_tokens: input.length } }));
    return true;
  }

  protected route(path: string): { model?: string } | undefined {
    if (path === '/v1/chat/completions') return {};
    const azure = /^\/openai\/deployments\/([^/]+)\/chat\/completions$/.exec(path);
    return azure ? { model: decodeURIComponent(azure[1]!) } : undefined;
  }

  protected errorBody(status: number, message: string): unknown {
    return { error: { message, type: status === 429 ? 'rate_limit_exceeded' : 'server_error', code: null } };
  }

  protected answer(req: SeenRequest, step: AnswerStep, res: ServerResponse): void {
    const id = `chatcmpl-${req.at}`;
    const created = Math.floor(Date.now() / 1000);
    const calls = (step.toolCalls ?? []).map((c, i) => ({ id: c.id ?? `call_${req.at}_${i}`, name: c.name, arguments: argumentText(c.arguments) }));
    const finish = step.stop ?? (calls.length ? 'tool_calls' : 'stop');
    if (req.body.stream !== true) {
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          id,
          object: 'chat.completion',
          created,
          model: req.model,
          choices: [
            {
              index: 0,
              message: {
                role: 'assistant',
                content: step.text ?? null,
                ...(calls.length ? { tool_calls: calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })) } : {}),
              },
              finish_reason: finish,
            },
          ],
          usage: {
            prompt_tokens: step.usage?.input ?? 10,
            completion_tokens: step.usage?.output ?? 5,
            total_tokens: (step.usage?.input ?? 10) + (step.usage?.output ?? 5),
          },
        }),
      );
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const send = (delta: unknown, finishReason: string | null = null) =>
      res.write(
        `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: req.model, choices: [{ index: 0, delta, finish_reason: finishReason }] })}\n\n`,
      );
    send({ role: 'assistant', content: '' });
    for (const chunk of step.chunks ?? wordChunks(step.text ?? '')) send({ content: chunk });
    if (step.dropConnection) {
      // Ends the TCP stream after the written chunks, without the final chunk of the HTTP body.
      res.socket?.end();
      return;
    }
    calls.forEach((c, index) => {
      send({ tool_calls: [{ index, id: c.id, type: 'function', function: { name: c.name, arguments: '' } }] });
      for (const piece of pieces(c.arguments)) send({ tool_calls: [{ index, function: { arguments: piece } }] });
    });
    send({}, finish);
    if ((req.body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true) {
      const [input, output] = [step.usage?.input ?? 10, step.usage?.output ?? 5];
      res.write(
        `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: req.model, choices: [], usage: { prompt_tokens: input, completion_tokens: output, total_tokens: input + output } })}\n\n`,
      );
    }
    res.end('data: [DONE]\n\n');
  }
}

/** Anthropic messages at `/v1/messages` (streaming and not). */
export class AnthropicScriptedServer extends ScriptedServer {
  /** For ANTHROPIC_BASE_URL / `base_url` (the SDK adds /v1/messages). */
  get baseURL(): string {
    return this.url;
  }

  protected route(path: string): { model?: string } | undefined {
    return path === '/v1/messages' ? {} : undefined;
  }

  protected errorBody(status: number, message: string): unknown {
    const type = status === 429 ? 'rate_limit_error' : status === 529 ? 'overloaded_error' : status >= 500 ? 'api_error' : 'invalid_request_error';
    return { type: 'error', error: { type, message } };
  }

  protected answer(req: SeenRequest, step: AnswerStep, res: ServerResponse): void {
    const id = `msg_${req.at}`;
    const calls = (step.toolCalls ?? []).map((c, i) => ({ id: c.id ?? `toolu_${req.at}_${i}`, name: c.name, arguments: argumentText(c.arguments) }));
    const stop = step.stop ?? (calls.length ? 'tool_use' : 'end_turn');
    const usage = { input_tokens: step.usage?.input ?? 10, output_tokens: step.usage?.output ?? 5 };
    if (req.body.stream !== true) {
      const content = [
        ...(step.text ? [{ type: 'text', text: step.text }] : []),
        ...calls.map((c) => ({ type: 'tool_use', id: c.id, name: c.name, input: JSON.parse(c.arguments) as unknown })),
      ];
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ id, type: 'message', role: 'assistant', model: req.model, content, stop_reason: stop, stop_sequence: null, usage }));
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const send = (event: string, data: Record<string, unknown>) => res.write(`event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`);
    send('message_start', {
      message: {
        id,
        type: 'message',
        role: 'assistant',
        content: [],
        model: req.model,
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: usage.input_tokens, output_tokens: 1 },
      },
    });
    send('ping', {});
    let index = 0;
    const chunks = step.chunks ?? wordChunks(step.text ?? '');
    if (chunks.length) {
      send('content_block_start', { index, content_block: { type: 'text', text: '' } });
      for (const text of chunks) send('content_block_delta', { index, delta: { type: 'text_delta', text } });
      send('content_block_stop', { index });
      index++;
    }
    if (step.dropConnection) {
      // Ends the TCP stream after the written chunks, without the final chunk of the HTTP body.
      res.socket?.end();
      return;
    }
    for (const c of calls) {
      send('content_block_start', { index, content_block: { type: 'tool_use', id: c.id, name: c.name, input: {} } });
      for (const piece of pieces(c.arguments)) send('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: piece } });
      send('content_block_stop', { index });
      index++;
    }
    send('message_delta', { delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: usage.output_tokens } });
    send('message_stop', {});
    res.end();
  }
}
