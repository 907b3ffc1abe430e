/**
 * The provider-neutral shapes of a model conversation: what the model loop sends (messages, tools) and
 * what a provider returns (text, tool calls, why it stopped). Providers translate these to and from
 * their SDK's wire format; nothing else in Troupe sees an SDK type.
 */
import type { ModelConfig } from '../config/agent.js';

/** A piece of a user message with more than text: an image the model should see (base64 bytes). */
export type UserContentPart = { type: 'text'; text: string } | { type: 'image'; mimeType: string; data: string };

export type ChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string | UserContentPart[] }
  | { role: 'assistant'; content: string; toolCalls?: ToolCall[] }
  | { role: 'tool'; toolCallId: string; name: string; content: string; isError?: boolean };

/** One tool call the model asked for; `arguments` is the JSON text as the model wrote it. */
export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}

/** A JSON Schema object describing a tool's arguments. */
export interface JsonSchemaObject {
  type: 'object';
  properties: Record<string, unknown>;
  required?: string[];
  additionalProperties?: boolean;
}

export interface ToolDefinition {
  name: string;
  description: string;
  parameters: JsonSchemaObject;
}

/** A JSON Schema the answer must match, for providers that can be held to one (OpenAI's `response_format`). */
export interface ResponseFormat {
  name: string;
  schema: Record<string, unknown>;
}

export interface CompletionRequest {
  messages: ChatMessage[];
  tools?: ToolDefinition[];
  /** Ask for an answer that matches this schema, where the provider supports it (others ignore it). */
  responseFormat?: ResponseFormat;
  signal?: AbortSignal;
  /** Called with each text delta as it arrives, in order. */
  onDelta?: (text: string) => void;
}

export type StopReason = 'stop' | 'tool_calls' | 'length' | 'content_filter' | 'other';

export interface Completion {
  text: string;
  toolCalls: ToolCall[];
  stopReason: StopReason;
  usage?: { inputTokens?: number; outputTokens?: number };
}

export interface ModelProvider {
  readonly provider: ModelConfig['provider'];
  readonly model: string;
  /** Where requests go (a URL; never a key). */
  readonly endpoint: string;
  /** Streams one completion. Throws ModelCallError. */
  complete(request: CompletionRequest): Promise<Completion>;
}

/** A model behind an embeddings endpoint (OpenAI's `/embeddings`, Azure's deployments). */
export interface EmbeddingProvider {
  readonly model: string;
  readonly endpoint: string;
  /** One vector per text, in order. Throws ModelCallError. */
  embed(texts: string[], signal?: AbortSignal): Promise<number[][]>;
}

/** A failed model call, with what the caller needs to decide whether to retry. */
export class ModelCallError extends Error {
  override readonly name = 'ModelCallError';
  constructor(
    message: string,
    readonly retryable: boolean,
    readonly status?: number,
    /** The server's Retry-After, when it sent one. */
    readonly retryAfterMs?: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
