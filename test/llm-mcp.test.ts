/**
 * MCP tools against real MCP servers written with the SDK: one over stdio (a TypeScript script run by
 * the agent, test/fixtures/mcp/notes-stdio.ts) and one over streamable HTTP (started here). A YAML agent
 * on the in-process mesh discovers the servers' tools, calls them with arguments through a scripted
 * model, reads tool errors, survives a server that crashes mid-conversation (it is restarted), shares one
 * server between replicas and closes it on exit; a server that cannot start is an error naming the tool.
 */
import { resolve } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEmbedded } from '../src/team/embedded.js';
import { AgentConfigSchema, type LoadedAgentConfig } from '../src/config/agent.js';
import { createLlmAgent, type ToolCallRecord } from '../src/llm/agent.js';
import { mcpServers, namespacedToolName, resolveMcpServer, splitCommandLine } from '../src/llm/tools/mcp.js';
import { silentLogger } from '../src/observability/logger.js';
import { TroupeError } from '../src/protocol/errors.js';
import type { AgentDefinition } from '../src/sdk/agent.js';
import { createNotesServer } from './fixtures/mcp/notes-server.js';
import { McpHttpServer } from './helpers/mcp-http.js';
import { OpenAIScriptedServer, type SeenRequest } from './helpers/model-servers.js';
import { waitUntil } from './helpers/wait.js';

const FIXTURES = resolve('test/fixtures/mcp');

type Msg = { role: string; content: string; tool_call_id?: string };
const messagesOf = (req: SeenRequest) => req.body.messages as Msg[];
const toolResults = (req: SeenRequest) => Object.fromEntries(messagesOf(req).flatMap((m) => (m.role === 'tool' ? [[m.tool_call_id!, m.content]] : [])));
const toolNames = (req: SeenRequest) => ((req.body.tools ?? []) as Array<{ function: { name: string } }>).map((t) => t.function.name);
const toolSchema = (req: SeenRequest, name: string) =>
  ((req.body.tools ?? []) as Array<{ function: { name: string; description: string; parameters: Record<string, unknown> } }>).find(
    (t) => t.function.name === name,
  )?.function;

function agentConfig(model: OpenAIScriptedServer, tool: Record<string, unknown>, name = 'notes-agent'): LoadedAgentConfig {
  return {
    config: AgentConfigSchema.parse({
      name,
      model: { provider: 'openai', name: 'm', base_url: model.baseURL },
      instructions: { inline: 'Use your notes.' },
      tools: [{ name: 'notes', description: 'A notebook', type: 'mcp', ...tool }],
    }),
    file: 'agent.yaml',
    dir: FIXTURES,
  };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('where an mcp server runs', () => {
  it('reads URLs, command lines, script files and npm package names', () => {
    expect(resolveMcpServer({ server: 'https://mcp.example.com/mcp', config: { headers: { authorization: 'Bearer x' } } }, '/agents')).toEqual({
      kind: 'http',
      url: 'https://mcp.example.com/mcp',
      headers: { authorization: 'Bearer x' },
      display: 'https://mcp.example.com/mcp',
    });
    expect(resolveMcpServer({ server: `python3 -m "my server" --flag`, config: { args: ['--root', 'docs'], env: { A: '1' } } }, '/agents')).toEqual({
      kind: 'stdio',
      command: 'python3',
      args: ['-m', 'my server', '--flag', '--root', 'docs'],
      env: { A: '1' },
      cwd: '/agents',
      display: 'python3 -m "my server" --flag',
    });
    const ts = resolveMcpServer({ server: 'notes-stdio.ts --greeting hi' }, FIXTURES);
    expect(ts).toMatchObject({ kind: 'stdio', command: process.execPath, cwd: FIXTURES });
    expect(ts.kind === 'stdio' && ts.args).toEqual([
      '--import',
      expect.stringMatching(/tsx\/dist\/esm\/index\.m?js$/),
      resolve(FIXTURES, 'notes-stdio.ts'),
      '--greeting',
      'hi',
    ]);
    expect(resolveMcpServer({ server: 'fails-at-start.mjs' }, FIXTURES)).toMatchObject({
      command: process.execPath,
      args: [resolve(FIXTURES, 'fails-at-start.mjs')],
    });
    expect(resolveMcpServer({ server: '@modelcontextprotocol/server-memory', config: { args: ['x'] } }, '/a')).toMatchObject({
      command: 'npx',
      args: ['-y', '@modelcontextprotocol/server-memory', 'x'],
    });
    expect(resolveMcpServer({ server: 'mcp-server-sqlite-npx' }, '/a', { PATH: '' })).toMatchObject({ command: 'npx', args: ['-y', 'mcp-server-sqlite-npx'] });
    // A program on the PATH is run as it is.
    expect(resolveMcpServer({ server: 'node' }, '/a')).toMatchObject({ command: 'node', args: [] });
    expect(() => resolveMcpServer({ server: 'missing-server.mjs' }, FIXTURES)).toThrow(
      'missing-server.mjs does not exist (paths are relative to the agent.yaml)',
    );
    expect(() => splitCommandLine('node "unclosed')).toThrow('unbalanced " in the command line');
  });

  it("namespaces the server tools by the tool name, within the providers' name rules", () => {
    expect(namespacedToolName('files', 'read_file')).toBe('files__read_file');
    expect(namespacedToolName('files', 'read.file')).toMatch(/^files__read_file_[0-9a-f]{6}$/);
    const long = namespacedToolName('a'.repeat(60), 'search');
    expect(long).toHaveLength(64);
    expect(long).toMatch(/^[A-Za-z0-9_-]+$/);
  });
});

describe('an agent with an MCP server over stdio', () => {
  const model = new OpenAIScriptedServer();
  const calls: ToolCallRecord[] = [];
  let agent: AgentDefinition;
  let mesh: Awaited<ReturnType<typeof startEmbedded>>;
  const savedKey = process.env.OPENAI_API_KEY;
  let stopped = false;

  beforeAll(async () => {
    // In the agent's environment, but never handed to the server's process.
    process.env.OPENAI_API_KEY = 'sk-never-for-mcp-servers';
    await model.start();
    agent = await createLlmAgent(agentConfig(model, { server: 'notes-stdio.ts', config: { args: ['--greeting', 'bonjour'], env: { NOTES_PREFIX: 'n-' } } }), {
      env: {},
      onToolCall: (c) => calls.push(c),
    });
    mesh = await startEmbedded({ name: 'mcp', agents: [agent], config: { entryAgent: 'notes-agent' } }, silentLogger());
  });

  afterEach(() => void model.reset());

  afterAll(async () => {
    if (!stopped) await mesh?.stop();
    await model.stop();
    if (savedKey === undefined) delete process.env.OPENAI_API_KEY;
    else process.env.OPENAI_API_KEY = savedKey;
  });

  it("offers the server's tools, discovered at start, namespaced and with their JSON schemas", async () => {
    model.script({ text: 'ok' });
    await mesh.client.send('what can you do?');
    const [req] = model.requests;
    expect(toolNames(req!)).toEqual(['notes__add', 'notes__lookup', 'notes__whoami', 'notes__crash']);
    expect(toolSchema(req!, 'notes__add')).toEqual({
      name: 'notes__add',
      description: 'Adds two numbers (notes: A notebook)',
      parameters: expect.objectContaining({ type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] }),
    });
    expect(toolSchema(req!, 'notes__lookup')!.parameters).toMatchObject({ properties: { key: { type: 'string', description: 'the note, e.g. tea' } } });
    expect(agent.card.skills.map((s) => [s.id, s.tags])).toEqual([['notes', ['mcp']]]);
  });

  it('calls tools with arguments; a tool error reaches the model as one; the server runs with config args and env only', async () => {
    calls.length = 0;
    model.script(
      {
        toolCalls: [
          { id: 'sum', name: 'notes__add', arguments: { a: 2, b: 3.5 } },
          { id: 'tea', name: 'notes__lookup', arguments: { key: 'tea' } },
          { id: 'cocoa', name: 'notes__lookup', arguments: { key: 'cocoa' } },
          { id: 'who', name: 'notes__whoami', arguments: {} },
        ],
      },
      { text: 'Steep sencha at 70 °C.' },
    );
    const answer = await mesh.client.send('how do I make tea?');
    expect(answer.text).toBe('Steep sencha at 70 °C.');
    const results = toolResults(model.requests[1]!);
    expect(results.sum).toBe('2 + 3.5 = 5.5');
    expect(results.tea).toBe('Sencha is steeped at 70 °C for one minute.');
    expect(JSON.parse(results.cocoa!)).toEqual({ error: 'no note called "cocoa"' });
    expect(JSON.parse(results.who!)).toMatchObject({ greeting: 'bonjour', prefix: 'n-', leakedKey: null, cwd: FIXTURES });
    // The four calls ran in parallel: they finish in any order.
    expect(calls.map((c) => [c.name, c.tool, c.error ?? c.result]).sort()).toEqual([
      ['notes__add', 'notes', '2 + 3.5 = 5.5'],
      ['notes__lookup', 'notes', 'Sencha is steeped at 70 °C for one minute.'],
      ['notes__lookup', 'notes', 'no note called "cocoa"'],
      ['notes__whoami', 'notes', results.who],
    ]);
  });

  it('restarts a server that crashes mid-conversation; the crashed call is a tool error, the next call works', async () => {
    model.script(
      { toolCalls: [{ id: 'before', name: 'notes__whoami', arguments: {} }] },
      { toolCalls: [{ id: 'boom', name: 'notes__crash', arguments: {} }] },
      { toolCalls: [{ id: 'after', name: 'notes__whoami', arguments: {} }] },
      { text: 'Back again.' },
    );
    const answer = await mesh.client.send('crash the notes server, then check it');
    expect(answer.text).toBe('Back again.');
    const before = JSON.parse(toolResults(model.requests[1]!).before!) as { pid: number };
    const crashed = JSON.parse(toolResults(model.requests[2]!).boom!) as { error: string };
    const after = JSON.parse(toolResults(model.requests[3]!).after!) as { pid: number; greeting: string };
    expect(crashed.error).toMatch(/^the MCP server stopped during the call and is restarting: /);
    expect(after.pid).not.toBe(before.pid);
    expect(after.greeting).toBe('bonjour');
    expect(alive(before.pid)).toBe(false);
    const status = agent.status!().detail as { mcp: Record<string, { state: string; restarts: number; lastError?: string }> };
    expect(status.mcp.notes).toMatchObject({ state: 'ready', restarts: 1, lastError: expect.stringContaining('notes: crashing on request') });
  });

  it('shares one server between replicas of the agent and closes it when the last one stops', async () => {
    model.script({ toolCalls: [{ id: 'who', name: 'notes__whoami', arguments: {} }] }, { text: 'one' });
    await mesh.client.send('who serves you?');
    const pid = (JSON.parse(toolResults(model.requests[1]!).who!) as { pid: number }).pid;
    model.reset();

    const replica = await createLlmAgent(
      agentConfig(model, { server: 'notes-stdio.ts', config: { args: ['--greeting', 'bonjour'], env: { NOTES_PREFIX: 'n-' } } }),
      { env: {} },
    );
    expect(mcpServers.size).toBe(1);
    await replica.close!();
    expect(alive(pid)).toBe(true);
    await mesh.stop();
    stopped = true;
    await waitUntil(() => !alive(pid), 'the MCP server to exit after the last agent closed');
    expect(mcpServers.size).toBe(0);
  });
});

describe('an agent with an MCP server over streamable HTTP', () => {
  const model = new OpenAIScriptedServer();
  const http = new McpHttpServer(() => createNotesServer({ greeting: 'http', canCrash: false }), 'secret-token');
  let mesh: Awaited<ReturnType<typeof startEmbedded>>;
  let agent: AgentDefinition;

  beforeAll(async () => {
    await model.start();
    await http.start();
    agent = await createLlmAgent(agentConfig(model, { server: http.url, config: { headers: { authorization: 'Bearer secret-token' } } }, 'http-agent'), {
      env: {},
    });
    mesh = await startEmbedded({ name: 'mcp-http', agents: [agent], config: { entryAgent: 'http-agent' } }, silentLogger());
  });

  afterEach(() => void model.reset());

  afterAll(async () => {
    await mesh?.stop();
    await http.stop();
    await model.stop();
  });

  it('discovers the tools, calls one with arguments and reads a tool error, sending the configured headers', async () => {
    model.script(
      {
        toolCalls: [
          { id: 'sum', name: 'notes__add', arguments: { a: 40, b: 2 } },
          { id: 'missing', name: 'notes__lookup', arguments: { key: 'cocoa' } },
          { id: 'bad', name: 'notes__add', arguments: { a: 'forty' } },
        ],
      },
      { text: '42' },
    );
    expect((await mesh.client.send('add 40 and 2')).text).toBe('42');
    expect(toolNames(model.requests[0]!)).toEqual(['notes__add', 'notes__lookup', 'notes__whoami']);
    const results = toolResults(model.requests[1]!);
    expect(results.sum).toBe('40 + 2 = 42');
    expect(JSON.parse(results.missing!)).toEqual({ error: 'no note called "cocoa"' });
    // Arguments that do not match the server's schema: the server says so, the model reads it.
    expect(JSON.parse(results.bad!).error).toMatch(/Input validation error/);
    expect(http.authorizations.every((a) => a === 'Bearer secret-token')).toBe(true);
  });

  it('reconnects after the server went away and came back', async () => {
    const port = http.port;
    await http.stop();
    model.script({ toolCalls: [{ id: 'down', name: 'notes__add', arguments: { a: 1, b: 1 } }] }, { text: 'it is down' });
    expect((await mesh.client.send('add 1 and 1')).text).toBe('it is down');
    expect(JSON.parse(toolResults(model.requests[1]!).down!).error).toMatch(/^the MCP server stopped during the call and is restarting: /);
    model.reset();

    await http.start(port);
    await waitUntil(() => (agent.status!().detail as { mcp: Record<string, { state: string }> }).mcp.notes!.state === 'ready', 'the connection to come back');
    model.script({ toolCalls: [{ id: 'up', name: 'notes__add', arguments: { a: 1, b: 1 } }] }, { text: '2' });
    expect((await mesh.client.send('add 1 and 1 again')).text).toBe('2');
    expect(toolResults(model.requests[1]!).up).toBe('1 + 1 = 2');
  });
});

describe('an MCP server that cannot start', () => {
  const model = new OpenAIScriptedServer();
  beforeAll(() => model.start());
  afterAll(() => model.stop());

  async function startError(tool: Record<string, unknown>): Promise<TroupeError> {
    const err = await createLlmAgent(agentConfig(model, tool), { env: {} }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(TroupeError);
    return err as TroupeError;
  }

  it('is an error naming the tool and saying what the server wrote before it died', async () => {
    const died = await startError({ server: 'fails-at-start.mjs' });
    expect(died.code).toBe('TOOL_START_FAILED');
    expect(died.message).toMatch(
      /^agent\.yaml tools\[0\] "notes": MCP server "fails-at-start\.mjs" did not start: .*\(the server exited\); it wrote: fatal: the notes database is missing$/,
    );
    expect(died.details).toMatchObject({ tool: 'notes' });
  });

  it('is an error for a program that does not exist, a missing script and a URL nobody answers', async () => {
    expect((await startError({ server: 'no-such-mcp-program --stdio' })).message).toContain(
      '"notes": MCP server "no-such-mcp-program --stdio" did not start: spawn no-such-mcp-program ENOENT',
    );
    expect((await startError({ server: './gone.py' })).message).toBe(
      'agent.yaml tools[0] "notes": MCP server "./gone.py": ./gone.py does not exist (paths are relative to the agent.yaml)',
    );
    const closed = new McpHttpServer(() => createNotesServer({ greeting: '', canCrash: false }));
    await closed.start();
    const url = closed.url;
    await closed.stop();
    const refused = await startError({ server: url });
    expect(refused.code).toBe('TOOL_START_FAILED');
    expect(refused.message).toContain(`MCP server "${url}" did not start: `);
    expect(mcpServers.size).toBe(0);
  });
});
