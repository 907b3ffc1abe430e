/**
 * The package as users get it: `import … from 'troupe'` resolves through package.json `exports` (in this
 * checkout by self-reference, and from an installed tarball), and the installed `troupe` bin runs the
 * compiled JavaScript without tsx. Optional parsers are not installed with it, and say so when needed.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { installedTroupe, type InstalledTroupe } from './helpers/installed.js';

const root = new URL('..', import.meta.url).pathname;
const IMPORT_CHECK = `import { defineAgent, reply, TroupeClient, TroupeNode, AgentHost, TroupeError } from 'troupe';
import { demoTeam } from 'troupe/demo';
const a = defineAgent({ card: { id: 'x', name: 'X', description: 'x' }, handle: () => reply('hi') });
console.log(JSON.stringify({ id: a.card.id, client: typeof TroupeClient, node: typeof TroupeNode, host: typeof AgentHost, err: new TroupeError('AGENT_ERROR', 'e').code, demo: demoTeam.agents.length }));`;

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

  it('the core install (the tarball and its dependencies, no optional peer) stays under 110 MB', () => {
    // 101 MiB when measured; the target is 80 MB, over which go the Anthropic and MCP SDKs and the tracing SDK.
    const bytes = Number(execFileSync('du', ['-sb', join(troupe.dir, 'node_modules')], { encoding: 'utf8' }).split('\t')[0]);
    console.log(`core install: ${(bytes / 1024 / 1024).toFixed(1)} MiB in node_modules`);
    expect(bytes).toBeLessThan(110 * 1024 * 1024);
  });

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

    // The office parsers, the PDF reader and the vector database are optional peers: not installed with troupe,
    // and a case that needs one says what to run.
    for (const pkg of ['exceljs', 'mammoth', 'fflate', '@xmldom/xmldom', 'pdfjs-dist', '@lancedb/lancedb', 'apache-arrow']) {
      expect(existsSync(join(app, 'node_modules', pkg)), pkg).toBe(false);
    }
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
});
