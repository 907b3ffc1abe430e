/**
 * Anthropic messages through the official `@anthropic-ai/sdk`, streaming: text deltas go to `onDelta`
 * as they arrive; tool_use blocks are assembled from their `input_json_delta`s. System messages become
 * the `system` field, tool results a user turn of `tool_result` blocks. The SDK's own retries are off —
 * the model loop retries with backoff. The SDK is an optional package (config/optional.ts): the provider
 * checks it is installed when it is made, and imports it on the first call.
 */
import type Anthropic from '@anthropic-ai/sdk';
import type {
  ContentBlockParam,
  MessageCreateParamsStreaming,
  MessageParam,
  RawMessageStreamEvent,
  ToolResultBlockParam,
} from '@anthropic-ai/sdk/resources/messages';
import type { ModelConfig } from '../../config/agent.js';
import type { ChatMessage, Completion, CompletionRequest, ModelProvider, StopReason } from '../../model/types.js';
import { OPTIONAL_FEATURES } from '../../config/optional.js';
import { importOptional, requireInstalled } from '../optional.js';
import { toModelCallError } from './errors.js';

/** Where the SDK sends requests when no base URL is set. */
const ANTHROPIC_API = 'https://api.anthropic.com';

/** Anthropic requires max_tokens; this is used when the agent.yaml does not set it. */
const ANTHROPIC_DEFAULT_MAX_TOKENS = 4096;

export interface AnthropicProviderOptions {
  config: ModelConfig;
  apiKey: string;
  baseURL?: string;
  timeoutMs: number;
  maxRetries: number;
  /** Where the model block is, for error messages. */
  where?: string;
}

function parseInput(args: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(args || '{}');
    return value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

function toAnthropic(messages: ChatMessage[]): { system: string; messages: MessageParam[] } {
  const system: string[] = [];
  const out: MessageParam[] = [];
  for (const m of messages) {
    if (m.role === 'system') system.push(m.content);
    else if (m.role === 'user') {
      out.push({
        role: 'user',
        content:
          typeof m.content === 'string'
            ? m.content
            : m.content.map((p): ContentBlockParam =>
                p.type === 'text'
                  ? { type: 'text', text: p.text }
                  : {
                      type: 'image',
                      source: { type: 'base64', media_type: p.mimeType as 'image/png' | 'image/jpeg' | 'image/gif' | 'image/webp', data: p.data },
                    },
              ),
      });
    } else if (m.role === 'assistant') {
      const blocks: ContentBlockParam[] = [];
      if (m.content) blocks.push({ type: 'text', text: m.content });
      for (const c of m.toolCalls ?? []) blocks.push({ type: 'tool_use', id: c.id, name: c.name, input: parseInput(c.arguments) });
      out.push({ role: 'assistant', content: blocks.length ? blocks : m.content });
    } else {
      const result: ToolResultBlockParam = { type: 'tool_result', tool_use_id: m.toolCallId, content: m.content, ...(m.isError ? { is_error: true } : {}) };
      const last = out.at(-1);
      // All results of one round go back in one user turn.
      if (last?.role === 'user' && Array.isArray(last.content) && last.content.every((b) => b.type === 'tool_result')) last.content.push(result);
      else out.push({ role: 'user', content: [result] });
    }
  }
  return { system: system.join('\n\n'), messages: out };
}

function stopReason(reason: string | null | undefined): StopReason {
  switch (reason) {
    case 'end_turn':
    case 'stop_sequence':
      return 'stop';
    case 'tool_use':
      return 'tool_calls';
    case 'max_tokens':
      return 'length';
    case 'refusal':
      return 'content_filter';
    default:
      return 'other';
  }
}

export class AnthropicProvider implements ModelProvider {
  readonly provider = 'anthropic' as const;
  readonly model: string;
  readonly endpoint: string;
  private sdk?: Promise<{ client: Anthropic; abortError: typeof Anthropic.APIUserAbortError }>;

  /** Throws DEPENDENCY_MISSING when @anthropic-ai/sdk is not installed. */
  constructor(private readonly opts: AnthropicProviderOptions) {
    requireInstalled('anthropic', opts.where ?? 'model');
    this.model = opts.config.name;
    this.endpoint = opts.baseURL ?? ANTHROPIC_API;
  }

  private client(): Promise<{ client: Anthropic; abortError: typeof Anthropic.APIUserAbortError }> {
    this.sdk ??= importOptional<{ default: typeof Anthropic }>('@anthropic-ai/sdk', OPTIONAL_FEATURES.anthropic.feature).then(({ default: Sdk }) => ({
      client: new Sdk({
        apiKey: this.opts.apiKey,
        baseURL: this.endpoint,
        timeout: this.opts.timeoutMs,
        maxRetries: this.opts.maxRetries,
      }),
      abortError: Sdk.APIUserAbortError,
    }));
    return this.sdk;
  }

  async complete(req: CompletionRequest): Promise<Completion> {
    const { config } = this.opts;
    const { system, messages } = toAnthropic(req.messages);
    const params: MessageCreateParamsStreaming = {
      model: config.name,
      max_tokens: config.max_tokens ?? ANTHROPIC_DEFAULT_MAX_TOKENS,
      messages,
      stream: true,
      ...(system ? { system } : {}),
      ...(req.tools?.length ? { tools: req.tools.map((t) => ({ name: t.name, description: t.description, input_schema: { ...t.parameters } })) } : {}),
      ...(config.temperature !== undefined ? { temperature: config.temperature } : {}),
      ...(config.top_p !== undefined ? { top_p: config.top_p } : {}),
    };
    let text = '';
    let streamed = false;
    const blocks = new Map<number, { id: string; name: string; json: string }>();
    let reason: string | null | undefined;
    let usage: Completion['usage'];
    const { client, abortError } = await this.client();
    try {
      const stream = await client.messages.create(params, req.signal ? { signal: req.signal } : {});
      for await (const event of stream as AsyncIterable<RawMessageStreamEvent>) {
        switch (event.type) {
          case 'message_start':
            usage = { inputTokens: event.message.usage.input_tokens, outputTokens: event.message.usage.output_tokens };
            break;
          case 'content_block_start':
            if (event.content_block.type === 'tool_use') blocks.set(event.index, { id: event.content_block.id, name: event.content_block.name, json: '' });
            else if (event.content_block.type === 'text' && event.content_block.text) {
              text += event.content_block.text;
              streamed = true;
              req.onDelta?.(event.content_block.text);
            }
            break;
          case 'content_block_delta':
            if (event.delta.type === 'text_delta') {
              text += event.delta.text;
              streamed = true;
              req.onDelta?.(event.delta.text);
            } else if (event.delta.type === 'input_json_delta') {
              const block = blocks.get(event.index);
              if (block) block.json += event.delta.partial_json;
            }
            break;
          case 'message_delta':
            reason = event.delta.stop_reason;
            if (event.usage) usage = { ...usage, outputTokens: event.usage.output_tokens };
            break;
          default:
            break;
        }
      }
    } catch (err) {
      throw toModelCallError(err, `anthropic ${this.model}`, [this.opts.apiKey], streamed, abortError);
    }
    const toolCalls = [...blocks.entries()].sort(([a], [b]) => a - b).map(([, b]) => ({ id: b.id, name: b.name, arguments: b.json || '{}' }));
    return { text, toolCalls, stopReason: stopReason(reason), ...(usage ? { usage } : {}) };
  }
}
