/**
 * Vectorstore tools against a real LanceDB table on disk, built from the small data set in
 * test/fixtures/vectorstore/kb (json with a record path, csv, jsonl, markdown, text), embedded by a local
 * server speaking the OpenAI embeddings API with deterministic bag-of-words vectors: labelled queries
 * find their record first; an unchanged source is reused without embedding anything, a changed one is
 * re-indexed and the old table dropped; a YAML agent's model calls the search through the mesh.
 */
import { appendFileSync, cpSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { AgentConfigSchema, type LoadedAgentConfig } from '../src/config/agent.js';
import { createLlmAgent } from '../src/llm/agent.js';
import { EMBEDDING_PROBE } from '../src/llm/vectorstore/index.js';
import { chunkText, detectVectorFields, flattenRecord, readSourceChunks, sourceFiles } from '../src/llm/vectorstore/source.js';
import { SearchResultSchema, type SearchResult } from '../src/llm/vectorstore/types.js';
import { silentLogger } from '../src/observability/logger.js';
import { TroupeError } from '../src/protocol/errors.js';
import type { AgentDefinition } from '../src/sdk/agent.js';
import { OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';

/** The tables in a LanceDB directory (LanceDB keeps its own `__manifest` beside them). */
const lanceTables = (path: string) =>
  readdirSync(path)
    .filter((f) => f !== '__manifest')
    .sort();

const KB = resolve('test/fixtures/vectorstore/kb');
const work = mkdtempSync(join(tmpdir(), 'troupe-vectors-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A fresh copy of the data set: each suite indexes its own folder. */
function dataset(name: string): string {
  const dir = join(work, name);
  cpSync(KB, join(dir, 'kb'), { recursive: true });
  return dir;
}

const KB_TOOL = {
  name: 'kb_search',
  description: 'Searches the help centre, the catalogue, the brewing guide and the orders',
  type: 'vectorstore',
  source: 'kb',
  record_path: 'data.records',
  meta_fields: ['id', 'sku', 'order', 'author.name', 'section'],
  chunk_size: 200,
  chunk_overlap: 20,
};

function loaded(
  model: OpenAIScriptedServer,
  dir: string,
  tool: Record<string, unknown> = KB_TOOL,
  provider: 'openai' | 'anthropic' = 'openai',
): LoadedAgentConfig {
  return {
    config: AgentConfigSchema.parse({
      name: 'shop',
      model: { provider, name: 'm', ...(provider === 'openai' ? { base_url: model.baseURL } : { base_url: 'http://127.0.0.1:9' }) },
      instructions: { inline: 'Answer from the knowledge base.' },
      tools: [tool],
    }),
    file: join(dir, 'agent.yaml'),
    dir,
  };
}

type Mesh = Awaited<ReturnType<typeof startEmbedded>>;
const meshOf = (agent: AgentDefinition): Promise<Mesh> => startEmbedded({ name: 'kb', agents: [agent], config: { entryAgent: 'shop' } }, silentLogger());

/** The model searches once with `query`; the results it got back. */
async function search(mesh: Mesh, model: OpenAIScriptedServer, query: string, topK?: number): Promise<SearchResult[]> {
  model.script({ toolCalls: [{ id: 's', name: 'kb_search', arguments: { query, ...(topK ? { top_k: topK } : {}) } }] }, { text: 'done' });
  await mesh.client.send(query);
  const req = model.requests.at(-1) as SeenRequest;
  const tool = (req.body.messages as Array<{ role: string; content: string }>).find((m) => m.role === 'tool')!;
  model.reset();
  return (JSON.parse(tool.content) as unknown[]).map((r) => SearchResultSchema.parse(r));
}

describe('reading a source into chunks', () => {
  it('cuts long text at word boundaries with the overlap, and keeps short text whole', () => {
    expect(chunkText('  short text ', 100, 10)).toEqual([{ text: 'short text', start: 0 }]);
    const words = Array.from({ length: 60 }, (_, i) => `word${i}`).join(' ');
    const chunks = chunkText(words, 100, 20);
    expect(chunks.length).toBeGreaterThan(4);
    for (const c of chunks) {
      expect(c.text.length).toBeLessThanOrEqual(100);
      expect(c.text).toMatch(/^word\d+( word\d+)*$/);
    }
    // Each piece starts inside the previous one (the overlap) and they cover the text in order.
    for (let i = 1; i < chunks.length; i++) {
      expect(chunks[i]!.start).toBeLessThan(chunks[i - 1]!.start + chunks[i - 1]!.text.length);
      expect(chunks[i]!.start).toBeGreaterThan(chunks[i - 1]!.start);
    }
    expect(chunks.at(-1)!.text.endsWith('word59')).toBe(true);
    expect(chunkText('x'.repeat(250), 100, 0).map((c) => c.text.length)).toEqual([100, 100, 50]);
  });

  it('flattens records as json_normalize does, with the record prefix', () => {
    expect(flattenRecord({ id: 1, author: { name: 'Mei', team: { lead: 'Ada' } }, tags: ['a', 'b'] }, 'r.')).toEqual({
      'r.id': 1,
      'r.author.name': 'Mei',
      'r.author.team.lead': 'Ada',
      'r.tags': ['a', 'b'],
    });
    expect(flattenRecord('plain text')).toEqual({ value: 'plain text' });
  });

  it('finds the prose fields when vector_field is absent', () => {
    const rows = [
      { id: 'q1', title: 'Green tea', body: 'Steep green tea for two minutes at 80 degrees.' },
      { id: 'q2', title: 'Shipping', body: 'Parcels to Canada arrive within eight working days.' },
    ];
    expect(detectVectorFields(rows, new Set())).toEqual(['body']);
    expect(detectVectorFields([{ id: 'a', code: 'x' }], new Set(['id']))).toEqual(['code']);
  });

  it('reads json at a record path with meta fields from around the records, csv rows, jsonl lines, markdown under headings and text', () => {
    const chunks = readSourceChunks(sourceFiles({ source: 'kb' }, resolve(KB, '..')), {
      source: 'kb',
      record_path: 'data.records',
      record_prefix: 'r.',
      meta_prefix: 'doc.',
      meta_fields: ['r.id', 'r.author.name', 'doc.section', 'doc.version', 'sku', 'order'],
      chunk_size: 200,
    });
    const byRef = new Map(chunks.map((c) => [c.reference, c]));
    expect([...byRef.keys()]).toEqual([
      'kb/brewing.md#chunk-1',
      'kb/brewing.md#chunk-2',
      'kb/brewing.md#chunk-3',
      'kb/faq.json#data.records[0]',
      'kb/faq.json#data.records[1]',
      'kb/faq.json#data.records[2]',
      'kb/faq.json#data.records[3]',
      'kb/notes.txt#chunk-1',
      'kb/orders.jsonl#line-1',
      'kb/orders.jsonl#line-2',
      'kb/products.csv#row-1',
      'kb/products.csv#row-2',
      'kb/products.csv#row-3',
    ]);
    const green = byRef.get('kb/faq.json#data.records[0]')!;
    // Auto-detected text fields: the question and the answer (not the id, not the short tags).
    expect(green.text).toBe('How long should green tea steep?\nSteep green tea for one to two minutes at 70 to 80 degrees; longer makes it bitter.');
    expect({ ...green.metadata }).toEqual({ 'r.id': 'steep-green', 'r.author.name': 'Mei', 'doc.section': 'customer questions', 'doc.version': 3 });
    expect({ ...byRef.get('kb/products.csv#row-2')!.metadata }).toEqual({ sku: 'P-200' });
    expect(byRef.get('kb/products.csv#row-2')!.text).toBe('Heat-resistant borosilicate glass teapot with a steel infuser, 800 ml');
    expect(byRef.get('kb/orders.jsonl#line-1')!.text).toBe('Sencha and a glass teapot, shipped on Monday by courier');
    expect({ ...byRef.get('kb/brewing.md#chunk-2')!.metadata }).toEqual({ heading: 'Oolong' });
  });

  it('says what is wrong with a source', () => {
    const files = sourceFiles({ source: 'kb/faq.json' }, resolve(KB, '..'));
    expect(() => readSourceChunks(files, { source: 'kb/faq.json', record_path: 'data.rows' })).toThrow(
      'kb/faq.json: record_path "data.rows" leads to no records',
    );
    expect(() => readSourceChunks(files, { source: 'kb/faq.json', record_path: 'data.records', vector_field: 'body' })).toThrow(
      'vector_field "body" is in no record',
    );
    expect(() => readSourceChunks(files, { source: 'kb/faq.json', record_path: 'data.records', meta_fields: ['owner'] })).toThrow(
      'meta_fields "owner" found in no record',
    );
    const bad = join(work, 'bad');
    cpSync(KB, bad, { recursive: true });
    writeFileSync(join(bad, 'orders.jsonl'), '{"order": "A-1"}\n{oops\n');
    expect(() => readSourceChunks(sourceFiles({ source: 'bad' }, work), { source: 'bad' })).toThrow(/^bad\/orders\.jsonl line 2 is not valid JSON/);
  });
});

describe('a vectorstore tool over a LanceDB table', () => {
  const model = new OpenAIScriptedServer();
  const dir = dataset('ranking');
  let agent: AgentDefinition;
  let mesh: Mesh;

  beforeAll(async () => {
    await model.start();
    agent = await createLlmAgent(loaded(model, dir), { env: {} });
    mesh = await meshOf(agent);
  });
  afterEach(() => void model.reset());
  afterAll(async () => {
    await mesh?.stop();
    await model.stop();
  });

  it('embeds every chunk once at start, with the default embedding model, into a table next to the agent', () => {
    const status = agent.status!().detail as { vectorstores: Record<string, { table: string; rows: number; built: boolean }> };
    expect(status.vectorstores.kb_search).toEqual({ table: expect.stringMatching(/^shop-kb_search-[0-9a-f]{16}$/), rows: 13, built: true });
    expect(lanceTables(join(dir, '.troupe', 'vectors'))).toEqual([`${status.vectorstores.kb_search!.table}.lance`]);
  });

  it.each([
    ['How long do I steep green tea?', 'kb/faq.json#data.records[0]'],
    ['Can you deliver my parcel to Canada?', 'kb/faq.json#data.records[1]'],
    ['refund for a damaged parcel', 'kb/faq.json#data.records[2]'],
    ['Does rooibos contain caffeine?', 'kb/faq.json#data.records[3]'],
    ['borosilicate glass teapot', 'kb/products.csv#row-2'],
    ['what temperature to brew oolong', 'kb/brewing.md#chunk-2'],
    ['black tea just off the boil', 'kb/brewing.md#chunk-3'],
    ['keep tea in an airtight tin', 'kb/notes.txt#chunk-1'],
    ['which order is waiting for payment', 'kb/orders.jsonl#line-2'],
  ])('ranks the labelled record first for %j', async (query, expected) => {
    const results = await search(mesh, model, query);
    expect(results[0]!.source_reference).toBe(expected);
    expect(results).toHaveLength(5);
    const scores = results.map((r) => r.relevance_score);
    expect([...scores].sort((a, b) => b - a)).toEqual(scores);
    expect(scores[0]).toBeGreaterThan(scores[1]!);
  });

  it('returns SearchResults with the meta fields, honouring top_k', async () => {
    const [top, ...rest] = await search(mesh, model, 'rooibos caffeine', 2);
    expect(rest).toHaveLength(1);
    expect(top).toEqual({
      matched_content: 'Is rooibos free of caffeine?\nRooibos is a South African herbal infusion and naturally contains no caffeine.',
      metadata_dict: { id: 'caffeine-rooibos', 'author.name': 'Mei', section: 'customer questions' },
      source_reference: 'kb/faq.json#data.records[3]',
      relevance_score: expect.any(Number),
    });
    expect(top!.relevance_score).toBeGreaterThan(0.4);
    expect(top!.relevance_score).toBeLessThanOrEqual(1);
  });

  it('offers the search with its JSON schema and refuses bad arguments as a tool error', async () => {
    model.script({ toolCalls: [{ id: 'bad', name: 'kb_search', arguments: { query: '', top_k: 99 } }] }, { text: 'sorry' });
    await mesh.client.send('search nothing');
    const [first, second] = model.requests;
    expect((first!.body.tools as Array<{ function: { name: string; parameters: unknown } }>)[0]!.function).toMatchObject({
      name: 'kb_search',
      parameters: { type: 'object', properties: { query: { type: 'string' }, top_k: { type: 'integer', maximum: 20 } }, required: ['query'] },
    });
    const toolMessage = (second!.body.messages as Array<{ role: string; content: string }>).find((m) => m.role === 'tool')!;
    expect(JSON.parse(toolMessage.content).error).toMatch(/^invalid arguments: query: .*; top_k: /);
  });
});

describe('reusing and rebuilding the index', () => {
  const model = new OpenAIScriptedServer();
  const dir = dataset('reuse');
  beforeAll(() => model.start());
  afterAll(() => model.stop());

  const tables = () => lanceTables(join(dir, '.troupe', 'vectors'));
  const indexed = (agent: AgentDefinition) =>
    (agent.status!().detail as { vectorstores: Record<string, { table: string; built: boolean; rows: number }> }).vectorstores.kb_search!;

  it('reuses the table across restarts while the source is unchanged, and re-indexes when it changes', async () => {
    const first = await createLlmAgent(loaded(model, dir), { env: {} });
    const built = indexed(first);
    expect(built.built).toBe(true);
    expect(model.embeddingRequests.flatMap((r) => r.input).filter((t) => t !== EMBEDDING_PROBE)).toHaveLength(13);
    expect(new Set(model.embeddingRequests.map((r) => r.model))).toEqual(new Set(['text-embedding-3-small']));
    await first.close!();

    model.reset();
    const again = await createLlmAgent(loaded(model, dir), { env: {} });
    expect(indexed(again)).toEqual({ ...built, built: false });
    // Only the probe that learns the model's dimension: nothing of the source is embedded again.
    expect(model.embeddingRequests.map((r) => r.input)).toEqual([[EMBEDDING_PROBE]]);
    await again.close!();

    appendFileSync(join(dir, 'kb', 'notes.txt'), '\nGift wrapping: every order can be gift wrapped with recycled paper for two euros.\n');
    model.reset();
    const changed = await createLlmAgent(loaded(model, dir), { env: {} });
    // notes.txt is now longer than chunk_size: two chunks.
    expect(indexed(changed)).toMatchObject({ built: true, rows: 14 });
    expect(indexed(changed).table).not.toBe(built.table);
    expect(model.embeddingRequests.flatMap((r) => r.input).filter((t) => t.includes('recycled paper'))).toEqual([
      expect.stringMatching(/gift wrapped with recycled paper for two euros\.$/),
    ]);
    // The old table is dropped: one table per tool.
    expect(tables()).toEqual([`${indexed(changed).table}.lance`]);
    const mesh = await meshOf(changed);
    expect((await search(mesh, model, 'gift wrapping with recycled paper'))[0]!.source_reference).toBe('kb/notes.txt#chunk-2');
    await mesh.stop();
  });

  it('re-indexes when a setting that changes the vectors changes (the embedding model)', async () => {
    model.reset();
    const other = await createLlmAgent(loaded(model, dir, { ...KB_TOOL, embedding_model: 'local-embedder' }), { env: {} });
    expect(indexed(other).built).toBe(true);
    expect(new Set(model.embeddingRequests.map((r) => r.model))).toEqual(new Set(['local-embedder']));
    await other.close!();
  });
});

describe('a vectorstore that cannot be set up', () => {
  const model = new OpenAIScriptedServer();
  beforeAll(() => model.start());
  afterAll(() => model.stop());

  it('stops the start with an error naming the tool when the embeddings fail', async () => {
    model.embeddingFailures.push(400);
    const err = (await createLlmAgent(loaded(model, dataset('failing')), { env: {} }).catch((e: unknown) => e)) as TroupeError;
    expect(err).toBeInstanceOf(TroupeError);
    expect(err.code).toBe('TOOL_START_FAILED');
    expect(err.message).toMatch(/ tools\[0\] "kb_search": could not index "kb": openai embeddings text-embedding-3-small: 400 scripted embeddings 400$/);
  });

  it('embeds through OpenAI for an anthropic agent, and says so when OpenAI is not configured', async () => {
    const dir = dataset('anthropic');
    const err = (await createLlmAgent(loaded(model, dir, KB_TOOL, 'anthropic'), { env: {} }).catch((e: unknown) => e)) as TroupeError;
    expect(err.code).toBe('CONFIG_INVALID');
    expect(err.message).toContain(
      'anthropic has no embeddings API; set OPENAI_API_KEY (or OPENAI_BASE_URL for an OpenAI-compatible server) to embed with text-embedding-3-small',
    );
    model.reset();
    const agent = await createLlmAgent(loaded(model, dir, KB_TOOL, 'anthropic'), { env: { OPENAI_BASE_URL: model.baseURL } });
    expect(model.embeddingRequests.flatMap((r) => r.input).filter((t) => t !== EMBEDDING_PROBE)).toHaveLength(13);
    await agent.close!();
  });
});
