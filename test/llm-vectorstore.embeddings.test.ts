/**
 * What a vectorstore does with the embeddings servers really send, against a local server speaking the
 * OpenAI embeddings API: floats are asked for explicitly; float arrays and base64 answers both index
 * and search correctly whatever was asked; vectors with NaN, null, the wrong dimension or no direction
 * are refused with a typed error, at start and in a search, and no table of garbage is left behind;
 * the index key holds the embedding model and dimension, so a change of either (or a table from an older
 * Troupe) rebuilds the index and a log line says why.
 */
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { connect } from '@lancedb/lancedb';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { AgentConfigSchema, type LoadedAgentConfig } from '../src/config/agent.js';
import { createLlmAgent, type LlmAgentOptions } from '../src/llm/agent.js';
import { EMBEDDING_PROBE } from '../src/llm/vectorstore/index.js';
import { SearchResultSchema, type SearchResult } from '../src/llm/vectorstore/types.js';
import { silentLogger } from '../src/observability/logger.js';
import { TroupeError } from '../src/protocol/errors.js';
import type { AgentDefinition } from '../src/sdk/agent.js';
import { capturingLogger } from './helpers/log-lines.js';
import { EMBEDDING_DIMS, OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';

const KB = resolve('test/fixtures/vectorstore/kb');
const work = mkdtempSync(join(tmpdir(), 'troupe-embeddings-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function dataset(name: string): string {
  const dir = join(work, name);
  cpSync(KB, join(dir, 'kb'), { recursive: true });
  return dir;
}

const KB_TOOL = { name: 'kb_search', description: 'Searches the help centre', type: 'vectorstore', source: 'kb', record_path: 'data.records', chunk_size: 200 };

function loaded(model: OpenAIScriptedServer, dir: string, embedding_model?: string): LoadedAgentConfig {
  return {
    config: AgentConfigSchema.parse({
      name: 'shop',
      model: { provider: 'openai', name: 'm', base_url: model.baseURL },
      instructions: { inline: 'Answer from the knowledge base.' },
      tools: [{ ...KB_TOOL, ...(embedding_model ? { embedding_model } : {}) }],
    }),
    file: join(dir, 'agent.yaml'),
    dir,
  };
}

const start = (model: OpenAIScriptedServer, dir: string, opts: LlmAgentOptions & { embeddingModel?: string } = {}) =>
  createLlmAgent(loaded(model, dir, opts.embeddingModel), { env: {}, logger: silentLogger(), ...opts });

const tables = (dir: string) =>
  existsSync(join(dir, '.troupe', 'vectors')) ? readdirSync(join(dir, '.troupe', 'vectors')).filter((f) => f !== '__manifest') : [];
const indexed = (agent: AgentDefinition) =>
  (agent.status!().detail as { vectorstores: Record<string, { table: string; built: boolean; rows: number }> }).vectorstores.kb_search!;

/** The model searches once with `query`; what its tool call gave back (results, or the tool error). */
async function search(agent: AgentDefinition, model: OpenAIScriptedServer, query: string): Promise<SearchResult[] | { error: string }> {
  const mesh = await startEmbedded({ name: 'kb', agents: [agent], config: { entryAgent: 'shop' } }, silentLogger());
  try {
    model.script({ toolCalls: [{ id: 's', name: 'kb_search', arguments: { query } }] }, { text: 'done' });
    await mesh.client.send(query);
    const req = model.requests.at(-1) as SeenRequest;
    const content = (req.body.messages as Array<{ role: string; content: string }>).find((m) => m.role === 'tool')!.content;
    const parsed = JSON.parse(content) as unknown;
    return Array.isArray(parsed) ? parsed.map((r) => SearchResultSchema.parse(r)) : (parsed as { error: string });
  } finally {
    await mesh.stop();
  }
}

async function startError(model: OpenAIScriptedServer, dir: string): Promise<TroupeError> {
  const err = await start(model, dir).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(TroupeError);
  return err as TroupeError;
}

describe('embeddings in either encoding', () => {
  const model = new OpenAIScriptedServer();
  beforeAll(() => model.start());
  afterEach(() => void model.reset());
  afterAll(() => model.stop());

  it.each(['float', 'base64', 'asked'] as const)('asks for floats and reads a server answering %s: the index ranks as it should', async (encoding) => {
    const dir = dataset(`encoding-${encoding}`);
    model.embeddingEncoding = encoding;
    const agent = await start(model, dir);
    try {
      expect(indexed(agent)).toMatchObject({ built: true, rows: 13 });
      const results = (await search(agent, model, 'Does rooibos contain caffeine?')) as SearchResult[];
      expect(results[0]!.source_reference).toBe('kb/faq.json#data.records[3]');
      expect(results[0]!.relevance_score).toBeGreaterThan(0.4);
      // The probe, the source's batches and the query: every request asked for floats.
      expect(model.embeddingRequests.length).toBeGreaterThanOrEqual(3);
      expect(new Set(model.embeddingRequests.map((r) => r.encoding_format))).toEqual(new Set(['float']));
    } finally {
      await agent.close!();
    }
  });
});

describe('embeddings that make no sense', () => {
  const model = new OpenAIScriptedServer();
  beforeAll(() => model.start());
  afterEach(() => void model.reset());
  afterAll(() => model.stop());

  let garbage = 0;
  const poisonAt = (text: string, value: number) => (v: number[], t: string) => (t.includes(text) ? v.map((x, i) => (i === 17 ? value : x)) : v);

  it.each([
    ['NaN in a base64 answer', 'base64', poisonAt('rooibos', Number.NaN), /vector \d+ holds NaN at \[17\]/],
    ['NaN in a float answer (null on the wire)', 'float', poisonAt('rooibos', Number.NaN), /vector \d+ holds null at \[17\]/],
    ['Infinity in a base64 answer', 'base64', poisonAt('rooibos', Number.POSITIVE_INFINITY), /vector \d+ holds Infinity at \[17\]/],
    [
      'a vector of another length',
      'float',
      (v: number[], t: string) => (t.includes('rooibos') ? v.slice(1) : v),
      new RegExp(`vector \\d+ has ${EMBEDDING_DIMS - 1} dimensions, not ${EMBEDDING_DIMS}`),
    ],
    ['a vector of zeros', 'float', (v: number[], t: string) => (t.includes('rooibos') ? v.map(() => 0) : v), /vector \d+ is all zeros/],
  ] as const)('%s stops the start with a typed error and stores nothing', async (_what, encoding, mangle, message) => {
    const dir = dataset(`garbage-${++garbage}`);
    model.embeddingEncoding = encoding;
    model.mangleEmbedding = mangle;
    const err = await startError(model, dir);
    expect(err.code).toBe('TOOL_START_FAILED');
    expect(err.message).toMatch(message);
    expect(err.message).toContain(`the embeddings of text-embedding-3-small at ${model.baseURL} are unusable`);
    expect((err.cause as TroupeError).code).toBe('MODEL_ERROR');
    expect(tables(dir)).toEqual([]);
  });

  it('a probe answered wrong stops the start before anything is read', async () => {
    const dir = dataset('garbage-probe');
    model.mangleEmbedding = (v, t) => (t === EMBEDDING_PROBE ? v.map(() => Number.NaN) : v);
    const err = await startError(model, dir);
    expect(err.message).toMatch(/vector 0 holds null at \[0\]/);
    expect(model.embeddingRequests.map((r) => r.input)).toEqual([[EMBEDDING_PROBE]]);
  });

  it('a search whose query embedding is garbage, or of another dimension, is a tool error the model reads', async () => {
    const dir = dataset('garbage-query');
    const agent = await start(model, dir);
    try {
      model.mangleEmbedding = (v, t) => (t.includes('oolong') ? v.map((x, i) => (i === 3 ? Number.NaN : x)) : v);
      expect(await search(agent, model, 'what temperature to brew oolong')).toEqual({
        error: expect.stringMatching(/unusable: vector 0 holds null at \[3\]$/),
      });
      model.mangleEmbedding = undefined;
      model.embeddingDims = 128;
      expect(await search(agent, model, 'green tea')).toEqual({
        error: expect.stringMatching(/unusable: vector 0 has 128 dimensions, not 256 \(the dimension the model answered in at start\)$/),
      });
    } finally {
      await agent.close!();
    }
  });
});

describe('the index key holds the embedding model and dimension', () => {
  const model = new OpenAIScriptedServer();
  beforeAll(() => model.start());
  afterAll(() => model.stop());

  it('rebuilds when the dimension or the model changes, or the table is an older version, and says why', async () => {
    const dir = dataset('rekey');
    const first = await start(model, dir);
    const table256 = indexed(first).table;
    await first.close!();

    // The same model name, answering in another dimension (a server whose model was swapped).
    model.reset();
    model.embeddingDims = 128;
    const { lines, log } = capturingLogger();
    const smaller = await start(model, dir, { logger: log });
    expect(indexed(smaller)).toMatchObject({ built: true, rows: 13 });
    expect(indexed(smaller).table).not.toBe(table256);
    expect(tables(dir)).toEqual([`${indexed(smaller).table}.lance`]);
    expect(lines.find((l) => l.msg.startsWith('building vector index'))).toMatchObject({
      msg: `building vector index ${indexed(smaller).table}: the embedding dimension changed (256 → 128)`,
      previous: table256,
      dimensions: 128,
      agent: 'shop',
    });
    expect(((await search(smaller, model, 'Does rooibos contain caffeine?')) as SearchResult[])[0]!.source_reference).toBe('kb/faq.json#data.records[3]');
    await smaller.close!();

    // Unchanged: opened as it is, no log line, nothing embedded but the probe.
    model.reset();
    model.embeddingDims = 128;
    const quiet = capturingLogger();
    const again = await start(model, dir, { logger: quiet.log });
    expect(indexed(again).built).toBe(false);
    expect(quiet.lines.filter((l) => l.msg.startsWith('building vector index'))).toEqual([]);
    await again.close!();

    model.reset();
    const other = capturingLogger();
    const otherModel = await start(model, dir, { logger: other.log, embeddingModel: 'local-embedder' });
    expect(other.lines.find((l) => l.msg.startsWith('building vector index'))?.msg).toBe(
      `building vector index ${indexed(otherModel).table}: the embedding model changed (text-embedding-3-small → local-embedder); the embedding dimension changed (128 → 256)`,
    );
    await otherModel.close!();

    // A table an older Troupe built (its key without model or dimension, nothing in its metadata): rebuilt.
    const db = await connect(join(dir, '.troupe', 'vectors'));
    for (const t of await db.tableNames()) await db.dropTable(t);
    const stale = 'shop-kb_search-0123456789abcdef';
    await db.createTable(stale, [{ id: 0, text: 'garbage', reference: 'x', metadata: '{}', vector: [0.5, 0.5, 0.5] }]);
    db.close();
    model.reset();
    const old = capturingLogger();
    const rebuilt = await start(model, dir, { logger: old.log });
    expect(old.lines.find((l) => l.msg.startsWith('building vector index'))?.msg).toBe(
      `building vector index ${indexed(rebuilt).table}: the table was built by an older version of Troupe, whose key left out the embedding model and dimension`,
    );
    expect(tables(dir)).toEqual([`${indexed(rebuilt).table}.lance`]);
    await rebuilt.close!();
  });
});
