/**
 * A router policy that asks an LLM: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama,
 * llama.cpp server, LiteLLM...), called with the global `fetch`.
 *
 * The model gets the team (id, name, description, skills) and the message, and must answer with JSON
 * `{ agentId, confidence, reasoning, additionalAgents? }`. The answer is validated with zod
 * (RouterDecisionSchema) and the agent ids are checked against the team. An invalid answer, an HTTP error
 * (429 / 5xx), a network error or a timeout is retried up to `maxAttempts`; then, or at once for an HTTP error
 * that a retry cannot fix (400, 401, 403, 404, 422...), the policy throws ROUTER_FAILURE saying what went wrong.
 */
import { RouterDecisionSchema, TroupeError, describeZodError, type AgentCard, type RouterDecision } from '../protocol/index.js';
import { routingText, requireAgents, type RouterPolicy, type RouterPolicyInput } from './scoring.js';

export interface LlmRouterPolicyOptions {
  /** Base URL of the API, up to and including the version: `https://api.openai.com/v1`, `http://127.0.0.1:11434/v1`. */
  baseUrl: string;
  model: string;
  /** Sent as `Authorization: Bearer <apiKey>` when set. */
  apiKey?: string;
  /** Default 0.3. */
  temperature?: number;
  /** Default 300. */
  maxTokens?: number;
  /** Attempts in all, the first included. Default 3. */
  maxAttempts?: number;
  /** Per attempt. Default 15000. */
  timeoutMs?: number;
  /** Pause before a retry, doubled each time. Default 200. */
  retryDelayMs?: number;
  /** Earlier messages of the thread put in the prompt for context. Default 6. */
  historyMessages?: number;
  /** Extra headers (an OpenRouter referer, an Azure api-key...). */
  headers?: Record<string, string>;
}

interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** Why one attempt failed, and whether another attempt can help. */
class AttemptError extends Error {
  constructor(
    message: string,
    readonly retryable: boolean,
    /** The model's answer, when it answered something invalid: shown back to it on the retry. */
    readonly answer?: string,
  ) {
    super(message);
  }
}

const MAX_PROMPT_TEXT = 4000;

export class LlmRouterPolicy implements RouterPolicy {
  readonly name = 'llm';
  private readonly endpoint: string;
  private readonly temperature: number;
  private readonly maxTokens: number;
  private readonly maxAttempts: number;
  private readonly timeoutMs: number;
  private readonly retryDelayMs: number;
  private readonly historyMessages: number;

  constructor(private readonly options: LlmRouterPolicyOptions) {
    if (!options.baseUrl) throw new RangeError('LlmRouterPolicy needs a baseUrl');
    if (!options.model) throw new RangeError('LlmRouterPolicy needs a model');
    this.endpoint = `${options.baseUrl.replace(/\/+$/, '')}/chat/completions`;
    this.temperature = options.temperature ?? 0.3;
    this.maxTokens = options.maxTokens ?? 300;
    this.maxAttempts = Math.max(1, Math.floor(options.maxAttempts ?? 3));
    this.timeoutMs = options.timeoutMs ?? 15_000;
    this.retryDelayMs = Math.max(0, options.retryDelayMs ?? 200);
    this.historyMessages = Math.max(0, options.historyMessages ?? 6);
  }

  async decide(input: RouterPolicyInput): Promise<RouterDecision> {
    requireAgents(input.agents, this.name);
    const messages = buildPrompt(input, this.historyMessages);
    const failures: string[] = [];
    for (let attempt = 1; attempt <= this.maxAttempts; attempt++) {
      if (input.signal?.aborted) break;
      try {
        return await this.attempt(messages, input);
      } catch (err) {
        const failure = err instanceof AttemptError ? err : new AttemptError(String(err), true);
        failures.push(`attempt ${attempt}: ${failure.message}`);
        if (!failure.retryable) break;
        if (failure.answer !== undefined) {
          // Show the model its invalid answer and what was wrong with it.
          messages.push(
            { role: 'assistant', content: failure.answer },
            {
              role: 'user',
              content: `That answer is invalid: ${failure.message}. Reply with only the JSON object, using one of the listed agent ids.`,
            },
          );
        }
        if (attempt < this.maxAttempts && this.retryDelayMs > 0) await sleep(this.retryDelayMs * 2 ** (attempt - 1), input.signal);
      }
    }
    const aborted = input.signal?.aborted ? ' (aborted)' : '';
    throw new TroupeError(
      'ROUTER_FAILURE',
      `LLM router (${this.options.model} at ${this.endpoint}) gave no valid decision after ${failures.length} attempt(s)${aborted}: ${failures.join('; ')}`,
      { model: this.options.model, endpoint: this.endpoint, attempts: failures.length, failures },
    );
  }

  private async attempt(messages: ChatMessage[], input: RouterPolicyInput): Promise<RouterDecision> {
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const signal = input.signal ? AbortSignal.any([timeout, input.signal]) : timeout;
    let response: Response;
    let body: string;
    try {
      response = await fetch(this.endpoint, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json',
          ...(this.options.apiKey ? { authorization: `Bearer ${this.options.apiKey}` } : {}),
          ...this.options.headers,
        },
        body: JSON.stringify({
          model: this.options.model,
          messages,
          temperature: this.temperature,
          max_tokens: this.maxTokens,
          response_format: { type: 'json_object' },
        }),
        signal,
      });
      body = await response.text();
    } catch (err) {
      if (timeout.aborted) throw new AttemptError(`no answer within ${this.timeoutMs} ms`, true);
      if (input.signal?.aborted) throw new AttemptError('aborted by the caller', false);
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new AttemptError(`request failed: ${cause?.code ?? cause?.message ?? (err as Error).message}`, true);
    }
    if (!response.ok) {
      const retryable = response.status === 408 || response.status === 409 || response.status === 429 || response.status >= 500;
      throw new AttemptError(`HTTP ${response.status} ${response.statusText}: ${body.slice(0, 200)}`, retryable);
    }
    const content = readContent(body);
    return parseDecision(content, input.agents);
  }
}

/** The system and user messages for a routing request. */
export function buildPrompt(input: RouterPolicyInput, historyMessages = 6): ChatMessage[] {
  const team = input.agents.map(describeAgent).join('\n\n');
  const system = [
    'You are the router of a team of AI agents. Pick the agent that should answer the user\'s latest message.',
    '',
    'Agents:',
    team,
    '',
    'Answer with one JSON object and nothing else:',
    '{"agentId": "<id of the best agent>", "confidence": <0..1>, "reasoning": "<one sentence>", "additionalAgents": ["<id>", ...]}',
    '- agentId must be one of the ids above, exactly as written.',
    '- confidence: how sure you are that this agent (with the additional ones) is right. Below 0.7 means the',
    '  message is ambiguous or no agent fits, and the user will be asked to clarify.',
    '- additionalAgents: only when the message asks several agents for different things; otherwise omit it.',
  ].join('\n');
  const history = (input.history ?? [])
    .filter((m) => m.messageId !== input.message.messageId)
    .slice(-historyMessages)
    .map((m) => `${m.role}: ${clip(routingText(m), 500)}`);
  const user = [
    history.length ? `Earlier in the conversation:\n${history.join('\n')}\n` : '',
    `Latest user message:\n${clip(routingText(input.message), MAX_PROMPT_TEXT)}`,
  ].join('');
  return [
    { role: 'system', content: system },
    { role: 'user', content: user },
  ];
}

function describeAgent(card: AgentCard): string {
  const lines = [`- id: ${card.id}`, `  name: ${card.name}`, `  description: ${card.description}`];
  for (const skill of card.skills) {
    const tags = skill.tags.length ? ` [${skill.tags.join(', ')}]` : '';
    const examples = skill.examples?.length ? ` e.g. ${skill.examples.map((e) => JSON.stringify(e)).join(', ')}` : '';
    lines.push(`  skill ${skill.name}: ${skill.description}${tags}${examples}`);
  }
  return lines.join('\n');
}

/** `choices[0].message.content` of a chat-completions response body. */
function readContent(body: string): string {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    throw new AttemptError(`the response body is not JSON: ${body.slice(0, 200)}`, true);
  }
  const choice = (json as { choices?: Array<{ message?: { content?: unknown } }> } | null)?.choices?.[0];
  const content = choice?.message?.content;
  if (typeof content !== 'string' || content.trim() === '') {
    throw new AttemptError('the response has no choices[0].message.content', true);
  }
  return content;
}

/** Parses and checks the model's answer. Drops additional agents that are unknown, repeated or the primary. */
export function parseDecision(content: string, agents: readonly AgentCard[]): RouterDecision {
  let json: unknown;
  try {
    json = JSON.parse(stripFences(content));
  } catch {
    throw new AttemptError(`the answer is not JSON: ${clip(content, 200)}`, true, content);
  }
  const parsed = RouterDecisionSchema.safeParse(json);
  if (!parsed.success) throw new AttemptError(`the answer does not match the schema: ${describeZodError(parsed.error)}`, true, content);
  const ids = new Set(agents.map((a) => a.id));
  const decision = parsed.data;
  if (!ids.has(decision.agentId)) {
    throw new AttemptError(`agentId "${decision.agentId}" is not one of ${[...ids].join(', ')}`, true, content);
  }
  const additional = [...new Set(decision.additionalAgents ?? [])].filter((id) => id !== decision.agentId && ids.has(id));
  const result: RouterDecision = { agentId: decision.agentId, confidence: decision.confidence, reasoning: decision.reasoning };
  return additional.length ? { ...result, additionalAgents: additional } : result;
}

/** Models sometimes wrap JSON in a code fence even in JSON mode. */
function stripFences(content: string): string {
  const trimmed = content.trim();
  const fenced = /^```(?:json)?\s*([\s\S]*?)\s*```$/i.exec(trimmed);
  return fenced ? fenced[1]! : trimmed;
}

function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}...` : text;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
