/**
 * Loads a YAML configuration file and validates it, reporting every problem at once with its file, line,
 * column and field path:
 *
 *   support/agent.yaml:14:11 tools[2].name: "web search" may only contain letters, digits and _
 *
 * The pipeline is the same for every kind of configuration (agent.yaml here, team.yaml later):
 *
 *   1. read (size-capped) and parse with `yaml`, keeping node positions (a syntax error stops here);
 *   2. resolve `${VAR}` (or `${VAR:-default}`) in every string from the environment (an unset variable is a problem, and
 *      messages quote the `${VAR}` text rather than its value, which may be a secret);
 *   3. validate with the kind's zod schema (types, enums, ranges, patterns);
 *   4. run the kind's document checks (mutual exclusivity, references to other fields and to files on
 *      disk, uniqueness), which see the raw document so they run even where step 3 failed.
 *
 * Problems are sorted by phase — types, then mutual exclusivity, then references, then constraints — and
 * by position within a phase. A kind plugs in with `loadYamlConfig({ file, schema, check })`.
 *
 * A check may also report a warning: something that works but is probably not what the author meant (a
 * prompt-tool parameter its template never uses). Warnings do not make a file invalid. A problem or a
 * warning may point inside a string (at a placeholder of a template) or into another file the
 * configuration names (a template file), at that file's own line and column.
 */
import { readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, resolve } from 'node:path';
import { LineCounter, isMap, isScalar, isSeq, parseDocument, type Document, type Pair } from 'yaml';
import type { z } from 'zod';
import { TroupeError } from '../protocol/errors.js';

/** In the order they are reported. `syntax` problems stop the pipeline. */
const PHASES = ['syntax', 'types', 'exclusivity', 'references', 'constraints'] as const;
type Phase = (typeof PHASES)[number];

export type PathSegment = string | number;

export interface ConfigProblem {
  /** The file as it was named (relative paths stay relative). */
  file: string;
  line: number;
  column: number;
  /** `tools[2].name`, or `(root)`. */
  path: string;
  message: string;
  phase: Phase;
}

/** One configuration file is at most this big; anything larger is refused before parsing. */
const MAX_CONFIG_BYTES = 1024 * 1024;
/** YAML aliases expand; this many are enough for any hand-written file and stop alias bombs. */
const MAX_ALIASES = 100;
const ENV_REF = /\$\{([^}]*)\}/g;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** `tools[2].name` from `['tools', 2, 'name']`. */
function formatPath(path: readonly PathSegment[]): string {
  if (path.length === 0) return '(root)';
  return path.map((seg, i) => (typeof seg === 'number' ? `[${seg}]` : i === 0 ? seg : `.${seg}`)).join('');
}

export function formatProblem(p: ConfigProblem): string {
  return `${p.file}:${p.line}:${p.column} ${p.path}: ${p.message}`;
}

/** Thrown when a configuration cannot be used; `details.problems` holds every problem. */
export class ConfigError extends TroupeError {
  constructor(
    readonly file: string,
    readonly problems: ConfigProblem[],
  ) {
    super('CONFIG_INVALID', `${file} has ${problems.length} problem${problems.length === 1 ? '' : 's'}:\n${problems.map(formatProblem).join('\n')}`, {
      file,
      problems,
    });
  }
}

/**
 * Where in the file a problem is: at the key or the value of its path, at the `occurrence`-th (0-based)
 * appearance of `text` inside the string value, or at a line and column of another file (relative to
 * the configuration's folder).
 */
type ProblemAt = 'key' | 'value' | { text: string; occurrence: number } | { file: string; line: number; column: number };

/** What a document check may ask about the file system; relative paths resolve against the file's folder. */
export interface CheckContext {
  /** The folder of the configuration file. */
  readonly dir: string;
  /** `file`, `dir` or undefined (missing or unreadable), for a path relative to `dir`. */
  kindOf(path: string): 'file' | 'dir' | undefined;
  /** The text of a file relative to `dir`, or undefined if it cannot be read or is over the size cap. */
  readText(path: string): string | undefined;
  /** Records a problem at `path` (at the key itself with `at: 'key'`, e.g. for an unknown field). */
  report(path: readonly PathSegment[], phase: Exclude<Phase, 'syntax' | 'types'>, message: string, at?: ProblemAt): void;
  /** Records a warning: the file stays valid. */
  warn(path: readonly PathSegment[], phase: Exclude<Phase, 'syntax' | 'types'>, message: string, at?: ProblemAt): void;
  /** The text a string had before `${VAR}` resolution, when it had any (to quote it instead of a secret). */
  original(path: readonly PathSegment[]): string | undefined;
}

export interface LoadOptions<S extends z.ZodType> {
  file: string;
  schema: S;
  /** Document checks beyond the schema: exclusivity, references, uniqueness. */
  check?: (raw: unknown, ctx: CheckContext) => void;
  env?: NodeJS.ProcessEnv;
  maxBytes?: number;
}

export type LoadResult<T> =
  | { ok: true; value: T; file: string; dir: string; warnings: ConfigProblem[] }
  | { ok: false; problems: ConfigProblem[]; file: string; warnings: ConfigProblem[] };

/** Positions of nodes in one parsed document. */
class Positions {
  constructor(
    private readonly doc: Document,
    private readonly lines: LineCounter,
    private readonly source: string,
  ) {}

  /** 1-based line and column of the node at `path` (or its key, or text inside it), else of the deepest ancestor that exists. */
  at(path: readonly PathSegment[], at: 'key' | 'value' | { text: string; occurrence: number } = 'value'): { line: number; column: number } {
    let node: unknown = this.doc.contents;
    let offset = rangeStart(node) ?? 0;
    for (let i = 0; i < path.length; i++) {
      const seg = path[i]!;
      if (isMap(node)) {
        const pair = node.items.find((p) => keyText(p) === String(seg));
        if (!pair) break;
        const last = i === path.length - 1;
        if (last && at === 'key') {
          offset = rangeStart(pair.key) ?? offset;
          break;
        }
        node = pair.value;
        // `key:` with nothing after it has no value node: point at the key.
        offset = rangeStart(node) ?? rangeStart(pair.key) ?? offset;
      } else if (isSeq(node) && typeof seg === 'number') {
        node = node.items[seg];
        if (node === undefined) break;
        offset = rangeStart(node) ?? offset;
      } else break;
    }
    if (typeof at === 'object' && isScalar(node) && node.range) offset = this.within(node.range, at) ?? offset;
    const pos = this.lines.linePos(offset);
    return { line: pos.line, column: pos.col };
  }

  /**
   * The offset of the `occurrence`-th `text` in a scalar's source. Quoting and folding change a string's
   * characters but not a run without quotes, backslashes or line breaks — a placeholder — so its n-th
   * appearance in the value is its n-th in the source. Undefined when it is not found there.
   */
  private within(range: [number, number, number], at: { text: string; occurrence: number }): number | undefined {
    const source = this.source.slice(range[0], range[1]);
    let found = -1;
    for (let n = 0; n <= at.occurrence; n++) {
      found = source.indexOf(at.text, found + 1);
      if (found === -1) return undefined;
    }
    return range[0] + found;
  }
}

function rangeStart(node: unknown): number | undefined {
  const range = (node as { range?: [number, number, number] } | null | undefined)?.range;
  return range ? range[0] : undefined;
}

function keyText(pair: Pair): string {
  return isScalar(pair.key) ? String(pair.key.value) : String(pair.key);
}

/**
 * Replaces `${VAR}` in every string scalar of the document, in place. Returns the original text of every
 * string it changed (by path) and reports unset or malformed variables.
 */
function resolveEnv(
  node: unknown,
  path: PathSegment[],
  env: NodeJS.ProcessEnv,
  originals: Map<string, string>,
  report: (path: PathSegment[], message: string) => void,
): void {
  if (isMap(node)) {
    for (const pair of node.items) resolveEnv(pair.value, [...path, keyText(pair)], env, originals, report);
  } else if (isSeq(node)) {
    node.items.forEach((item, i) => resolveEnv(item, [...path, i], env, originals, report));
  } else if (isScalar(node) && typeof node.value === 'string' && node.value.includes('${')) {
    const text = node.value;
    const missing: string[] = [];
    const resolved = text.replace(ENV_REF, (whole, inner: string) => {
      // `${NAME}`, or `${NAME:-default}` for a value used when NAME is unset.
      const split = inner.indexOf(':-');
      const name = split === -1 ? inner : inner.slice(0, split);
      if (!ENV_NAME.test(name)) {
        missing.push(`"${whole}" is not a valid variable reference (use \${NAME} with letters, digits and _)`);
        return whole;
      }
      const value = env[name] ?? (split === -1 ? undefined : inner.slice(split + 2));
      if (value === undefined) {
        missing.push(`environment variable ${name} is not set`);
        return whole;
      }
      return value;
    });
    for (const message of missing) report(path, message);
    if (missing.length === 0) {
      originals.set(JSON.stringify(path), text);
      node.value = resolved;
    }
  }
}

/** A short, safe rendering of a value for a message. */
function describeValue(value: unknown, original?: string): string {
  if (original !== undefined) return JSON.stringify(original);
  if (value === null || value === undefined) return 'nothing';
  if (typeof value === 'string') return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a map';
  return String(value);
}

const EXPECTED: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  int: 'a whole number',
  boolean: 'true or false',
  array: 'a list',
  object: 'a map',
  record: 'a map',
};

/** The phase a zod issue belongs to: shape problems are types, the rest are constraints. */
function phaseOf(issue: z.core.$ZodIssue): Phase {
  if (issue.code === 'invalid_type' || issue.code === 'unrecognized_keys') return 'types';
  if (issue.code === 'custom') {
    const phase = (issue.params as { phase?: Phase } | undefined)?.phase;
    return phase ?? 'constraints';
  }
  // A union of shapes (e.g. a string or a list) failed: a type problem; a bad discriminator is an enum.
  if (issue.code === 'invalid_union') return 'discriminator' in issue && issue.discriminator ? 'constraints' : 'types';
  return 'constraints';
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** A message a person can act on, for one zod issue. `value` is the input at the issue's path. */
function messageOf(issue: z.core.$ZodIssue, value: unknown, original: string | undefined): string {
  switch (issue.code) {
    case 'invalid_type':
      if (issue.path.length === 0 && (value === undefined || value === null)) return 'the file holds no settings';
      if (value === undefined) return 'is required';
      return `must be ${EXPECTED[issue.expected] ?? issue.expected}, not ${describeValue(value, original)}`;
    case 'invalid_value':
      return `${describeValue(value, original)} is not one of ${issue.values.map(String).join(', ')}`;
    case 'invalid_union':
      if ('discriminator' in issue && issue.discriminator) {
        if (value === undefined) return 'is required';
        const options = (issue as { options?: unknown[] }).options ?? [];
        return `${describeValue(value, original)} is not one of ${options.map(String).join(', ')}`;
      }
      return issue.message;
    case 'too_small': {
      const min = Number(issue.minimum);
      if (issue.origin === 'string') return min <= 1 ? 'must not be empty' : `must be at least ${plural(min, 'character')}`;
      if (issue.origin === 'array' || issue.origin === 'set') return `must have at least ${plural(min, 'item')}`;
      if (issue.origin === 'record' || issue.origin === 'object') return `must have at least ${plural(min, 'entry')}`;
      return issue.inclusive
        ? `must be at least ${min}, not ${describeValue(value, original)}`
        : `must be greater than ${min}, not ${describeValue(value, original)}`;
    }
    case 'too_big': {
      const max = Number(issue.maximum);
      if (issue.origin === 'string') return `must be at most ${plural(max, 'character')} (it has ${typeof value === 'string' ? value.length : '?'})`;
      if (issue.origin === 'array' || issue.origin === 'set')
        return `must have at most ${plural(max, 'item')} (it has ${Array.isArray(value) ? value.length : '?'})`;
      return issue.inclusive
        ? `must be at most ${max}, not ${describeValue(value, original)}`
        : `must be less than ${max}, not ${describeValue(value, original)}`;
    }
    case 'not_multiple_of':
      return `must be a multiple of ${String(issue.divisor)}`;
    default:
      // invalid_format and custom issues carry messages written for this schema; `{value}` marks the value.
      return issue.message.replace('{value}', describeValue(value, original));
  }
}

function valueAt(root: unknown, path: readonly PathSegment[]): unknown {
  let node = root;
  for (const seg of path) {
    if (node === null || typeof node !== 'object') return undefined;
    node = Array.isArray(node) ? node[seg as number] : Object.prototype.hasOwnProperty.call(node, seg) ? (node as Record<string, unknown>)[seg] : undefined;
  }
  return node;
}

/** The file's text, or the reason it cannot be read. */
function readConfigText(path: string, maxBytes: number): { text: string } | { error: string } {
  try {
    const size = statSync(path).size;
    if (size > maxBytes) return { error: `the file is ${size} bytes; a configuration file may be at most ${maxBytes}` };
    return { text: readFileSync(path, 'utf8') };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return {
      error: code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'is a directory, not a file' : `cannot be read (${code ?? (err as Error).message})`,
    };
  }
}

/** Parses, resolves `${VAR}`, validates and checks one configuration file. Never throws for bad input. */
export function loadYamlConfig<S extends z.ZodType>(opts: LoadOptions<S>): LoadResult<z.infer<S>> {
  const { file } = opts;
  const abs = resolve(file);
  const dir = dirname(abs);
  const problems: ConfigProblem[] = [];
  const read = readConfigText(abs, opts.maxBytes ?? MAX_CONFIG_BYTES);
  if ('error' in read) return { ok: false, file, problems: [{ file, line: 1, column: 1, path: '(root)', message: read.error, phase: 'syntax' }], warnings: [] };

  const lines = new LineCounter();
  const doc = parseDocument(read.text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true, strict: true });
  if (doc.errors.length) {
    // One error per position: a YAML mistake often trips several parser rules at the same place.
    const seen = new Set<number>();
    for (const err of doc.errors) {
      if (seen.has(err.pos[0])) continue;
      seen.add(err.pos[0]);
      const pos = lines.linePos(err.pos[0]);
      problems.push({ file, line: pos.line, column: pos.col, path: '(root)', message: `YAML syntax: ${err.message.split('\n')[0]}`, phase: 'syntax' });
    }
    return { ok: false, file, problems, warnings: [] };
  }
  const positions = new Positions(doc, lines, read.text);
  const warnings: ConfigProblem[] = [];
  const locate = (path: readonly PathSegment[], phase: Phase, message: string, at: ProblemAt = 'value'): ConfigProblem => {
    // Another file is named as the configuration was: `agents/support.yaml` + `prompts/x.txt` → `agents/prompts/x.txt`.
    if (typeof at === 'object' && 'file' in at)
      return { file: normalize(join(dirname(file), at.file)), line: at.line, column: at.column, path: formatPath(path), message, phase };
    const pos = positions.at(path, at);
    return { file, line: pos.line, column: pos.column, path: formatPath(path), message, phase };
  };
  const add = (path: readonly PathSegment[], phase: Phase, message: string, at: ProblemAt = 'value') => {
    problems.push(locate(path, phase, message, at));
  };

  const originals = new Map<string, string>();
  /** Strings whose variables could not be resolved: other rules about them would only repeat that. */
  const unresolved = new Set<string>();
  resolveEnv(doc.contents, [], opts.env ?? process.env, originals, (path, message) => {
    unresolved.add(JSON.stringify(path));
    add(path, 'references', message);
  });
  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: MAX_ALIASES });
  } catch (err) {
    add([], 'syntax', `YAML: ${(err as Error).message}`);
    return { ok: false, file, problems, warnings: [] };
  }
  const original = (path: readonly PathSegment[]) => originals.get(JSON.stringify(path));

  const parsed = opts.schema.safeParse(raw, { reportInput: true });
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const path = issue.path.filter((p): p is PathSegment => typeof p !== 'symbol');
      if (unresolved.has(JSON.stringify(path))) continue;
      if (issue.code === 'unrecognized_keys') {
        for (const key of issue.keys) add([...path, key], 'types', 'is not a known field', 'key');
        continue;
      }
      add(path, phaseOf(issue), messageOf(issue, valueAt(raw, path), original(path)));
    }
  }

  opts.check?.(raw, {
    dir,
    kindOf: (p) => {
      try {
        const st = statSync(resolve(dir, p));
        return st.isDirectory() ? 'dir' : st.isFile() ? 'file' : undefined;
      } catch {
        return undefined;
      }
    },
    readText: (p) => {
      const res = readConfigText(resolve(dir, p), opts.maxBytes ?? MAX_CONFIG_BYTES);
      return 'text' in res ? res.text : undefined;
    },
    report: (path, phase, message, at) => {
      if (!unresolved.has(JSON.stringify(path))) add(path, phase, message, at);
    },
    warn: (path, phase, message, at) => {
      if (!unresolved.has(JSON.stringify(path))) warnings.push(locate(path, phase, message, at));
    },
    original,
  });

  const rank = (p: Phase) => PHASES.indexOf(p);
  // Stable: problems at one position keep the order they were found in; this file's before another's.
  const order = (a: ConfigProblem, b: ConfigProblem) =>
    rank(a.phase) - rank(b.phase) || Number(a.file !== file) - Number(b.file !== file) || a.line - b.line || a.column - b.column;
  warnings.sort(order);
  if (problems.length) {
    problems.sort(order);
    return { ok: false, file, problems, warnings };
  }
  return { ok: true, file, dir, value: parsed.data as z.infer<S>, warnings };
}
