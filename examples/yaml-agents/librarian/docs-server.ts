/**
 * A small MCP server, written with the official SDK, that lets a model read the text files of one folder:
 * `list_files`, `read_file` and `search_files`. Paths are relative to the folder (given as the first
 * argument); nothing outside it can be read. Troupe runs it over stdio (`server: docs-server.ts docs`).
 *
 *   npx tsx examples/yaml-agents/librarian/docs-server.ts examples/yaml-agents/librarian/docs
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';

const root = resolve(process.argv[2] ?? '.');
const MAX_BYTES = 200_000;

function files(dir = root): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.name.startsWith('.')) return [];
    return e.isDirectory() ? files(path) : [relative(root, path).split(sep).join('/')];
  });
}

/** The absolute path of a file named relative to the folder, or an error when it would leave it. */
function inside(name: string): string {
  const path = resolve(root, name);
  if (path !== root && !path.startsWith(root + sep)) throw new Error(`${name} is outside the folder`);
  return path;
}

const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });
const failure = (t: string) => ({ content: [{ type: 'text' as const, text: t }], isError: true });

const server = new McpServer({ name: 'docs', version: '1.0.0' });

server.registerTool('list_files', { description: 'Lists the files of the folder' }, () => text(files().join('\n')));

server.registerTool(
  'read_file',
  { description: 'Reads one file of the folder', inputSchema: { path: z.string().describe('e.g. policies/returns.md') } },
  ({ path }) => {
    try {
      const file = inside(path);
      if (statSync(file).size > MAX_BYTES) return failure(`${path} is larger than ${MAX_BYTES} bytes`);
      return text(readFileSync(file, 'utf8'));
    } catch (err) {
      return failure(`cannot read ${path}: ${(err as Error).message}`);
    }
  },
);

server.registerTool(
  'search_files',
  { description: 'Finds the lines of the files that contain a word or phrase (case-insensitive)', inputSchema: { query: z.string().min(1) } },
  ({ query }) => {
    const needle = query.toLowerCase();
    const hits = files().flatMap((name) =>
      readFileSync(inside(name), 'utf8')
        .split('\n')
        .flatMap((line, i) => (line.toLowerCase().includes(needle) ? [`${name}:${i + 1}: ${line.trim()}`] : [])),
    );
    return text(hits.length ? hits.slice(0, 50).join('\n') : `no line contains "${query}"`);
  },
);

await server.connect(new StdioServerTransport());
