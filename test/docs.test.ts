/**
 * Executable docs: every shell block of README.md and docs/*.md marked ```` ```sh test ```` runs verbatim,
 * in document order, in one bash session per document, in a new folder that sees the packed tarball
 * installed offline (as `npm i troupe` would leave it), against a real nats-server the blocks start. A
 * block marked ```` ```<lang> file=<name> ```` is written to that file when the document reaches it.
 *
 * What the session changes, and only this: the ports the docs use (4222 for NATS, 8080 for the gateway,
 * 8090 for the studio) become free ones (a shared machine may have servers there), in the blocks and,
 * through a `nats-server` shim first on PATH, in the server's configuration; a line ending in `&` has its
 * output kept in a log, and the session waits for that process to say it is ready (a server, a node, an
 * agent, a gateway, a studio, a watch) before the next line, as a reader would; at the end every process
 * the session started is stopped. A block marked `needs=VAR` runs only when VAR is set; otherwise it is
 * skipped with the reason printed (keys and the internet are not in CI).
 *
 * A studio the blocks started is also opened in Chromium (Debian's, through playwright-core, as the
 * studio suites do) once the last block has run: the page must connect to its stream and list the
 * threads, and a thread opened there must draw its statechart.
 */
import { spawn, execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../src/protocol/errors.js';
import { installedTroupe, type InstalledTroupe } from './helpers/installed.js';
import { freePort, REPO_ROOT } from './helpers/nats-server.js';

/** The ports the docs name: NATS, the gateway, the studio. */
const DOC_PORTS = ['4222', '8080', '8090'] as const;
/** What a process started in the background prints once it is ready. */
const READY = String.raw`Server is ready|troupe node \S+ up on|agent instance\(s\) joined|"msg": "joined"|gateway listening on|studio on http|watching \S+ on`;
/** What the session prints once the last block has run; it then waits (fd 3, its stdin) until the test has looked at what runs. */
const END = '__DOCS_END__';
const CHROMIUM = process.env.TROUPE_CHROMIUM ?? '/usr/bin/chromium';
const READY_TIMEOUT_S = 60;

interface Block {
  kind: 'run' | 'file';
  text: string;
  line: number;
  /** run: environment variables it needs; file: the file name. */
  needs: string[];
  file?: string;
}

/** The fenced blocks of a markdown text that are runnable or files, in order. */
export function docBlocks(markdown: string): Block[] {
  const blocks: Block[] = [];
  const lines = markdown.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S+)(.*)$/.exec(lines[i]!);
    if (!open) continue;
    const [, lang, rest] = open;
    const end = lines.findIndex((l, j) => j > i && l.startsWith('```'));
    const text = lines.slice(i + 1, end).join('\n');
    const words = rest!.trim().split(/\s+/).filter(Boolean);
    const file = words.find((w) => w.startsWith('file='))?.slice(5);
    if (file) blocks.push({ kind: 'file', text: `${text}\n`, line: i + 1, needs: [], file });
    else if ((lang === 'sh' || lang === 'bash') && words.includes('test')) {
      const needs = words.filter((w) => w.startsWith('needs=')).flatMap((w) => w.slice(6).split(','));
      blocks.push({ kind: 'run', text, line: i + 1, needs });
    }
    i = end;
  }
  return blocks;
}

/** A line run in the background (`cmd &`, a comment after it allowed) keeps its output and is waited for. */
function backgroundLine(line: string, n: number): string {
  const m = /^(.*?)\s&(\s+#.*)?$/.exec(line);
  if (!m) return line;
  return `${m[1]} > ".bg-${n}.log" 2>&1 &\n__ready $! ".bg-${n}.log"`;
}

const PRELUDE = String.raw`
set -euo pipefail
exec 3<&0 </dev/null
__ready() {
  local pid=$1 log=$2 i=0
  until grep -qE '${READY}' "$log"; do
    if ! kill -0 "$pid" 2>/dev/null; then echo "--- $log: exited before it was ready:" >&2; cat "$log" >&2; return 1; fi
    i=$((i + 1))
    if [ "$i" -gt $((${READY_TIMEOUT_S} * 20)) ]; then echo "--- $log: not ready after ${READY_TIMEOUT_S} s:" >&2; cat "$log" >&2; return 1; fi
    sleep 0.05
  done
}
`;

function documents(): string[] {
  return [
    'README.md',
    ...readdirSync(join(REPO_ROOT, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => `docs/${f}`),
  ];
}

describe('the docs, run as written', () => {
  let troupe: InstalledTroupe;
  let shims: string;

  beforeAll(async () => {
    troupe = await installedTroupe();
    shims = mkdtempSync(join(tmpdir(), 'troupe-docs-bin-'));
    const real = process.env.NATS_SERVER_BIN ?? execFileSync('sh', ['-c', 'command -v nats-server'], { encoding: 'utf8' }).trim();
    writeFileSync(join(shims, 'nats-server'), `#!/bin/sh\nexec "${real}" "$@" -p "$DOCS_NATS_PORT"\n`);
    chmodSync(join(shims, 'nats-server'), 0o755);
  }, 360_000);

  afterAll(() => rmSync(shims, { recursive: true, force: true }));

  it('README states the Node.js floor that package.json engines sets', () => {
    const engines = (JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { engines: { node: string } }).engines.node;
    const floor = /^>=(\d+\.\d+)$/.exec(engines)?.[1];
    expect(floor, `engines.node is ${engines}`).toBeDefined();
    expect(readFileSync(join(REPO_ROOT, 'README.md'), 'utf8')).toContain(`Node.js ${floor} or later`);
  });

  it('the wire contract names every error code an agent may send, and no other', () => {
    const contract = readFileSync(join(REPO_ROOT, 'docs/wire-contract.md'), 'utf8');
    const listed = /takes a code of the one table[^:]*:([^.]+)\./.exec(contract)?.[1] ?? '';
    expect([...listed.matchAll(/`([A-Z_]+)`/g)].map((m) => m[1]).sort()).toEqual(Object.keys(ERROR_CODES).sort());
  });

  it('README has runnable blocks (the five-minute path)', () => {
    expect(docBlocks(readFileSync(join(REPO_ROOT, 'README.md'), 'utf8')).filter((b) => b.kind === 'run').length).toBeGreaterThanOrEqual(3);
  });

  for (const doc of documents()) {
    const blocks = docBlocks(readFileSync(join(REPO_ROOT, doc), 'utf8'));
    if (!blocks.some((b) => b.kind === 'run')) continue;
    it(`${doc}: every block marked test runs`, async () => {
      const dir = troupe.userFolder();
      const ports = new Map<string, string>();
      for (const p of DOC_PORTS) ports.set(p, String(await freePort()));
      const port = ports.get('4222')!;
      const script: string[] = [PRELUDE];
      let bg = 0;
      for (const block of blocks) {
        if (block.kind === 'file') {
          mkdirSync(join(dir, block.file!, '..'), { recursive: true });
          writeFileSync(join(dir, block.file!), block.text);
          continue;
        }
        const missing = block.needs.filter((v) => !process.env[v]);
        if (missing.length) {
          console.log(`${doc}:${block.line}: skipped, needs ${missing.join(', ')}`);
          continue;
        }
        script.push(`echo "### ${doc}:${block.line}"`);
        const text = block.text.replace(/\b(4222|8080|8090)\b/g, (p) => ports.get(p)!);
        for (const line of text.split('\n')) script.push(backgroundLine(line, ++bg));
      }
      script.push(`echo ${END}`, 'read -r -u 3 _ || true');
      const session = spawn('bash', ['-c', script.join('\n')], {
        cwd: dir,
        detached: true,
        env: { ...cleanEnv(), PATH: `${shims}:${process.env.PATH}`, DOCS_NATS_PORT: port },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let out = '';
      let ended: () => void = () => undefined;
      const lastBlockRan = new Promise<void>((resolve) => (ended = resolve));
      session.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes(END)) ended();
      });
      session.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const exited = new Promise<number | null>((resolve) => session.once('exit', (c) => resolve(c)));
      let pageProblem: string | undefined;
      if ((await Promise.race([lastBlockRan.then(() => 'ran' as const), exited.then(() => 'exited' as const)])) === 'ran') {
        const studioUrl = readdirSync(dir)
          .filter((f) => f.startsWith('.bg-'))
          .map((f) => /studio on (http:\/\/\S+)/.exec(readFileSync(join(dir, f), 'utf8'))?.[1])
          .find(Boolean);
        if (studioUrl) {
          pageProblem = await studioPageProblem(studioUrl);
          console.log(`${doc}: the studio at ${studioUrl} in Chromium: ${pageProblem ?? 'stream connected, threads listed, a thread drew its statechart'}`);
        }
        session.stdin.end();
      }
      const code = await exited;
      // The servers, nodes and agents the blocks left running.
      try {
        process.kill(-session.pid!, 'SIGTERM');
      } catch {
        // Nothing was left.
      }
      const logs = readdirSync(dir)
        .filter((f) => f.startsWith('.bg-'))
        .map((f) => `--- ${f}\n${readFileSync(join(dir, f), 'utf8').slice(-2_000)}`);
      expect(code, `${out}\n${logs.join('\n')}`).toBe(0);
      expect(pageProblem, `${out}\n${logs.join('\n')}`).toBeUndefined();
    }, 300_000);
  }
});

/**
 * Opens the studio page in Chromium: it must connect to its stream and list threads, and the first thread,
 * opened, must draw its statechart. Returns what went wrong, or undefined.
 */
async function studioPageProblem(url: string): Promise<string | undefined> {
  if (!existsSync(CHROMIUM)) return `Chromium not found at ${CHROMIUM}: apt-get install -y chromium, or set TROUPE_CHROMIUM`;
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'] });
  const errors: string[] = [];
  try {
    const page = await browser.newPage();
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(url);
    await page.getByText('stream connected').waitFor({ timeout: 30_000 });
    const thread = page.locator('.threads li[data-thread]').first();
    await thread.waitFor({ timeout: 30_000 });
    const threadId = await thread.getAttribute('data-thread');
    await thread.locator('button').click();
    await page.locator(`svg[data-actor="${threadId}"]`).waitFor({ timeout: 30_000 });
    return errors.length ? `the studio page threw: ${errors.join('; ')}` : undefined;
  } catch (err) {
    return `the studio page at ${url}: ${(err as Error).message.split('\n')[0]}${errors.length ? ` (page errors: ${errors.join('; ')})` : ''}`;
  } finally {
    await browser.close();
  }
}

/** The test process's environment without what would leak into a reader's shell (NATS settings, vitest). */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
  for (const key of Object.keys(env)) if (key.startsWith('TROUPE_') || key.startsWith('npm_') || key === 'NODE_OPTIONS' || key === 'VITEST') delete env[key];
  return env;
}
