/**
 * `type: prompt` tools: a template (inline or from a file) filled with the call's arguments at
 * `{name}` or `{{name}}` (`config/template.ts`), sent to a model — the tool's own `model` or the
 * agent's — as one user message. The model's answer is the tool's result. Nothing of it is streamed to
 * the user.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { ModelConfig, PromptToolConfig } from '../../config/agent.js';
import { renderTemplate } from '../../config/template.js';
import type { ModelProvider } from '../../model/types.js';
import { parametersSchema } from './parameters.js';
import { toResultText, type RunnableTool } from './types.js';

export function promptTool(
  tool: PromptToolConfig,
  dir: string,
  agentModel: ModelConfig,
  providerFor: (config: ModelConfig, where: string) => ModelProvider,
  where: string,
): RunnableTool {
  const template = tool.template ?? readFileSync(resolve(dir, tool.file!), 'utf8');
  const provider = providerFor(tool.model ?? agentModel, tool.model ? `${where}.model` : 'model');
  return {
    definition: { name: tool.name, description: tool.description, parameters: parametersSchema(tool.parameters) },
    ...(tool.timeout_ms !== undefined ? { timeoutMs: tool.timeout_ms } : {}),
    run: async (args, ctx) => {
      const completion = await provider.complete({ messages: [{ role: 'user', content: renderTemplate(template, args) }], signal: ctx.signal });
      return toResultText(completion.text);
    },
  };
}
