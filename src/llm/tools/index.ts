/**
 * The tools of an agent.yaml, ready to run: `function` and `prompt` tools, the tools of each `mcp`
 * tool's server (`mcp.ts`) and `vectorstore` searches (`vectorstore.ts`). A tool that cannot be set up
 * stops the agent's start with an error naming it; what was set up before it is released again.
 */
import type { LoadedAgentConfig, ModelConfig } from '../../config/agent.js';
import { TroupeError } from '../../protocol/errors.js';
import type { EmbeddingProvider, ModelProvider } from '../../model/types.js';
import { functionTool } from './function.js';
import { mcpTools, type McpConnection, type McpServerStatus } from './mcp.js';
import { promptTool } from './prompt.js';
import type { RunnableTool } from './types.js';
import { vectorstoreTool } from './vectorstore.js';
import type { VectorIndexOptions } from '../vectorstore/index.js';

export type { RunnableTool } from './types.js';

export interface ToolSet {
  tools: RunnableTool[];
  /** For diagnostics (`troupe inspect`): each MCP server and vector index by tool name. */
  status(): { mcp?: Record<string, McpServerStatus>; vectorstores?: Record<string, { table: string; rows: number; built: boolean }> };
  /** Releases servers, subprocesses and tables (once). */
  close(): Promise<void>;
}

export interface ToolFactories {
  /** The model of a prompt tool (its own, or the agent's). */
  providerFor: (config: ModelConfig, where: string) => ModelProvider;
  /** The embeddings endpoint of a vectorstore tool. */
  embedderFor: (model: string | undefined, where: string) => EmbeddingProvider;
  /** Where a vectorstore says it builds an index, and why. */
  log?: VectorIndexOptions['log'];
}

export async function buildTools(loaded: LoadedAgentConfig, factories: ToolFactories): Promise<ToolSet> {
  const { providerFor, embedderFor } = factories;
  const tools: RunnableTool[] = [];
  const closers: Array<() => Promise<void>> = [];
  const servers = new Map<string, McpConnection>();
  const indexes = new Map<string, { table: string; rows: number; built: boolean }>();
  const close = async () => {
    const all = closers.splice(0);
    await Promise.all(all.map((c) => c().catch(() => undefined)));
  };
  try {
    for (const [i, tool] of (loaded.config.tools ?? []).entries()) {
      const where = `${loaded.file} tools[${i}] "${tool.name}"`;
      if (tool.type === 'function') tools.push(await functionTool(tool, loaded.dir, where));
      else if (tool.type === 'prompt') tools.push(promptTool(tool, loaded.dir, loaded.config.model, providerFor, where));
      else if (tool.type === 'mcp') {
        const set = await mcpTools(tool, loaded.dir, where);
        closers.push(set.close);
        servers.set(tool.name, set.connection);
        tools.push(...set.tools);
      } else {
        const set = await vectorstoreTool(
          tool,
          { name: loaded.config.name, dir: loaded.dir },
          embedderFor(tool.embedding_model, `${where}.embedding_model`),
          where,
          factories.log,
        );
        closers.push(set.close);
        indexes.set(tool.name, { table: set.index.table, rows: set.index.rows, built: set.index.built });
        tools.push(set.tool);
      }
    }
  } catch (err) {
    await close();
    throw err;
  }
  const offered = new Map<string, RunnableTool>();
  for (const t of tools) {
    const other = offered.get(t.definition.name);
    if (other) {
      await close();
      throw new TroupeError(
        'CONFIG_INVALID',
        `${loaded.file}: two tools are offered to the model as "${t.definition.name}" (from ${other.source ?? other.definition.name} and ${t.source ?? t.definition.name})`,
      );
    }
    offered.set(t.definition.name, t);
  }
  return {
    tools,
    status: () => ({
      ...(servers.size ? { mcp: Object.fromEntries([...servers].map(([name, c]) => [name, c.status()])) } : {}),
      ...(indexes.size ? { vectorstores: Object.fromEntries(indexes) } : {}),
    }),
    close,
  };
}
