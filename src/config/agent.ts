/**
 * `agent.yaml`: the declaration of an agent — model, instructions, tools, evaluations, test cases.
 *
 * The zod schema holds the shape and the per-field rules (types, enums, ranges, patterns); the document
 * checks hold the rules between fields and to the file system (exactly one of two fields, tools named in
 * test cases, files that must exist, unique names). The loader (`load.ts`) runs both and reports every
 * problem at once with its position. Messages may say `{value}`: the loader puts the offending value
 * there (or the `${VAR}` text it came from, so a secret from the environment is never quoted).
 *
 * Troupe additions to the issue's data model, all optional: `max_tool_rounds` (default 10),
 * `tool_timeout_ms` (default 30 s) and a tool's own `timeout_ms`.
 *
 * Where seed 002 leaves a field optional without saying what its absence means, the defaults are here
 * and `troupe validate` lists each one it applied (`appliedDefaults`): a test case without a `name` is
 * `case <n>` (its place in the list, from 1); a metric without a `threshold` passes at the middle of its
 * judge scale, rounded up (3 on 1–5), or at 0.5 for the lexical metrics scored 0–1 — the defaults of
 * Azure AI Evaluation's evaluators, on which the seed's metrics are modelled.
 */
import { extname } from 'node:path';
import { z } from 'zod';
import { ID_LIMITS } from '../protocol/ids.js';
import { CapabilitiesSchema } from './capabilities.js';
import { loadYamlConfig, type CheckContext, type ConfigProblem, type PathSegment, ConfigError } from './load.js';
import { lineColumn, templatePlaceholders } from './template.js';
import { USER_MODULE_EXTENSIONS } from './user-module.js';
import { missingFor, missingMessage, OPTIONAL_FEATURES, type OptionalFeature } from './optional.js';
import { DEFAULT_MEMORY, MemoryConfigSchema, OutputConfigSchema, checkOutput } from './conversation.js';

const MODEL_PROVIDERS = ['openai', 'azure_openai', 'anthropic'] as const;
const PARAMETER_TYPES = ['str', 'int', 'float', 'bool', 'array', 'object'] as const;
/** Scored by an evaluation model on a 1..scale scale (default 1–5). */
export const MODEL_JUDGED_METRICS = ['groundedness', 'relevance', 'coherence', 'safety'] as const;
/** Computed locally against the ground truth, 0–1. */
const LEXICAL_METRICS = ['f1_score', 'bleu', 'rouge', 'meteor'] as const;
const METRICS = [...MODEL_JUDGED_METRICS, ...LEXICAL_METRICS] as const;
const FILE_INPUT_TYPES = ['image', 'pdf', 'text', 'excel', 'word', 'powerpoint', 'csv'] as const;
/** Tools Troupe offers the model itself (client routing); an agent's own tools may not take these names. */
const CONTROL_TOOL_NAMES = ['route', 'handoff', 'return_handoff', 'delegate'] as const;
const FUNCTION_FILE_EXTENSIONS = [...USER_MODULE_EXTENSIONS, '.py'] as const;
const VECTORSTORE_FILE_EXTENSIONS = ['.json', '.jsonl', '.csv', '.txt', '.md'] as const;

export const DEFAULT_MAX_TOOL_ROUNDS = 10;
export const DEFAULT_TOOL_TIMEOUT_MS = 30_000;
const DEFAULT_JUDGE_SCALE = 5;
/** The threshold of a lexical metric (0–1) that gives none. */
const DEFAULT_LEXICAL_THRESHOLD = 0.5;
const MAX_TOOLS = 50;
const MAX_TEST_CASES = 100;
const MAX_FILES_PER_CASE = 10;
const MAX_PARAMETERS = 50;

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const PY_IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;
const PARAMETER_NAME = /^[A-Za-z][A-Za-z0-9_]*$/;
const DOTTED_PATH = /^[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*$/;

function isHttpUrl(value: string): boolean {
  if (!/^https?:\/\//i.test(value)) return false;
  return URL.canParse(value);
}

const HttpUrl = z.string().refine(isHttpUrl, { message: '{value} is not an http(s) URL' });

/** The agent id on the mesh, as written: 1–100 characters (seed 002), which the one id rule allows (protocol/ids.ts). */
const AgentName = z
  .string()
  .min(1)
  .max(ID_LIMITS.agent)
  .regex(/^[A-Za-z][A-Za-z0-9-]*$/, '{value} must start with a letter and contain only letters, digits and -')
  .refine((v) => v !== 'user' && v !== 'sender', { message: '{value} is reserved: it names a recipient in client routing' });

const ToolName = z
  .string()
  .min(1)
  .max(100)
  .regex(/^[A-Za-z0-9_]+$/, '{value} may only contain letters, digits and _')
  .refine((v) => !(CONTROL_TOOL_NAMES as readonly string[]).includes(v), { message: "{value} is reserved for Troupe's own routing tools" });

const TimeoutMs = z.int().positive().max(600_000);

export const ModelConfigSchema = z.strictObject({
  provider: z.enum(MODEL_PROVIDERS),
  /** The model (for azure_openai: the deployment). */
  name: z.string().min(1).max(200),
  temperature: z.number().min(0).max(2).optional(),
  max_tokens: z.int().positive().optional(),
  top_p: z.number().min(0).max(1).optional(),
  /** Any OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio); the Azure endpoint; an Anthropic proxy. */
  base_url: HttpUrl.optional(),
});
export type ModelConfig = z.infer<typeof ModelConfigSchema>;

const InstructionsSchema = z.strictObject({
  file: z.string().min(1).optional(),
  inline: z.string().min(1).max(5000).optional(),
});

const ParameterSchema = z.strictObject({
  type: z.enum(PARAMETER_TYPES),
  description: z.string().min(1).max(500),
});
export type ParameterConfig = z.infer<typeof ParameterSchema>;
const Parameters = z.record(z.string(), ParameterSchema);

const toolBase = {
  name: ToolName,
  description: z.string().min(1).max(500),
  /** How long one call may take (default: the agent's tool_timeout_ms). */
  timeout_ms: TimeoutMs.optional(),
  /** A person approves each call first (docs/conversation.md#tool-approval). */
  requires_approval: z.boolean().optional(),
};

const FunctionToolSchema = z.strictObject({
  ...toolBase,
  type: z.literal('function'),
  file: z.string().min(1),
  function: z.string().min(1).max(200).regex(IDENTIFIER, '{value} is not a valid identifier'),
  parameters: Parameters.optional(),
});

const McpToolSchema = z.strictObject({
  ...toolBase,
  type: z.literal('mcp'),
  /** An npm package run with npx, a command line, or an http(s):// URL (streamable HTTP). */
  server: z.string().min(1).max(2000),
  config: z
    .object({
      args: z.array(z.string()).optional(),
      env: z.record(z.string(), z.string()).optional(),
      headers: z.record(z.string(), z.string()).optional(),
    })
    .catchall(z.unknown())
    .optional(),
});

const PromptToolSchema = z.strictObject({
  ...toolBase,
  type: z.literal('prompt'),
  /** `{parameter}` or `{{parameter}}` marks where an argument goes (template.ts). */
  template: z.string().min(1).max(5000).optional(),
  file: z.string().min(1).optional(),
  parameters: Parameters,
  model: ModelConfigSchema.optional(),
});

const VectorstoreToolSchema = z.strictObject({
  ...toolBase,
  type: z.literal('vectorstore'),
  source: z.string().min(1),
  embedding_model: z.string().min(1).max(200).optional(),
  vector_field: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)], { error: 'must be a field name or a list of field names' }).optional(),
  meta_fields: z.array(z.string().min(1)).optional(),
  chunk_size: z.int().positive().optional(),
  chunk_overlap: z.int().nonnegative().optional(),
  record_path: z.string().regex(DOTTED_PATH, '{value} must be a dot-separated path such as data.records').optional(),
  record_prefix: z.string().optional(),
  meta_prefix: z.string().optional(),
});

const ToolSchema = z.discriminatedUnion('type', [FunctionToolSchema, McpToolSchema, PromptToolSchema, VectorstoreToolSchema]);
export type FunctionToolConfig = z.infer<typeof FunctionToolSchema>;
export type PromptToolConfig = z.infer<typeof PromptToolSchema>;
export type McpToolConfig = z.infer<typeof McpToolSchema>;
export type VectorstoreToolConfig = z.infer<typeof VectorstoreToolSchema>;

const MetricSchema = z.strictObject({
  metric: z.enum(METRICS),
  /** The lowest passing score; default `defaultThreshold`. */
  threshold: z.number().optional(),
  enabled: z.boolean().default(true),
  /** Model-judged metrics only: scores run from 1 to this (default 5). */
  scale: z.int().min(2).max(100).optional(),
  model: ModelConfigSchema.optional(),
  /** false (default): a metric that errors is a soft failure. */
  fail_on_error: z.boolean().default(false),
  retry_on_failure: z.int().min(1).max(3).optional(),
  timeout_ms: TimeoutMs.optional(),
  custom_prompt: z.string().min(1).max(5000).optional(),
});
export type MetricConfig = z.infer<typeof MetricSchema>;

const EvaluationsSchema = z.strictObject({
  model: ModelConfigSchema.optional(),
  metrics: z.array(MetricSchema).min(1),
});

const FileInputSchema = z.strictObject({
  path: z.string().min(1).optional(),
  url: HttpUrl.optional(),
  type: z.enum(FILE_INPUT_TYPES),
  description: z.string().min(1).max(500).optional(),
  pages: z.array(z.int().positive()).optional(),
  sheet: z.string().min(1).optional(),
  /** A1-style cells: `A1:E100`, or one cell; `$` allowed. */
  range: z
    .string()
    .regex(/^\$?[A-Za-z]{1,3}\$?[1-9]\d{0,6}(?::\$?[A-Za-z]{1,3}\$?[1-9]\d{0,6})?$/, '{value} is not a cell range such as A1:E100')
    .optional(),
  /** Default: true for urls. */
  cache: z.boolean().optional(),
});
export type FileInput = z.infer<typeof FileInputSchema>;

const TestCaseSchema = z.strictObject({
  /** Default `case <n>` (testCaseName). */
  name: z.string().min(1).max(100).optional(),
  input: z.string().min(1).max(5000),
  expected_tools: z.array(z.string().min(1)).optional(),
  ground_truth: z.string().max(5000).optional(),
  files: z.array(FileInputSchema).optional(),
  evaluations: z.array(z.string().min(1)).optional(),
});
export type TestCase = z.infer<typeof TestCaseSchema>;

/** A test case's name: its own, else `case <n>` with n its place in `test_cases`, from 1. */
export function testCaseName(tc: Pick<TestCase, 'name'>, index: number): string {
  return tc.name ?? `case ${index + 1}`;
}

/** The top of a metric's scale: `scale` (default 5) for a judged metric, 1 for a lexical one. */
export function metricMax(m: Pick<MetricConfig, 'metric' | 'scale'>): number {
  return (MODEL_JUDGED_METRICS as readonly string[]).includes(m.metric) ? (m.scale ?? DEFAULT_JUDGE_SCALE) : 1;
}

/** The threshold a metric passes at when it gives none: the middle of a 1–scale judge scale rounded up (3 of 5), or 0.5 of 0–1. */
function defaultThreshold(m: Pick<MetricConfig, 'metric' | 'scale'>): number {
  return (MODEL_JUDGED_METRICS as readonly string[]).includes(m.metric) ? Math.ceil((1 + metricMax(m)) / 2) : DEFAULT_LEXICAL_THRESHOLD;
}

/** The metric's threshold: its own, else the default. */
export function metricThreshold(m: Pick<MetricConfig, 'metric' | 'scale' | 'threshold'>): number {
  return m.threshold ?? defaultThreshold(m);
}

export const AgentConfigSchema = z.strictObject({
  name: AgentName,
  description: z.string().max(500).optional(),
  model: ModelConfigSchema,
  instructions: InstructionsSchema,
  tools: z.array(ToolSchema).optional(),
  evaluations: EvaluationsSchema.optional(),
  test_cases: z.array(TestCaseSchema).optional(),
  max_tool_rounds: z.int().min(1).max(50).optional(),
  tool_timeout_ms: TimeoutMs.optional(),
  capabilities: CapabilitiesSchema.optional(),
  /** The thread's earlier messages the model is given (conversation.ts; default on). */
  memory: MemoryConfigSchema.optional(),
  /** A structured answer checked against a JSON Schema (conversation.ts). */
  output: OutputConfigSchema.optional(),
  /** How long a call waits for a person's approval (default 10 minutes); a later decision refuses it. */
  approval_timeout_ms: z
    .int()
    .positive()
    .max(7 * 24 * 3_600_000)
    .optional(),
});
export type AgentConfig = z.infer<typeof AgentConfigSchema>;

// ---------------------------------------------------------------------------------------------------
// Document checks. They read the raw document defensively (a field may have the wrong type: the schema
// reports that), so every rule runs even where others failed.

type Raw = Record<string, unknown>;

function isRecord(value: unknown): value is Raw {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function has(obj: Raw, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(obj, key) && obj[key] !== undefined;
}

function items(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

function str(value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

function quote(value: string): string {
  return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
}

function exactlyOne(ctx: CheckContext, obj: unknown, path: PathSegment[], a: string, b: string): void {
  if (!isRecord(obj)) return;
  if (has(obj, a) && has(obj, b)) ctx.report(path, 'exclusivity', `give either ${a} or ${b}, not both`);
  else if (!has(obj, a) && !has(obj, b)) ctx.report(path, 'exclusivity', `needs ${a} or ${b}`);
}

/** A file named relative to the agent.yaml must exist (and be a file unless `dirOk`). True when it does. */
function fileExists(ctx: CheckContext, path: PathSegment[], value: unknown, dirOk = false): boolean {
  const rel = str(value);
  if (!rel) return false;
  const kind = ctx.kindOf(rel);
  if (!kind) {
    ctx.report(path, 'references', `${quote(ctx.original(path) ?? rel)} does not exist (paths are relative to the agent.yaml)`);
    return false;
  }
  if (kind === 'dir' && !dirOk) {
    ctx.report(path, 'references', `${quote(rel)} is a directory, not a file`);
    return false;
  }
  return true;
}

/**
 * Names a source file defines at its top level: exported functions, constants and classes in JS/TS
 * (`export function f`, `export const f`, `export { a as f }`), or `def f` / `f = …` / imports in Python.
 * Undefined when the file re-exports everything (`export * from`) and nothing can be concluded.
 */
export function definedNames(source: string, ext: string): Set<string> | undefined {
  const names = new Set<string>();
  if (ext === '.py') {
    for (const m of source.matchAll(/^(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_]\w*)/gm)) names.add(m[1]!);
    for (const m of source.matchAll(/^([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=(?!=)/gm)) names.add(m[1]!);
    for (const m of source.matchAll(/^(?:from[ \t]+\S+[ \t]+)?import[ \t]+([^\n#]+)/gm)) {
      for (const part of m[1]!.replace(/[()]/g, '').split(',')) {
        const words = part.trim().split(/\s+/);
        const name = words.length === 3 && words[1] === 'as' ? words[2] : words[0];
        if (name) names.add(name.split('.')[0]!);
      }
    }
    return names;
  }
  if (/\bexport\s*\*\s*from\b/.test(source)) return undefined;
  for (const m of source.matchAll(/\bexport\s+(?:default\s+)?(?:async\s+)?(?:function\s*\*?\s*|const\s+|let\s+|var\s+|class\s+)([A-Za-z_$][\w$]*)/g)) {
    names.add(m[1]!);
  }
  for (const m of source.matchAll(/\bexport\s*\{([^}]*)\}/g)) {
    for (const part of m[1]!.split(',')) {
      const words = part.trim().split(/\s+/);
      const name = words.length === 3 && words[1] === 'as' ? words[2] : words[0];
      if (name) names.add(name);
    }
  }
  return names;
}

/**
 * A prompt template against its parameters: a placeholder that is not a parameter is a problem, a
 * parameter it never uses a warning — each at its place: in the agent.yaml for an inline template, in
 * the template's own file for `file:`.
 */
function checkTemplate(ctx: CheckContext, template: string, params: string[], toolPath: PathSegment[], file: string | undefined): void {
  const where: PathSegment[] = [...toolPath, file === undefined ? 'template' : 'file'];
  const seen = new Map<string, number>();
  const used = new Set<string>();
  for (const p of templatePlaceholders(template)) {
    // Which appearance of this text it is, to find it in the YAML source (an escaped one counts too).
    let occurrence = 0;
    for (let i = template.indexOf(p.raw); i !== -1 && i < p.offset; i = template.indexOf(p.raw, i + 1)) occurrence++;
    used.add(p.name);
    if (params.includes(p.name) || seen.has(p.raw)) continue;
    seen.set(p.raw, p.offset);
    const at = file === undefined ? { text: p.raw, occurrence } : { file, ...lineColumn(template, p.offset) };
    ctx.report(
      where,
      'references',
      `the template uses ${p.raw}, which is not one of its parameters (${params.join(', ') || 'none'}); write \\{ for a literal brace`,
      at,
    );
  }
  for (const name of params) {
    if (!used.has(name))
      ctx.warn([...toolPath, 'parameters', name], 'references', `the template never uses {${name}}: the model is asked for it and it goes nowhere`, 'key');
  }
}

function checkParameters(ctx: CheckContext, params: unknown, path: PathSegment[], required: boolean): string[] {
  if (!isRecord(params)) return [];
  const names = Object.keys(params);
  if (required && names.length === 0) ctx.report(path, 'constraints', 'must declare at least one parameter');
  if (names.length > MAX_PARAMETERS) ctx.report(path, 'constraints', `must have at most ${MAX_PARAMETERS} parameters (it has ${names.length})`);
  for (const name of names) {
    if (name.length > 64 || !PARAMETER_NAME.test(name)) {
      ctx.report(
        [...path, name],
        'constraints',
        `parameter name ${quote(name)} must start with a letter and contain only letters, digits and _ (at most 64)`,
        'key',
      );
    }
  }
  return names;
}

/** A feature whose optional packages are not installed: the file is valid, but the agent would not start here. */
function warnIfMissing(ctx: CheckContext, path: PathSegment[], feature: OptionalFeature): void {
  const missing = missingFor(feature);
  if (missing.length) ctx.warn(path, 'references', missingMessage(OPTIONAL_FEATURES[feature].feature, missing));
}

/** Rules of a model block that depend on its provider (agent.yaml's model, team.yaml's router and synthesis models). */
export function checkModel(ctx: CheckContext, model: unknown, path: PathSegment[]): void {
  if (!isRecord(model)) return;
  if (model.provider === 'anthropic') warnIfMissing(ctx, [...path, 'provider'], 'anthropic');
  if (model.provider === 'anthropic' && typeof model.temperature === 'number' && model.temperature > 1) {
    ctx.report([...path, 'temperature'], 'constraints', `must be at most 1 for anthropic, not ${model.temperature}`);
  }
}

function checkTool(ctx: CheckContext, tool: unknown, i: number): void {
  if (!isRecord(tool)) return;
  const path: PathSegment[] = ['tools', i];
  const type = tool.type;
  if (type === 'function') {
    const file = str(tool.file);
    const ext = file ? extname(file).toLowerCase() : '';
    if (file && !(FUNCTION_FILE_EXTENSIONS as readonly string[]).includes(ext)) {
      ctx.report([...path, 'file'], 'constraints', `${quote(file)} must be a ${FUNCTION_FILE_EXTENSIONS.join(', ')} file`);
    } else if (fileExists(ctx, [...path, 'file'], tool.file)) {
      const fn = str(tool.function);
      const source = ctx.readText(file!);
      const validName = fn && (ext === '.py' ? PY_IDENTIFIER : IDENTIFIER).test(fn);
      if (fn && validName && source !== undefined) {
        const names = definedNames(source, ext);
        if (names && !names.has(fn)) ctx.report([...path, 'function'], 'references', `${quote(fn)} is not defined in ${file}`);
      }
      if (fn && !validName && ext === '.py' && IDENTIFIER.test(fn)) {
        ctx.report([...path, 'function'], 'constraints', `${quote(fn)} is not a valid Python identifier`);
      }
    }
    checkParameters(ctx, tool.parameters, [...path, 'parameters'], false);
  } else if (type === 'prompt') {
    exactlyOne(ctx, tool, path, 'template', 'file');
    const params = checkParameters(ctx, tool.parameters, [...path, 'parameters'], true);
    let template = str(tool.template);
    let templateFile: string | undefined;
    if (!has(tool, 'template') && has(tool, 'file') && fileExists(ctx, [...path, 'file'], tool.file)) {
      templateFile = str(tool.file)!;
      template = ctx.readText(templateFile);
    }
    checkModel(ctx, tool.model, [...path, 'model']);
    if (template !== undefined && isRecord(tool.parameters)) checkTemplate(ctx, template, params, path, templateFile);
  } else if (type === 'vectorstore') {
    warnIfMissing(ctx, [...path, 'type'], 'vectorstore');
    const source = str(tool.source);
    if (fileExists(ctx, [...path, 'source'], tool.source, true) && source && ctx.kindOf(source) === 'file') {
      const ext = extname(source).toLowerCase();
      if (!(VECTORSTORE_FILE_EXTENSIONS as readonly string[]).includes(ext)) {
        ctx.report([...path, 'source'], 'constraints', `${quote(source)} must be a ${VECTORSTORE_FILE_EXTENSIONS.join(', ')} file or a directory`);
      } else if (ext !== '.json') {
        for (const key of ['record_path', 'record_prefix'] as const) {
          if (has(tool, key)) ctx.report([...path, key], 'constraints', `applies to .json sources only (the source is ${ext})`);
        }
      }
    }
    const size = tool.chunk_size;
    const overlap = tool.chunk_overlap;
    if (typeof size === 'number' && typeof overlap === 'number' && size > 0 && overlap >= size) {
      ctx.report([...path, 'chunk_overlap'], 'constraints', `must be smaller than chunk_size (${size})`);
    }
  } else if (type === 'mcp') {
    warnIfMissing(ctx, [...path, 'type'], 'mcp');
    const server = str(tool.server);
    const config = tool.config;
    if (server) {
      const isUrl = /^https?:\/\//i.test(server);
      if (isUrl && !URL.canParse(server)) ctx.report([...path, 'server'], 'constraints', `${quote(server)} is not a valid URL`);
      if (isRecord(config)) {
        if (isUrl) {
          for (const key of ['args', 'env'] as const) {
            if (has(config, key)) ctx.report([...path, 'config', key], 'constraints', 'applies to servers run as a command, not to an http(s) server');
          }
        } else if (has(config, 'headers')) {
          ctx.report([...path, 'config', 'headers'], 'constraints', 'applies to http(s) servers, not to a server run as a command');
        }
      }
    }
  }
}

function checkEvaluations(ctx: CheckContext, evaluations: unknown): string[] {
  if (!isRecord(evaluations)) return [];
  checkModel(ctx, evaluations.model, ['evaluations', 'model']);
  const names: string[] = [];
  const seen = new Map<string, number>();
  items(evaluations.metrics).forEach((metric, i) => {
    if (!isRecord(metric)) return;
    const path: PathSegment[] = ['evaluations', 'metrics', i];
    const name = str(metric.metric);
    if (!name || !(METRICS as readonly string[]).includes(name)) return;
    names.push(name);
    const first = seen.get(name);
    if (first !== undefined) ctx.report([...path, 'metric'], 'constraints', `${quote(name)} is already configured at evaluations.metrics[${first}]`);
    else seen.set(name, i);
    checkModel(ctx, metric.model, [...path, 'model']);
    const judged = (MODEL_JUDGED_METRICS as readonly string[]).includes(name);
    const threshold = metric.threshold;
    if (!judged && has(metric, 'scale')) {
      ctx.report([...path, 'scale'], 'constraints', `applies to model-judged metrics only (${name} is scored 0–1)`);
    }
    const scale = judged && typeof metric.scale === 'number' && Number.isInteger(metric.scale) && metric.scale >= 2 ? metric.scale : DEFAULT_JUDGE_SCALE;
    const [min, max] = judged ? [1, scale] : [0, 1];
    if (typeof threshold === 'number' && (threshold < min || threshold > max)) {
      ctx.report([...path, 'threshold'], 'constraints', `${threshold} is outside the ${min}–${max} scale of ${name}`);
    }
  });
  return names;
}

function checkFileInput(ctx: CheckContext, file: unknown, path: PathSegment[]): void {
  if (!isRecord(file)) return;
  exactlyOne(ctx, file, path, 'path', 'url');
  if (has(file, 'path') && !has(file, 'url')) fileExists(ctx, [...path, 'path'], file.path);
  const type = str(file.type);
  if (!type || !(FILE_INPUT_TYPES as readonly string[]).includes(type)) return;
  if (type in OPTIONAL_FEATURES) warnIfMissing(ctx, [...path, 'type'], type as OptionalFeature);
  if (has(file, 'pages') && !['pdf', 'word', 'powerpoint'].includes(type)) {
    ctx.report([...path, 'pages'], 'constraints', `applies to pdf, word and powerpoint files, not ${type}`);
  }
  for (const key of ['sheet', 'range'] as const) {
    if (has(file, key) && type !== 'excel') ctx.report([...path, key], 'constraints', `applies to excel files, not ${type}`);
  }
}

/** The rules of agent.yaml beyond its schema: exclusivity, references, uniqueness and counts. */
function checkAgentDocument(raw: unknown, ctx: CheckContext): void {
  if (!isRecord(raw)) return;
  checkModel(ctx, raw.model, ['model']);
  exactlyOne(ctx, raw.instructions, ['instructions'], 'file', 'inline');
  if (isRecord(raw.instructions) && has(raw.instructions, 'file') && !has(raw.instructions, 'inline')) {
    fileExists(ctx, ['instructions', 'file'], raw.instructions.file);
  }

  const tools = items(raw.tools);
  if (tools.length > MAX_TOOLS) ctx.report(['tools'], 'constraints', `must have at most ${MAX_TOOLS} items (it has ${tools.length})`);
  const toolNames = new Map<string, number>();
  tools.forEach((tool, i) => {
    checkTool(ctx, tool, i);
    const name = isRecord(tool) ? str(tool.name) : undefined;
    if (!name) return;
    const first = toolNames.get(name);
    if (first !== undefined) ctx.report(['tools', i, 'name'], 'constraints', `${quote(name)} is already the name of tools[${first}]`);
    else toolNames.set(name, i);
  });

  const metrics = checkEvaluations(ctx, raw.evaluations);
  checkOutput(ctx, raw.output);

  const cases = items(raw.test_cases);
  if (cases.length > MAX_TEST_CASES) ctx.report(['test_cases'], 'constraints', `must have at most ${MAX_TEST_CASES} items (it has ${cases.length})`);
  const caseNames = new Map<string, number>();
  cases.forEach((tc, i) => {
    if (!isRecord(tc)) return;
    const path: PathSegment[] = ['test_cases', i];
    items(tc.expected_tools).forEach((tool, j) => {
      if (typeof tool === 'string' && tool && !toolNames.has(tool)) {
        const known = [...toolNames.keys()];
        ctx.report(
          [...path, 'expected_tools', j],
          'references',
          `${quote(tool)} is not a tool of this agent (${known.length ? `tools: ${known.join(', ')}` : 'it has no tools'})`,
        );
      }
    });
    items(tc.evaluations).forEach((metric, j) => {
      if (typeof metric === 'string' && metric && !metrics.includes(metric)) {
        ctx.report(
          [...path, 'evaluations', j],
          'references',
          `${quote(metric)} is not a configured metric (${metrics.length ? `metrics: ${metrics.join(', ')}` : 'the agent has no evaluations'})`,
        );
      }
    });
    const files = items(tc.files);
    if (files.length > MAX_FILES_PER_CASE)
      ctx.report([...path, 'files'], 'constraints', `must have at most ${MAX_FILES_PER_CASE} items (it has ${files.length})`);
    files.forEach((file, j) => checkFileInput(ctx, file, [...path, 'files', j]));
    const own = str(tc.name);
    if (own || !has(tc, 'name')) {
      // A case without a name is called `case <n>`: that name must be free too.
      const name = own ?? testCaseName({}, i);
      const first = caseNames.get(name);
      if (first === undefined) caseNames.set(name, i);
      else if (own) ctx.report([...path, 'name'], 'constraints', `${quote(name)} is already the name of test_cases[${first}]`);
      else ctx.report(path, 'constraints', `has no name, and its default name ${quote(name)} is already the name of test_cases[${first}]: give it a name`);
    }
  });
}

/** A default `troupe validate` says it applied: where, and what it means. */
export interface AppliedDefault {
  path: string;
  message: string;
}

/**
 * The defaults of a valid agent.yaml that seed 002 leaves open (unnamed test cases and metrics without a
 * threshold) and the memory an agent without a `memory` block has.
 */
export function appliedDefaults(config: AgentConfig): AppliedDefault[] {
  const out: AppliedDefault[] = [];
  if (!config.memory) {
    const { max_messages, max_tokens } = DEFAULT_MEMORY;
    out.push({
      path: 'memory',
      message: `the model gets the thread's newest ${max_messages} earlier messages, at most ${max_tokens} tokens of them; older turns are summarised by the agent's model`,
    });
  }
  (config.evaluations?.metrics ?? []).forEach((m, i) => {
    if (m.threshold !== undefined) return;
    const judged = (MODEL_JUDGED_METRICS as readonly string[]).includes(m.metric);
    const scale = judged ? `the middle of its 1–${metricMax(m)} scale, rounded up` : 'half of its 0–1 scale';
    out.push({ path: `evaluations.metrics[${i}].threshold`, message: `${m.metric} passes at ${defaultThreshold(m)} (no threshold: ${scale})` });
  });
  (config.test_cases ?? []).forEach((tc, i) => {
    if (tc.name === undefined)
      out.push({ path: `test_cases[${i}].name`, message: `the case is called ${JSON.stringify(testCaseName(tc, i))} (no name: its place in the list)` });
  });
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Loading

export interface LoadedAgentConfig {
  config: AgentConfig;
  /** What `troupe validate` warns about (the file is valid regardless). */
  warnings?: ConfigProblem[];
  /** The agent.yaml as named by the caller. */
  file: string;
  /** Its folder (absolute): relative paths in the config resolve against it. */
  dir: string;
}

/** Every problem of an agent.yaml (empty when it is valid), its warnings, and the config when it is valid. */
export function validateAgentFile(
  file: string,
  env: NodeJS.ProcessEnv = process.env,
): { problems: ConfigProblem[]; warnings: ConfigProblem[]; loaded?: LoadedAgentConfig } {
  const res = loadYamlConfig({ file, schema: AgentConfigSchema, check: checkAgentDocument, env });
  const { warnings } = res;
  return res.ok ? { problems: [], warnings, loaded: { config: res.value, file: res.file, dir: res.dir, warnings } } : { problems: res.problems, warnings };
}

/** Loads an agent.yaml; throws ConfigError (CONFIG_INVALID) with every problem when it is not valid. */
export function loadAgentConfig(file: string, env: NodeJS.ProcessEnv = process.env): LoadedAgentConfig {
  const { problems, loaded } = validateAgentFile(file, env);
  if (!loaded) throw new ConfigError(file, problems);
  return loaded;
}
