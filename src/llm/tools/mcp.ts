/**
 * `type: mcp` tools: a Model Context Protocol server whose tools the model may call, through the official
 * `@modelcontextprotocol/sdk` client.
 *
 * - `server` is an http(s) URL (streamable HTTP, `config.headers` sent with every request), a command
 *   line (`node server.js --root docs`, `python3 -m my_server`; `config.args` appended), a script file
 *   (`.js`/`.mjs`/`.cjs` run with this Node, `.ts`/`.mts` with this Node and tsx, `.py` with python3), or
 *   an npm package name (`@modelcontextprotocol/server-memory`), run with `npx -y` unless a program of that
 *   name is on the PATH. A command runs in the agent.yaml's folder with only a safe subset of the
 *   environment (the SDK's: HOME, PATH, USER, …) plus `config.env` — the agent's model keys stay out.
 * - The server's tools are listed at start and offered to the model as `<tool name>__<server's tool>`
 *   with the server's JSON Schema; a call goes to the server as it is, and a result with `isError` is a
 *   tool error for the model.
 * - One server per agent process: replicas of an agent share it (`McpServerPool`, reference-counted) and
 *   the last one to close closes it. A server that dies (its process exits, its HTTP endpoint stops
 *   answering) is restarted with backoff (0.25 s doubling to 10 s); a call in flight when it died is a
 *   tool error, calls made while it restarts wait for it (within their own timeout). At process exit, the
 *   servers still running are killed.
 * - A server that cannot start — the program does not exist, it exits, it does not answer the MCP
 *   handshake in `config.startup_timeout_ms` (default 60 s: npx may download the package) — stops the
 *   agent's start with TOOL_START_FAILED naming the tool, the server and the last lines it wrote.
 * - The MCP SDK is an optional package (config/optional.ts), imported when the first server starts; an
 *   agent with an mcp tool does not start without it (DEPENDENCY_MISSING names the npm i to run).
 */
import { accessSync, constants, existsSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { delimiter, extname, isAbsolute, join, resolve } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { McpToolConfig } from '../../config/agent.js';
import { OPTIONAL_FEATURES } from '../../config/optional.js';
import { importOptional, requireInstalled } from '../optional.js';
import { TroupeError } from '../../protocol/errors.js';
import type { JsonSchemaObject } from '../../model/types.js';
import { toResultText, type RunnableTool } from './types.js';

interface McpSdk {
  Client: typeof import('@modelcontextprotocol/sdk/client/index.js').Client;
  StdioClientTransport: typeof import('@modelcontextprotocol/sdk/client/stdio.js').StdioClientTransport;
  StreamableHTTPClientTransport: typeof import('@modelcontextprotocol/sdk/client/streamableHttp.js').StreamableHTTPClientTransport;
  McpError: typeof import('@modelcontextprotocol/sdk/types.js').McpError;
}

let sdk: Promise<McpSdk> | undefined;

/** The SDK's client parts, imported once per process. */
function loadSdk(): Promise<McpSdk> {
  const { feature } = OPTIONAL_FEATURES.mcp;
  sdk ??= Promise.all([
    importOptional<Pick<McpSdk, 'Client'>>('@modelcontextprotocol/sdk/client/index.js', feature),
    importOptional<Pick<McpSdk, 'StdioClientTransport'>>('@modelcontextprotocol/sdk/client/stdio.js', feature),
    importOptional<Pick<McpSdk, 'StreamableHTTPClientTransport'>>('@modelcontextprotocol/sdk/client/streamableHttp.js', feature),
    importOptional<Pick<McpSdk, 'McpError'>>('@modelcontextprotocol/sdk/types.js', feature),
  ]).then(([a, b, c, d]) => ({
    Client: a.Client,
    StdioClientTransport: b.StdioClientTransport,
    StreamableHTTPClientTransport: c.StreamableHTTPClientTransport,
    McpError: d.McpError,
  }));
  return sdk;
}

/** How Troupe introduces itself in the MCP handshake. */
const CLIENT_INFO = { name: 'troupe', version: '0.1.0' };
const DEFAULT_MCP_STARTUP_TIMEOUT_MS = 60_000;
/** A server may offer at most this many tools (OpenAI accepts 128 tools per request in all). */
const MAX_MCP_TOOLS = 128;
/** Model-facing tool names: OpenAI's and Anthropic's rule is ^[A-Za-z0-9_-]{1,64}$. */
const MAX_TOOL_NAME = 64;
const MAX_DESCRIPTION = 1_000;
const STDERR_TAIL = 2_000;
const RESTART_BASE_MS = 250;
const RESTART_MAX_MS = 10_000;
/** A connection that lived this long starts its backoff over when it dies. */
const STABLE_MS = 30_000;
/** A call's own timeout governs (the agent's tool timeout); this only stops the SDK's 60 s default. */
const CALL_TIMEOUT_CAP_MS = 600_000;

export type McpServerSpec =
  | { kind: 'http'; url: string; headers: Record<string, string>; display: string }
  | { kind: 'stdio'; command: string; args: string[]; env: Record<string, string>; cwd: string; display: string };

/** Splits a command line into words: spaces separate, '…' and "…" quote, no shell is involved. */
export function splitCommandLine(line: string): string[] {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  let quote: string | undefined;
  for (const ch of line) {
    if (quote) {
      if (ch === quote) quote = undefined;
      else word += ch;
    } else if (ch === '"' || ch === "'") {
      quote = ch;
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) words.push(word);
      word = '';
      inWord = false;
    } else {
      word += ch;
      inWord = true;
    }
  }
  if (quote) throw new Error(`unbalanced ${quote} in the command line`);
  if (inWord) words.push(word);
  return words;
}

const NPM_PACKAGE = /^(?:@[a-z0-9][a-z0-9._~-]*\/)?[a-z0-9][a-z0-9._~-]*(?:@[A-Za-z0-9._^~<>=*-]+)?$/;

function onPath(name: string, env: NodeJS.ProcessEnv): boolean {
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    try {
      accessSync(join(dir, name), constants.X_OK);
      return true;
    } catch {
      // not here
    }
  }
  return false;
}

/** How to run a script file: with this Node (tsx for TypeScript) or python3. */
function interpreterFor(file: string): string[] | undefined {
  switch (extname(file).toLowerCase()) {
    case '.js':
    case '.mjs':
    case '.cjs':
      return [process.execPath];
    case '.ts':
    case '.mts':
      return [process.execPath, '--import', import.meta.resolve('tsx/esm')];
    case '.py':
      return [process.env.TROUPE_PYTHON || 'python3'];
    default:
      return undefined;
  }
}

function stringMap(value: unknown): Record<string, string> {
  if (!value || typeof value !== 'object') return {};
  const out: Record<string, string> = Object.create(null) as Record<string, string>;
  for (const [k, v] of Object.entries(value)) if (typeof v === 'string') out[k] = v;
  return out;
}

/** Where and how to reach the server of an mcp tool. Throws an Error saying what is wrong. */
export function resolveMcpServer(tool: Pick<McpToolConfig, 'server' | 'config'>, dir: string, env: NodeJS.ProcessEnv = process.env): McpServerSpec {
  const server = tool.server.trim();
  const config = tool.config ?? {};
  if (/^https?:\/\//i.test(server)) {
    return { kind: 'http', url: server, headers: stringMap(config.headers), display: server };
  }
  const words = splitCommandLine(server);
  if (words.length === 0) throw new Error('server is empty');
  const extra = (config.args ?? []).filter((a): a is string => typeof a === 'string');
  const [first, ...rest] = words as [string, ...string[]];
  const childEnv = stringMap(config.env);
  const base = { env: childEnv, cwd: dir, display: server };
  const interpreter = interpreterFor(first);
  if (interpreter) {
    const file = isAbsolute(first) ? first : resolve(dir, first);
    if (!existsSync(file)) throw new Error(`${first} does not exist (paths are relative to the agent.yaml)`);
    const [command, ...pre] = interpreter as [string, ...string[]];
    return { kind: 'stdio', command, args: [...pre, file, ...rest, ...extra], ...base };
  }
  // One word that names an npm package: run it with npx, unless a program of that name is installed
  // (`uvx`, `docker` are commands; `@scope/name` is always a package).
  if (words.length === 1 && NPM_PACKAGE.test(first) && (first.startsWith('@') || !onPath(first, env))) {
    return { kind: 'stdio', command: 'npx', args: ['-y', first, ...extra], ...base };
  }
  return { kind: 'stdio', command: first, args: [...rest, ...extra], ...base };
}

/** `<tool>__<server tool>`, made safe for every provider (and unique with a short hash when it had to change). */
export function namespacedToolName(toolName: string, remote: string): string {
  const raw = `${toolName}__${remote}`;
  const safe = raw.replace(/[^A-Za-z0-9_-]/g, '_');
  if (safe === raw && safe.length <= MAX_TOOL_NAME) return safe;
  const hash = createHash('sha256').update(raw).digest('hex').slice(0, 6);
  return `${safe.slice(0, MAX_TOOL_NAME - 7)}_${hash}`;
}

export interface McpRemoteTool {
  name: string;
  description?: string;
  inputSchema: JsonSchemaObject;
}

interface ContentBlock {
  type: string;
  text?: string;
  mimeType?: string;
  data?: string;
  uri?: string;
  name?: string;
  resource?: { uri?: string; text?: string; mimeType?: string; blob?: string };
}

/** A tool result as the text the model reads: text blocks as they are, other blocks described. */
function resultText(result: { content?: unknown; structuredContent?: unknown }): string {
  const blocks = Array.isArray(result.content) ? (result.content as ContentBlock[]) : [];
  const parts = blocks.map((b) => {
    if (b.type === 'text') return b.text ?? '';
    if (b.type === 'image' || b.type === 'audio') return `[${b.type} ${b.mimeType ?? ''}, ${Math.floor(((b.data ?? '').length * 3) / 4)} bytes]`;
    if (b.type === 'resource_link') return `[resource ${b.name ?? ''} ${b.uri ?? ''}]`.replace(/\s+]/, ']');
    if (b.type === 'resource') return b.resource?.text ?? `[resource ${b.resource?.uri ?? ''} ${b.resource?.mimeType ?? ''}]`;
    return JSON.stringify(b);
  });
  if (parts.length === 0 && result.structuredContent !== undefined) return JSON.stringify(result.structuredContent);
  return parts.join('\n');
}

type ConnectionState = 'starting' | 'ready' | 'restarting' | 'closed';

export interface McpServerStatus {
  server: string;
  state: ConnectionState;
  restarts: number;
  tools: number;
  lastError?: string;
}

/** Tracks the pids of the stdio servers alive in this process, to kill them if the process exits. */
const livePids = new Set<number>();
let exitHookInstalled = false;
function trackPid(pid: number | null | undefined): void {
  if (!pid) return;
  livePids.add(pid);
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const p of livePids) {
      try {
        process.kill(p, 'SIGTERM');
      } catch {
        // already gone
      }
    }
  });
}

/** One MCP server: connected once, restarted with backoff when it dies, closed when released. */
export class McpConnection {
  state: ConnectionState = 'starting';
  tools: McpRemoteTool[] = [];
  restarts = 0;
  lastError?: string;
  private client?: Client;
  private pid?: number;
  private stderr = '';
  private connectedAt = 0;
  private failures = 0;
  private timer?: NodeJS.Timeout;
  /** Resolves when a connection is ready again (calls made while restarting wait on it). */
  private ready: Promise<void> = Promise.resolve();
  private markReady: () => void = () => undefined;

  constructor(
    readonly spec: McpServerSpec,
    private readonly startupTimeoutMs: number = DEFAULT_MCP_STARTUP_TIMEOUT_MS,
  ) {}

  /** Connects and lists the tools; throws an Error with the server's last words when it cannot. */
  async start(): Promise<void> {
    await this.connect();
    this.state = 'ready';
  }

  private async connect(): Promise<void> {
    const { Client, StdioClientTransport, StreamableHTTPClientTransport } = await loadSdk();
    const client = new Client(CLIENT_INFO);
    this.stderr = '';
    const transport =
      this.spec.kind === 'http'
        ? new StreamableHTTPClientTransport(new URL(this.spec.url), { requestInit: { headers: this.spec.headers } })
        : new StdioClientTransport({ command: this.spec.command, args: this.spec.args, env: this.spec.env, cwd: this.spec.cwd, stderr: 'pipe' });
    if (transport instanceof StdioClientTransport) {
      transport.stderr?.on('data', (d: Buffer | string) => {
        this.stderr = (this.stderr + d.toString()).slice(-STDERR_TAIL);
      });
    }
    let exited = false;
    client.onclose = () => {
      exited = true;
      if (this.client === client) this.onLost('the server closed the connection');
    };
    const deadline = AbortSignal.timeout(this.startupTimeoutMs);
    try {
      await client.connect(transport, { signal: deadline, timeout: this.startupTimeoutMs });
      const tools: McpRemoteTool[] = [];
      let cursor: string | undefined;
      do {
        const page = await client.listTools(cursor ? { cursor } : {}, { signal: deadline, timeout: this.startupTimeoutMs });
        for (const t of page.tools) {
          tools.push({
            name: t.name,
            ...(t.description ? { description: t.description } : {}),
            inputSchema: {
              ...(t.inputSchema as Record<string, unknown>),
              type: 'object',
              properties: (t.inputSchema.properties as Record<string, unknown> | undefined) ?? {},
            },
          });
        }
        if (tools.length > MAX_MCP_TOOLS) throw new Error(`the server offers more than ${MAX_MCP_TOOLS} tools`);
        cursor = page.nextCursor;
      } while (cursor);
      this.tools = tools;
    } catch (err) {
      const pid = transport instanceof StdioClientTransport ? transport.pid : null;
      await client.close().catch(() => undefined);
      if (pid) livePids.delete(pid);
      const why = deadline.aborted ? `no MCP handshake within ${this.startupTimeoutMs} ms` : (err as Error).message;
      const said = this.stderr.trim();
      throw new Error(
        `${why}${exited && !deadline.aborted ? ' (the server exited)' : ''}${said ? `; it wrote: ${said.split('\n').slice(-5).join(' | ')}` : ''}`,
        { cause: err },
      );
    }
    this.client = client;
    this.connectedAt = Date.now();
    if (transport instanceof StdioClientTransport) {
      this.pid = transport.pid ?? undefined;
      trackPid(this.pid);
    }
  }

  /** The connection died: calls in flight fail (the SDK rejects them); new calls wait for the restart. */
  private onLost(reason: string): void {
    if (this.state === 'closed' || this.state === 'restarting') return;
    if (this.pid) livePids.delete(this.pid);
    this.pid = undefined;
    const dying = this.client;
    this.client = undefined;
    void dying?.close().catch(() => undefined);
    this.lastError = `${reason}${this.stderr.trim() ? `; it wrote: ${this.stderr.trim().split('\n').slice(-3).join(' | ')}` : ''}`;
    this.state = 'restarting';
    if (Date.now() - this.connectedAt >= STABLE_MS) this.failures = 0;
    this.ready = new Promise((resolveReady) => (this.markReady = resolveReady));
    this.scheduleRestart();
  }

  private scheduleRestart(): void {
    const delay = Math.min(RESTART_MAX_MS, RESTART_BASE_MS * 2 ** this.failures);
    this.failures++;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.state !== 'restarting') return;
      this.connect().then(
        () => {
          if (this.state !== 'restarting') {
            // Closed while it was reconnecting.
            void this.client?.close().catch(() => undefined);
            return;
          }
          this.restarts++;
          this.state = 'ready';
          this.markReady();
        },
        (err: unknown) => {
          this.lastError = (err as Error).message;
          if (this.state === 'restarting') this.scheduleRestart();
        },
      );
    }, delay);
    this.timer.unref();
  }

  /** Calls one tool of the server. A result with isError, or a failed call, throws (a tool error for the model). */
  async call(name: string, args: Record<string, unknown>, signal: AbortSignal): Promise<string> {
    if (this.state === 'restarting') {
      await new Promise<void>((resolveWait, reject) => {
        const onAbort = () => reject(new Error(`the MCP server is restarting (${this.lastError ?? 'it stopped'}) and was not back in time`));
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
        void this.ready.then(() => {
          signal.removeEventListener('abort', onAbort);
          resolveWait();
        });
      });
    }
    const client = this.client;
    if (this.state === 'closed' || !client) throw new Error('the MCP server is closed');
    const { McpError } = await loadSdk();
    let result: { content?: unknown; structuredContent?: unknown; isError?: unknown };
    try {
      result = (await client.callTool({ name, arguments: args }, undefined, { signal, timeout: CALL_TIMEOUT_CAP_MS })) as typeof result;
    } catch (err) {
      const lost = !(err instanceof McpError) || err.code === -32000;
      // Over HTTP nothing tells us the server went away except a failed request: reconnect.
      if (lost && this.spec.kind === 'http' && !signal.aborted && this.client === client) this.onLost((err as Error).message);
      if (lost && this.state === 'restarting')
        throw new Error(`the MCP server stopped during the call and is restarting: ${(err as Error).message}`, { cause: err });
      throw err;
    }
    const text = resultText(result);
    if (result.isError === true) throw new Error(text || 'the tool failed');
    return toResultText(text);
  }

  status(): McpServerStatus {
    return {
      server: this.spec.display,
      state: this.state,
      restarts: this.restarts,
      tools: this.tools.length,
      ...(this.lastError ? { lastError: this.lastError } : {}),
    };
  }

  async close(): Promise<void> {
    if (this.state === 'closed') return;
    this.state = 'closed';
    if (this.timer) clearTimeout(this.timer);
    this.markReady();
    const client = this.client;
    this.client = undefined;
    if (this.pid) livePids.delete(this.pid);
    await client?.close().catch(() => undefined);
  }
}

interface PoolEntry {
  connection: McpConnection;
  refs: number;
  started: Promise<void>;
}

/** The MCP servers of this process, one per distinct server spec, shared by the agents (replicas) that use it. */
class McpServerPool {
  private readonly entries = new Map<string, PoolEntry>();

  async acquire(spec: McpServerSpec, startupTimeoutMs: number): Promise<McpConnection> {
    const key = JSON.stringify(spec);
    let entry = this.entries.get(key);
    if (!entry) {
      const connection = new McpConnection(spec, startupTimeoutMs);
      entry = { connection, refs: 0, started: connection.start() };
      this.entries.set(key, entry);
      // A server that failed to start is not kept: the next agent tries again.
      entry.started.catch(() => this.entries.delete(key));
    }
    entry.refs++;
    try {
      await entry.started;
    } catch (err) {
      entry.refs--;
      throw err;
    }
    return entry.connection;
  }

  async release(connection: McpConnection): Promise<void> {
    const key = JSON.stringify(connection.spec);
    const entry = this.entries.get(key);
    if (!entry || entry.connection !== connection) return;
    entry.refs--;
    if (entry.refs > 0) return;
    this.entries.delete(key);
    await connection.close();
  }

  get size(): number {
    return this.entries.size;
  }
}

export const mcpServers = new McpServerPool();

export interface McpToolSet {
  tools: RunnableTool[];
  connection: McpConnection;
  close(): Promise<void>;
}

/** Connects to the tool's server (or shares the process's connection to it) and wraps its tools. */
export async function mcpTools(tool: McpToolConfig, dir: string, where: string): Promise<McpToolSet> {
  // Before any server starts: without the SDK the agent does not start.
  requireInstalled('mcp', where);
  await loadSdk();
  let spec: McpServerSpec;
  try {
    spec = resolveMcpServer(tool, dir);
  } catch (err) {
    throw new TroupeError('TOOL_START_FAILED', `${where}: MCP server ${JSON.stringify(tool.server)}: ${(err as Error).message}`, { tool: tool.name });
  }
  const startup = tool.config?.startup_timeout_ms;
  const startupTimeoutMs = typeof startup === 'number' && startup > 0 ? Math.min(startup, 600_000) : DEFAULT_MCP_STARTUP_TIMEOUT_MS;
  let connection: McpConnection;
  try {
    connection = await mcpServers.acquire(spec, startupTimeoutMs);
  } catch (err) {
    throw new TroupeError(
      'TOOL_START_FAILED',
      `${where}: MCP server ${JSON.stringify(tool.server)} did not start: ${(err as Error).message}`,
      {
        tool: tool.name,
        server: spec.display,
      },
      { cause: err },
    );
  }
  const seen = new Set<string>();
  const tools = connection.tools.map((remote): RunnableTool => {
    let name = namespacedToolName(tool.name, remote.name);
    if (seen.has(name)) name = namespacedToolName(tool.name, `${remote.name}#${seen.size}`);
    seen.add(name);
    const about = (remote.description ?? remote.name).slice(0, MAX_DESCRIPTION);
    return {
      definition: { name, description: `${about} (${tool.name}: ${tool.description})`, parameters: remote.inputSchema },
      source: tool.name,
      ...(tool.timeout_ms !== undefined ? { timeoutMs: tool.timeout_ms } : {}),
      run: (args, ctx) => connection.call(remote.name, args, ctx.signal),
    };
  });
  let released = false;
  return {
    tools,
    connection,
    close: async () => {
      if (released) return;
      released = true;
      await mcpServers.release(connection);
    },
  };
}
