/**
 * A router policy that asks an LLM through a ModelProvider (`createProvider` of a model block: openai,
 * azure_openai, anthropic, or any OpenAI-compatible server at a `base_url`); the provider's model block
 * sets the model, temperature and max tokens.
 *
 * The model gets the team (id, name, description, skills) and the message, and must answer with JSON
 * `{ agentId, confidence, reasoning, additionalAgents? }`. The answer is validated with zod
 * (RouterDecisionSchema) and the agent ids are checked against the team. An invalid answer, a call the
 * provider marks retryable (its one table of HTTP statuses, lost connections) or a timeout is retried up
 * to `maxAttempts`; then, or at once for a failure a retry cannot fix (400, 401, 403, 404, 422...), the
 * policy throws ROUTER_FAILURE saying what went wrong.
 */
import { RouterDecisionSchema, TroupeError, describeZodError, type AgentCard, type RouterDecision } from '../protocol/index.js';
import type { ModelProvider } from '../model/types.js';
import { routingText, requireAgents, type RouterPolicy, type RouterPolicyInput } from './policy.js';
import { DEFAULT_ROUTER_PROMPTS, type RouterPrompts } from '../config/router-prompts.js';

const DEFAULT_LLM_ROUTER_HISTORY = 10;

export interface LlmRouterPolicyOptions {
  /** The model to ask; its model block sets the model, temperature and max tokens. */
  provider: ModelProvider;
  /** Prompt pieces; each defaults to DEFAULT_ROUTER_PROMPTS. */
  prompts?: Partial<RouterPrompts>;
  /** Attempts in all, the first included. Default 3. */
  maxAttempts?: number;
  /** Per attempt. Default 15000. */
  timeoutMs?: number;
  /** Pause before a retry, doubled each time. Default 200. */
  retryDelayMs?: number;
  /** Earlier messages of the thread put in the prompt for context. Default 10. */
  historyMessages?: number;
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
  private readonly provider: ModelProvider;
  private readonly maxAttempts: number;
  private readonly timeoutMs: number;
  private readonly retryDelayMs: number;
  private readonly historyMessages: number;
  private readonly prompts: RouterPrompts;

  constructor(options: LlmRouterPolicyOptions) {
    if (!options.provider) throw new RangeError('LlmRouterPolicy needs a provider (createProvider of a model block)');
    this.provider = options.provider;
    this.prompts = { ...DEFAULT_ROUTER_PROMPTS, ...options.prompts };
    this.maxAttempts = Math.max(1, Math.floor(options.maxAttempts ?? 3));
    this.timeoutMs = options.timeoutMs ?? 15_000;
    this.retryDelayMs = Math.max(0, options.retryDelayMs ?? 200);
    this.historyMessages = Math.max(0, options.historyMessages ?? DEFAULT_LLM_ROUTER_HISTORY);
  }

  async decide(input: RouterPolicyInput): Promise<RouterDecision> {
    requireAgents(input.agents, this.name);
    const messages = buildPrompt(input, this.historyMessages, this.prompts);
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
      `LLM router (${this.provider.model} at ${this.provider.endpoint}) gave no valid decision after ${failures.length} attempt(s)${aborted}: ${failures.join('; ')}`,
      { model: this.provider.model, endpoint: this.provider.endpoint, attempts: failures.length, failures },
    );
  }

  /** One completion; the provider's errors become attempt errors (retryable as it says). */
  private async attempt(messages: ChatMessage[], input: RouterPolicyInput): Promise<RouterDecision> {
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const signal = input.signal ? AbortSignal.any([timeout, input.signal]) : timeout;
    let text: string;
    try {
      text = (await this.provider.complete({ messages, signal })).text;
    } catch (err) {
      if (timeout.aborted) throw new AttemptError(`no answer within ${this.timeoutMs} ms`, true);
      if (input.signal?.aborted) throw new AttemptError('aborted by the caller', false);
      // ModelCallError says whether a retry can help (the provider's table of retryable statuses).
      throw new AttemptError((err as Error).message, (err as { retryable?: unknown }).retryable !== false);
    }
    if (text.trim() === '') throw new AttemptError('the model answered with no text', true);
    return parseDecision(text, input.agents);
  }
}

/** The system and user messages for a routing request. */
function buildPrompt(input: RouterPolicyInput, historyMessages = DEFAULT_LLM_ROUTER_HISTORY, prompts: RouterPrompts = DEFAULT_ROUTER_PROMPTS): ChatMessage[] {
  // In id order: the same team gives the same prompt whichever agent announced itself first.
  const team = [...input.agents]
    .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
    .map((card) => describeAgent(card, prompts))
    .join('\n\n');
  const catalog = prompts.catalogHeader ? `${prompts.catalogHeader}\n${team}` : team;
  const system = prompts.system.includes('{{catalog}}') ? fill(prompts.system, { catalog }) : `${prompts.system}\n\n${catalog}`;
  const history = (input.history ?? [])
    .filter((m) => m.messageId !== input.message.messageId)
    .slice(-historyMessages)
    .map((m) => `${m.role}: ${clip(routingText(m), 500)}`);
  const user = fill(prompts.userTemplate, {
    history: history.length ? `Earlier in the conversation:\n${history.join('\n')}\n` : '',
    message: clip(routingText(input.message), MAX_PROMPT_TEXT),
  });
  return [
    { role: 'system', content: system },
    { role: 'user', content: user },
  ];
}

/** `{{name}}` replaced by its value, in one pass (a value that says `{{...}}` stays as it is). */
function fill(template: string, values: Record<string, string>): string {
  return template.replace(/\{\{\s*(\w+)\s*\}\}/g, (whole, name: string) => (Object.prototype.hasOwnProperty.call(values, name) ? values[name]! : whole));
}

function describeAgent(card: AgentCard, prompts: RouterPrompts): string {
  const lines = [`- id: ${card.id}`, `  name: ${card.name}`, `  description: ${card.description}`];
  if (!prompts.includeCapabilities && !prompts.includeExamples) return lines.join('\n');
  for (const skill of card.skills) {
    const tags = skill.tags.length ? ` [${skill.tags.join(', ')}]` : '';
    const examples = prompts.includeExamples && skill.examples?.length ? ` e.g. ${skill.examples.map((e) => JSON.stringify(e)).join(', ')}` : '';
    lines.push(prompts.includeCapabilities ? `  skill ${skill.name}: ${skill.description}${tags}${examples}` : `  skill ${skill.name}:${examples}`);
  }
  return lines.join('\n');
}

/** Parses and checks the model's answer: every agent known, additional agents distinct from the primary and from each other. */
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
  const additional = decision.additionalAgents ?? [];
  const unknown = additional.filter((id) => !ids.has(id));
  if (unknown.length)
    throw new AttemptError(`additionalAgents ${unknown.map((id) => `"${id}"`).join(', ')} are not among ${[...ids].join(', ')}`, true, content);
  if (additional.includes(decision.agentId)) throw new AttemptError(`additionalAgents repeats the primary agent "${decision.agentId}"`, true, content);
  if (new Set(additional).size !== additional.length) throw new AttemptError('additionalAgents names an agent twice', true, content);
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
