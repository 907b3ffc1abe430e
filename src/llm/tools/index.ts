/**
 * The tools of an agent.yaml, ready to run. `function` and `prompt` tools run here; `mcp` and
 * `vectorstore` tools are validated in full by the loader but cannot run yet, so an agent that declares
 * one refuses to start (UNSUPPORTED, naming the tool) rather than pretend.
 */
import { unsupportedTools, type LoadedAgentConfig, type ModelConfig } from '../../config/agent.js';
import { TroupeError } from '../../protocol/errors.js';
import type { ModelProvider } from '../types.js';
import { functionTool } from './function.js';
import { promptTool } from './prompt.js';
import type { RunnableTool } from './types.js';

export type { RunnableTool, ToolRunContext } from './types.js';

export async function buildTools(loaded: LoadedAgentConfig, providerFor: (config: ModelConfig, where: string) => ModelProvider): Promise<RunnableTool[]> {
  const unsupported = unsupportedTools(loaded);
  if (unsupported.length) {
    throw new TroupeError(
      'UNSUPPORTED',
      `${loaded.file}: ${unsupported.join(', ')}: mcp and vectorstore tools are validated but cannot run yet in this version of Troupe; ` +
        'remove them to start this agent',
      { tools: unsupported },
    );
  }
  const tools: RunnableTool[] = [];
  for (const [i, tool] of (loaded.config.tools ?? []).entries()) {
    const where = `${loaded.file} tools[${i}] "${tool.name}"`;
    if (tool.type === 'function') tools.push(await functionTool(tool, loaded.dir, where));
    else if (tool.type === 'prompt') tools.push(promptTool(tool, loaded.dir, loaded.config.model, providerFor, where));
  }
  return tools;
}
