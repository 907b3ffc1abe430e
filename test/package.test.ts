/**
 * The package as users get it: `import … from 'troupe'` resolves through package.json `exports` (in this
 * checkout by self-reference, and from an installed tarball), and the installed `troupe` bin runs the
 * compiled JavaScript without tsx. Installs print no EBADENGINE on the Node running the suite (the
 * supported engine). Optional packages (model SDKs, the MCP client, parsers, the vector database) are not
 * installed with it, say so when needed, and work once installed next to it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { installedTroupe, type InstalledTroupe } from './helpers/installed.js';
import { AnthropicScriptedServer } from './helpers/model-servers.js';

const root = new URL('..', import.meta.url).pathname;
const IMPORT_CHECK = `import { defineAgent, reply, TroupeClient, TroupeNode, AgentHost, TroupeError } from 'troupe';
import { demoTeam } from 'troupe/demo';
const a = defineAgent({ card: { id: 'x', name: 'X', description: 'x' }, handle: () => reply('hi') });
console.log(JSON.stringify({ id: a.card.id, client: typeof TroupeClient, node: typeof TroupeNode, host: typeof AgentHost, err: new TroupeError('AGENT_ERROR', 'e').code, demo: demoTeam.agents.length }));`;

/** The optional peer dependencies of troupe: none of them is installed with it. */
const OPTIONAL = [
  '@anthropic-ai/sdk',
  '@modelcontextprotocol/sdk',
  'exceljs',
  'mammoth',
  'fflate',
  '@xmldom/xmldom',
  'pdfjs-dist',
  '@lancedb/lancedb',
  'apache-arrow',
];

/** An MCP server over stdio with one tool, written as a user would, with the SDK they installed. */
const ECHO_SERVER = `import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';
const server = new McpServer({ name: 'echo', version: '1.0.0' });
server.registerTool('shout', { description: 'Says it louder', inputSchema: { text: z.string() } }, ({ text }) => ({ content: [{ type: 'text', text: text.toUpperCase() + '!' }] }));
await server.connect(new StdioServerTransport());
`;

/** An agent.yaml with an anthropic model (at \`baseURL\`) and an mcp tool run from \`echo.mjs\`. */
function anthropicMcpAgent(baseURL: string): string {
  return [
    'name: shouter',
    `model: {provider: anthropic, name: claude-test, base_url: "${baseURL}"}`,
    'instructions: {inline: Shout with the tool.}',
    'tools:',
    '  - {name: echo, description: Says things louder, type: mcp, server: echo.mjs}',
    'test_cases:',
    '  - {input: Shout hello.}',
    '',
  ].join('\n');
}

/** The `n` largest packages of an install, in MiB (one du over all: a hard-linked file counts once). */
function largestPackages(dir: string, n: number): string {
  const modules = join(dir, 'node_modules');
  const names = readdirSync(modules).flatMap((d) => (d.startsWith('@') ? readdirSync(join(modules, d)).map((s) => `${d}/${s}`) : d.startsWith('.') ? [] : [d]));
  return execFileSync('du', ['-sb', ...names], { cwd: modules, encoding: 'utf8' })
    .trim()
    .split('\n')
    .map((line) => line.split('\t') as [string, string])
    .sort(([a], [b]) => Number(b) - Number(a))
    .slice(0, n)
    .map(([size, name]) => `  ${(Number(size) / 1024 / 1024).toFixed(2).padStart(6)} MiB  ${name}`)
    .join('\n');
}

describe('package', () => {
  let troupe: InstalledTroupe;
  // Builds dist/ (from the sources under test), packs and installs the tarball: once, shared with the other suites.
  beforeAll(async () => {
    troupe = await installedTroupe();
  }, 360_000);

  it("resolves 'troupe' by self-reference in a checkout, from dist/ (no tsx, no source condition)", () => {
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', IMPORT_CHECK], { cwd: root, encoding: 'utf8' });
    expect(JSON.parse(out)).toEqual({ id: 'x', client: 'function', node: 'function', host: 'function', err: 'AGENT_ERROR', demo: 3 });
  });

  it('the core install (the tarball and its dependencies, no optional peer) stays under 80 MiB', () => {
    const bytes = Number(execFileSync('du', ['-sb', join(troupe.dir, 'node_modules')], { encoding: 'utf8' }).split('\t')[0]);
    console.log(`core install: ${(bytes / 1024 / 1024).toFixed(1)} MiB in node_modules; the largest packages:\n${largestPackages(troupe.dir, 10)}`);
    expect(bytes).toBeLessThan(80 * 1024 * 1024);
  });

  it('installing the packed tarball prints no EBADENGINE', () => {
    expect(troupe.installLog).toMatch(/added \d+ packages/);
    expect(troupe.installLog).not.toContain('EBADENGINE');
  });

  it("npm ci of the checkout's lockfile prints no EBADENGINE", () => {
    const dir = mkdtempSync(join(tmpdir(), 'troupe-ci-'));
    try {
      for (const f of ['package.json', 'package-lock.json']) copyFileSync(join(root, f), join(dir, f));
      // A dry run checks every package's engines as the real one does, without writing node_modules.
      const ci = spawnSync('npm', ['ci', '--dry-run', '--offline', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: dir, encoding: 'utf8' });
      expect(ci.status, ci.stderr).toBe(0);
      expect(ci.stdout).toMatch(/added \d+ packages/);
      expect(`${ci.stdout}${ci.stderr}`).not.toContain('EBADENGINE');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('installs from a packed tarball: the import works and the bin runs from dist', () => {
    const app = troupe.userFolder({ packageJson: true });
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', IMPORT_CHECK], { cwd: app, encoding: 'utf8' });
    expect(JSON.parse(out).id).toBe('x');
    const help = execFileSync(join(app, 'node_modules/.bin/troupe'), ['graph', 'router', '--format', 'mermaid'], { cwd: app, encoding: 'utf8' });
    expect(help).toContain('stateDiagram-v2');
    // No TypeScript in the installed package: the bin ran the compiled CLI.
    expect(readdirSync(join(app, 'node_modules/troupe'))).not.toContain('src');
    // The studio's app ships bundled (no esbuild, no sources, no CDN at run time).
    expect(readdirSync(join(app, 'node_modules/troupe/dist/studio/assets')).sort()).toEqual(['app.css', 'app.js']);

    // The optional peers are not installed with troupe, and a case that needs one says what to run.
    for (const pkg of OPTIONAL) expect(existsSync(join(app, 'node_modules', pkg)), pkg).toBe(false);
    copyFileSync(join(root, 'test/fixtures/office/prices.xlsx'), join(app, 'prices.xlsx'));
    writeFileSync(
      join(app, 'agent.yaml'),
      'name: reader\nmodel: {provider: openai, name: m, base_url: "http://127.0.0.1:9/v1"}\ninstructions: {inline: Read.}\ntest_cases:\n  - input: Sum it.\n    files: [{path: prices.xlsx, type: excel}]\n',
    );
    const evaluated = spawnSync(join(app, 'node_modules/.bin/troupe'), ['eval', 'agent.yaml', '--json'], { cwd: app, encoding: 'utf8' });
    expect(evaluated.status, evaluated.stderr).toBe(1);
    expect((JSON.parse(evaluated.stdout) as { cases: Array<{ error: string }> }).cases[0]!.error).toBe(
      'test case "case 1" files[0] (prices.xlsx): reading excel files needs the optional packages exceljs, fflate, which are not installed: run npm i exceljs fflate',
    );
  });

  it('an agent with an anthropic model or an mcp tool: validate warns, the agent does not start, and the error names the npm i', () => {
    const app = troupe.userFolder({ packageJson: true });
    writeFileSync(join(app, 'echo.mjs'), ECHO_SERVER);
    writeFileSync(join(app, 'agent.yaml'), anthropicMcpAgent('http://127.0.0.1:9'));
    const bin = join(app, 'node_modules/.bin/troupe');
    const validated = spawnSync(bin, ['validate', 'agent.yaml', '--json'], { cwd: app, encoding: 'utf8' });
    expect(validated.status, validated.stderr).toBe(0);
    const report = JSON.parse(validated.stdout) as { valid: boolean; warnings: Array<{ path: string; message: string }> };
    expect(report.valid).toBe(true);
    expect(report.warnings.map((w) => `${w.path}: ${w.message}`)).toEqual([
      'model.provider: an anthropic model needs the optional package @anthropic-ai/sdk, which is not installed: run npm i @anthropic-ai/sdk',
      'tools[0].type: an mcp tool needs the optional package @modelcontextprotocol/sdk, which is not installed: run npm i @modelcontextprotocol/sdk',
    ]);

    const evaluated = spawnSync(bin, ['eval', 'agent.yaml', '--json'], { cwd: app, encoding: 'utf8' });
    expect(evaluated.status, evaluated.stderr).toBe(1);
    expect(JSON.parse(evaluated.stdout)).toMatchObject({
      error: {
        code: 'DEPENDENCY_MISSING',
        message: 'model: an anthropic model needs the optional package @anthropic-ai/sdk, which is not installed: run npm i @anthropic-ai/sdk',
      },
    });

    // With an OpenAI model, the mcp tool is what stops the start.
    writeFileSync(join(app, 'agent.yaml'), anthropicMcpAgent('http://127.0.0.1:9').replace('provider: anthropic', 'provider: openai'));
    const mcp = spawnSync(bin, ['eval', 'agent.yaml', '--json'], { cwd: app, encoding: 'utf8' });
    expect(mcp.status, mcp.stderr).toBe(1);
    expect(JSON.parse(mcp.stdout)).toMatchObject({
      error: {
        code: 'DEPENDENCY_MISSING',
        message:
          'agent.yaml tools[0] "echo": an mcp tool needs the optional package @modelcontextprotocol/sdk, which is not installed: run npm i @modelcontextprotocol/sdk',
      },
    });
  });

  it('with @anthropic-ai/sdk and @modelcontextprotocol/sdk installed next to troupe, the same agent runs: validate is quiet, eval answers', async () => {
    const withSdks = await installedTroupe({ optional: ['@anthropic-ai/sdk', '@modelcontextprotocol/sdk'] });
    expect(withSdks.installLog).not.toContain('EBADENGINE');
    const anthropic = await new AnthropicScriptedServer().start();
    try {
      const app = withSdks.userFolder({ packageJson: true });
      writeFileSync(join(app, 'echo.mjs'), ECHO_SERVER);
      writeFileSync(join(app, 'agent.yaml'), anthropicMcpAgent(anthropic.baseURL));
      const bin = join(app, 'node_modules/.bin/troupe');
      const validated = spawnSync(bin, ['validate', 'agent.yaml', '--json'], { cwd: app, encoding: 'utf8' });
      expect(JSON.parse(validated.stdout)).toMatchObject({ valid: true, warnings: [] });

      anthropic.script({ toolCalls: [{ name: 'echo__shout', arguments: { text: 'hello' } }] }, { text: 'Shouted.' });
      const evaluated = withSdks.spawn(bin, ['eval', 'agent.yaml', '--json'], app, { ANTHROPIC_API_KEY: 'sk-ant-test' });
      const exit = await evaluated.exited;
      expect(exit.code, evaluated.describe()).toBe(0);
      const report = JSON.parse(evaluated.stdout) as { cases: Array<{ status: string; calledTools: string[]; answer: string }> };
      expect(report.cases[0]).toMatchObject({ status: 'passed', calledTools: ['echo'], answer: 'Shouted.' });
      // The MCP server's answer went back to the model: the tool ran through the installed SDK.
      expect(JSON.stringify(anthropic.requests[1]!.body.messages)).toContain('HELLO!');
    } finally {
      await anthropic.stop();
    }
  }, 420_000);
});
