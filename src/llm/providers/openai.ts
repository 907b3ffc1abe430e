/**
 * OpenAI chat completions through the official `openai` SDK: api.openai.com, Azure OpenAI (the SDK's
 * AzureOpenAI client) and any OpenAI-compatible server (`base_url`: vLLM, Ollama, llama.cpp, LM Studio).
 * Always streams: text deltas go to `onDelta` as they arrive; tool-call deltas are assembled by index.
 * The SDK's own retries are off — the model loop retries (visible in its state) with backoff.
 */
import OpenAI, { AzureOpenAI } from 'openai';
import type { ChatCompletionChunk, ChatCompletionCreateParamsStreaming, ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import type { ModelConfig } from '../../config/agent.js';
import {
  ModelCallError,
  type ChatMessage,
  type Completion,
  type CompletionRequest,
  type EmbeddingProvider,
  type ModelProvider,
  type StopReason,
  type ToolCall,
} from '../../model/types.js';
import { toModelCallError } from './errors.js';

export interface OpenAIProviderOptions {
  config: ModelConfig;
  apiKey: string;
  /** openai: the API root (…/v1); azure_openai: the resource endpoint. */
  baseURL?: string;
  /** azure_openai only. */
  apiVersion?: string;
  timeoutMs: number;
  /** Retries inside the SDK (0 when the caller retries). */
  maxRetries: number;
}

function toOpenAIMessages(messages: ChatMessage[]): ChatCompletionMessageParam[] {
  return messages.map((m): ChatCompletionMessageParam => {
    switch (m.role) {
      case 'assistant':
        return m.toolCalls?.length
          ? {
              role: 'assistant',
              content: m.content || null,
              tool_calls: m.toolCalls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } })),
            }
          : { role: 'assistant', content: m.content };
      case 'tool':
        return { role: 'tool', tool_call_id: m.toolCallId, content: m.content };
      case 'user':
        return typeof m.content === 'string'
          ? { role: 'user', content: m.content }
          : {
              role: 'user',
              content: m.content.map((p) =>
                p.type === 'text'
                  ? { type: 'text' as const, text: p.text }
                  : { type: 'image_url' as const, image_url: { url: `data:${p.mimeType};base64,${p.data}` } },
              ),
            };
      default:
        return { role: m.role, content: m.content };
    }
  });
}

function stopReason(finish: string | null | undefined): StopReason {
  switch (finish) {
    case 'stop':
    case 'length':
    case 'content_filter':
    case 'tool_calls':
      return finish;
    case 'function_call':
      return 'tool_calls';
    default:
      return 'other';
  }
}

/**
 * One embedding as numbers: a JSON array as it is (null and other non-numbers kept, for the caller's
 * check to name), or base64 of little-endian float32s, the OpenAI API's other encoding.
 */
export function decodeEmbedding(embedding: unknown, where: string, index: number): number[] {
  if (Array.isArray(embedding)) return embedding as number[];
  if (typeof embedding === 'string' && /^[A-Za-z0-9+/]*={0,2}$/.test(embedding)) {
    const bytes = Buffer.from(embedding, 'base64');
    if (bytes.length > 0 && bytes.length % 4 === 0) {
      const out = new Array<number>(bytes.length / 4);
      for (let i = 0; i < out.length; i++) out[i] = bytes.readFloatLE(i * 4);
      return out;
    }
  }
  const kind =
    typeof embedding === 'string' ? `a string that is not base64 float32s (${embedding.length} characters)` : embedding === null ? 'null' : typeof embedding;
  throw new ModelCallError(`${where}: embedding ${index} is ${kind}, not a list of numbers`, false);
}

export class OpenAIProvider implements ModelProvider, EmbeddingProvider {
  readonly provider: ModelConfig['provider'];
  readonly model: string;
  readonly endpoint: string;
  private readonly client: OpenAI;
  private readonly secret: string;

  constructor(private readonly opts: OpenAIProviderOptions) {
    this.provider = opts.config.provider;
    this.model = opts.config.name;
    this.secret = opts.apiKey;
    if (opts.config.provider === 'azure_openai') {
      this.client = new AzureOpenAI({
        apiKey: opts.apiKey,
        endpoint: opts.baseURL,
        apiVersion: opts.apiVersion,
        deployment: opts.config.name,
        timeout: opts.timeoutMs,
        maxRetries: opts.maxRetries,
      });
    } else {
      this.client = new OpenAI({
        apiKey: opts.apiKey,
        ...(opts.baseURL ? { baseURL: opts.baseURL } : {}),
        timeout: opts.timeoutMs,
        maxRetries: opts.maxRetries,
      });
    }
    this.endpoint = this.client.baseURL;
  }

  /**
   * Embeddings of `texts` with this provider's model (for Azure: its deployment). Floats are asked for
   * explicitly — left alone, the SDK asks for base64 and decodes whatever comes back as base64, which
   * turns the float arrays some compatible servers send anyway into garbage — and either answer is read.
   * Whether the numbers make sense (finite, one dimension) is the caller's to check.
   */
  async embed(texts: string[], signal?: AbortSignal): Promise<number[][]> {
    let data: Array<{ index: number; embedding: unknown }>;
    try {
      const res = await this.client.embeddings.create({ model: this.model, input: texts, encoding_format: 'float' }, signal ? { signal } : {});
      data = res.data as Array<{ index: number; embedding: unknown }>;
    } catch (err) {
      throw toModelCallError(err, `${this.provider} embeddings ${this.model}`, [this.secret], false);
    }
    const where = `${this.provider} embeddings ${this.model}`;
    const vectors: number[][] = new Array<number[]>(texts.length);
    for (const item of Array.isArray(data) ? data : []) {
      if (!Number.isInteger(item?.index) || item.index < 0 || item.index >= texts.length) continue;
      vectors[item.index] = decodeEmbedding(item.embedding, where, item.index);
    }
    const missing = texts.findIndex((_, i) => vectors[i] === undefined);
    // A wrong answer is not retried: the server would give it again.
    if (missing !== -1)
      throw new ModelCallError(
        `${where}: the server returned ${Array.isArray(data) ? data.length : 0} embeddings for ${texts.length} texts (none for text ${missing})`,
        false,
      );
    return vectors;
  }

  async complete(req: CompletionRequest): Promise<Completion> {
    const { config } = this.opts;
    const params: ChatCompletionCreateParamsStreaming = {
      model: config.name,
      messages: toOpenAIMessages(req.messages),
      stream: true,
      // The usage comes in a last chunk of its own (OpenAI and most compatible servers).
      stream_options: { include_usage: true },
      ...(req.responseFormat
        ? {
            response_format: { type: 'json_schema' as const, json_schema: { name: req.responseFormat.name, schema: req.responseFormat.schema, strict: false } },
          }
        : {}),
      ...(req.tools?.length
        ? {
            tools: req.tools.map((t) => ({
              type: 'function' as const,
              function: { name: t.name, description: t.description, parameters: { ...t.parameters } },
            })),
          }
        : {}),
      ...(config.temperature !== undefined ? { temperature: config.temperature } : {}),
      ...(config.top_p !== undefined ? { top_p: config.top_p } : {}),
      ...(config.max_tokens !== undefined ? { max_tokens: config.max_tokens } : {}),
    };
    let text = '';
    let streamed = false;
    const calls: ToolCall[] = [];
    let finish: string | null | undefined;
    let usage: Completion['usage'];
    try {
      const stream = await this.client.chat.completions.create(params, req.signal ? { signal: req.signal } : {});
      for await (const chunk of stream as AsyncIterable<ChatCompletionChunk>) {
        if (chunk.usage) usage = { inputTokens: chunk.usage.prompt_tokens, outputTokens: chunk.usage.completion_tokens };
        const choice = chunk.choices?.[0];
        if (!choice) continue;
        const delta = choice.delta;
        if (delta?.content) {
          text += delta.content;
          streamed = true;
          req.onDelta?.(delta.content);
        }
        for (const part of delta?.tool_calls ?? []) {
          const slot = (calls[part.index] ??= { id: '', name: '', arguments: '' });
          if (part.id) slot.id = part.id;
          if (part.function?.name) slot.name = part.function.name;
          if (part.function?.arguments) slot.arguments += part.function.arguments;
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    } catch (err) {
      throw toModelCallError(err, `${this.provider} ${this.model}`, [this.secret], streamed);
    }
    // Some compatible servers leave ids out; the loop needs one per call to pair results with calls.
    const toolCalls = calls.filter(Boolean).map((c, i) => ({ ...c, id: c.id || `call_${i}` }));
    return { text, toolCalls, stopReason: toolCalls.length && finish !== 'length' ? 'tool_calls' : stopReason(finish), ...(usage ? { usage } : {}) };
  }
}
