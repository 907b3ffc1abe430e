/**
 * `type: vectorstore` tools: a search over the tool's source, indexed in LanceDB (`../vectorstore/`).
 * The model calls it with a query (and optionally how many results it wants, default 5, at most 20) and
 * gets back a JSON list of SearchResult — matched_content, metadata_dict, source_reference,
 * relevance_score — best first.
 *
 * The index is opened or built when the agent starts: a source that cannot be read, or embeddings that
 * fail or make no sense (`checkVectors`), stop the start with TOOL_START_FAILED naming the tool.
 */
import { join } from 'node:path';
import { z } from 'zod';
import type { VectorstoreToolConfig } from '../../config/agent.js';
import { describeZodError, TroupeError } from '../../protocol/errors.js';
import type { EmbeddingProvider } from '../../model/types.js';
import { acquireVectorIndex, MAX_TOP_K, type VectorIndex, type VectorIndexOptions } from '../vectorstore/index.js';
import { readSourceChunks, sourceFiles, sourceHash } from '../vectorstore/source.js';
import type { RunnableTool } from './types.js';

const DEFAULT_TOP_K = 5;
/** Where indexes live, under the agent.yaml's folder. */
const VECTOR_DIR = join('.troupe', 'vectors');

const SearchArgs = z.object({
  query: z.string().min(1).max(2_000),
  top_k: z.int().min(1).max(MAX_TOP_K).optional(),
});

export interface VectorstoreToolSet {
  tool: RunnableTool;
  index: VectorIndex;
  close(): Promise<void>;
}

export async function vectorstoreTool(
  tool: VectorstoreToolConfig,
  agent: { name: string; dir: string },
  embedder: EmbeddingProvider,
  where: string,
  log?: VectorIndexOptions['log'],
): Promise<VectorstoreToolSet> {
  const settings = {
    source: tool.source,
    ...(tool.vector_field !== undefined ? { vector_field: tool.vector_field } : {}),
    ...(tool.meta_fields !== undefined ? { meta_fields: tool.meta_fields } : {}),
    ...(tool.chunk_size !== undefined ? { chunk_size: tool.chunk_size } : {}),
    ...(tool.chunk_overlap !== undefined ? { chunk_overlap: tool.chunk_overlap } : {}),
    ...(tool.record_path !== undefined ? { record_path: tool.record_path } : {}),
    ...(tool.record_prefix !== undefined ? { record_prefix: tool.record_prefix } : {}),
    ...(tool.meta_prefix !== undefined ? { meta_prefix: tool.meta_prefix } : {}),
  };
  let held: Awaited<ReturnType<typeof acquireVectorIndex>>;
  try {
    const files = sourceFiles(settings, agent.dir);
    held = await acquireVectorIndex({
      dbDir: join(agent.dir, VECTOR_DIR),
      name: `${agent.name}-${tool.name}`,
      sourceHash: sourceHash(files, settings, {}),
      embedder,
      chunks: () => readSourceChunks(files, settings),
      ...(log ? { log } : {}),
    });
  } catch (err) {
    throw new TroupeError(
      'TOOL_START_FAILED',
      `${where}: could not index ${JSON.stringify(tool.source)}: ${(err as Error).message}`,
      { tool: tool.name },
      { cause: err },
    );
  }
  const { index, release } = held;
  return {
    index,
    close: release,
    tool: {
      definition: {
        name: tool.name,
        description: `${tool.description} (returns up to ${MAX_TOP_K} passages, best first, as JSON: matched_content, metadata_dict, source_reference, relevance_score 0–1)`,
        parameters: {
          type: 'object',
          properties: {
            query: { type: 'string', description: 'what to look for, in your own words' },
            top_k: { type: 'integer', minimum: 1, maximum: MAX_TOP_K, description: `how many passages (default ${DEFAULT_TOP_K})` },
          },
          required: ['query'],
          additionalProperties: false,
        },
      },
      ...(tool.timeout_ms !== undefined ? { timeoutMs: tool.timeout_ms } : {}),
      run: async (args, ctx) => {
        const parsed = SearchArgs.safeParse(args);
        if (!parsed.success) throw new Error(`invalid arguments: ${describeZodError(parsed.error)}`);
        const results = await index.search(parsed.data.query, parsed.data.top_k ?? DEFAULT_TOP_K, ctx.signal);
        return JSON.stringify(results);
      },
    },
  };
}
