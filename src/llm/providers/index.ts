/**
 * Builds a ModelProvider from an agent.yaml `model` block and the environment. Keys come only from the
 * environment — OPENAI_API_KEY, AZURE_OPENAI_API_KEY, ANTHROPIC_API_KEY — and endpoints from `base_url`
 * or OPENAI_BASE_URL, AZURE_OPENAI_ENDPOINT, ANTHROPIC_BASE_URL (Azure also reads OPENAI_API_VERSION).
 * A key is held by the SDK client only: never logged, persisted or put in an actor's context.
 *
 * A missing key is a CONFIG_INVALID error at start, naming the variable. With a base URL and no key, a
 * placeholder is sent: local OpenAI-compatible servers (Ollama, vLLM, llama.cpp) need none.
 */
import type { ModelConfig } from '../../config/agent.js';
import { TroupeError } from '../../protocol/errors.js';
import type { EmbeddingProvider, ModelProvider } from '../../model/types.js';
import { AnthropicProvider } from './anthropic.js';
import { OpenAIProvider } from './openai.js';

const DEFAULT_AZURE_API_VERSION = '2024-10-21';
/** Sent as the key to a server at a base URL when no key is set (local servers ignore it). */
const NO_KEY = 'no-key';

export interface ProviderOptions {
  env?: NodeJS.ProcessEnv;
  /** Per request, the whole stream included. Default 120 s. */
  timeoutMs?: number;
  /** Retries inside the SDK; 0 (the default) when the caller retries, as the model loop does. */
  maxRetries?: number;
  /** Where the model block is, for error messages (e.g. `tools[2].model`). */
  where?: string;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value && value.trim() ? value.trim() : undefined;
}

export function createProvider(config: ModelConfig, opts: ProviderOptions = {}): ModelProvider {
  const env = opts.env ?? process.env;
  const where = opts.where ?? 'model';
  const common = { config, timeoutMs: opts.timeoutMs ?? 120_000, maxRetries: opts.maxRetries ?? 0 };
  switch (config.provider) {
    case 'openai': {
      const baseURL = config.base_url ?? nonEmpty(env.OPENAI_BASE_URL);
      const apiKey = nonEmpty(env.OPENAI_API_KEY) ?? (baseURL ? NO_KEY : undefined);
      if (!apiKey) {
        throw new TroupeError(
          'CONFIG_INVALID',
          `${where}: provider openai needs OPENAI_API_KEY in the environment (or ${where}.base_url / OPENAI_BASE_URL for a local OpenAI-compatible server)`,
        );
      }
      return new OpenAIProvider({ ...common, apiKey, ...(baseURL ? { baseURL } : {}) });
    }
    case 'azure_openai': {
      const endpoint = config.base_url ?? nonEmpty(env.AZURE_OPENAI_ENDPOINT);
      const apiKey = nonEmpty(env.AZURE_OPENAI_API_KEY);
      const missing = [...(endpoint ? [] : ['AZURE_OPENAI_ENDPOINT (or base_url)']), ...(apiKey ? [] : ['AZURE_OPENAI_API_KEY'])];
      if (missing.length) throw new TroupeError('CONFIG_INVALID', `${where}: provider azure_openai needs ${missing.join(' and ')} in the environment`);
      return new OpenAIProvider({ ...common, apiKey: apiKey!, baseURL: endpoint!, apiVersion: nonEmpty(env.OPENAI_API_VERSION) ?? DEFAULT_AZURE_API_VERSION });
    }
    case 'anthropic': {
      const baseURL = config.base_url ?? nonEmpty(env.ANTHROPIC_BASE_URL);
      const apiKey = nonEmpty(env.ANTHROPIC_API_KEY) ?? (baseURL ? NO_KEY : undefined);
      if (!apiKey) {
        throw new TroupeError(
          'CONFIG_INVALID',
          `${where}: provider anthropic needs ANTHROPIC_API_KEY in the environment (or ${where}.base_url / ANTHROPIC_BASE_URL)`,
        );
      }
      return new AnthropicProvider({ ...common, apiKey, where, ...(baseURL ? { baseURL } : {}) });
    }
  }
}

/** What a vectorstore embeds with when its agent.yaml names no embedding_model. */
export const DEFAULT_EMBEDDING_MODEL = 'text-embedding-3-small';

/**
 * The embeddings endpoint for an agent's model block: the same provider (openai, or azure_openai where
 * `model` is the embedding deployment) with the embedding model. Anthropic has no embeddings API, so an
 * anthropic agent embeds through OpenAI (or an OpenAI-compatible server) from OPENAI_BASE_URL /
 * OPENAI_API_KEY.
 */
export function createEmbeddingProvider(config: ModelConfig, model: string, opts: ProviderOptions = {}): EmbeddingProvider {
  const env = opts.env ?? process.env;
  if (config.provider === 'anthropic') {
    if (!nonEmpty(env.OPENAI_API_KEY) && !nonEmpty(env.OPENAI_BASE_URL)) {
      throw new TroupeError(
        'CONFIG_INVALID',
        `${opts.where ?? 'embedding_model'}: anthropic has no embeddings API; set OPENAI_API_KEY (or OPENAI_BASE_URL for an OpenAI-compatible server) to embed with ${model}`,
      );
    }
    return createProvider({ provider: 'openai', name: model }, { ...opts, maxRetries: opts.maxRetries ?? 2 }) as OpenAIProvider;
  }
  return createProvider(
    { provider: config.provider, name: model, ...(config.base_url ? { base_url: config.base_url } : {}) },
    { ...opts, maxRetries: opts.maxRetries ?? 2 },
  ) as OpenAIProvider;
}
