/**
 * Executable docs: every shell block of README.md and docs/*.md marked ```` ```sh test ```` runs verbatim,
 * in document order, in one bash session per document, in a new folder that sees the packed tarball
 * installed offline (as `npm i troupe` would leave it), against a real nats-server the blocks start. A
 * block marked ```` ```<lang> file=<name> ```` is written to that file when the document reaches it.
 *
 * What the session changes, and only this: the port 4222 becomes a free one (a shared machine may have a
 * server there), in the blocks and, through a `nats-server` shim first on PATH, in the server's
 * configuration; a line ending in `&` has its output kept in a log, and the session waits for that
 * process to say it is ready (a server, a node, an agent) before the next line, as a reader would; at
 * the end every process the session started is stopped. A block marked `needs=VAR` runs only when VAR is
 * set; otherwise it is skipped with the reason printed (keys and the internet are not in CI).
 */
import { spawn, execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installedTroupe, type InstalledTroupe } from './helpers/installed.js';
import { freePort, REPO_ROOT } from './helpers/nats-server.js';

const DOC_PORT = '4222';
/** What a process started in the background prints once it is ready. */
const READY = String.raw`Server is ready|troupe node \S+ up on|agent instance\(s\) joined|"msg": "joined"`;
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

  it('README has runnable blocks (the five-minute path)', () => {
    expect(docBlocks(readFileSync(join(REPO_ROOT, 'README.md'), 'utf8')).filter((b) => b.kind === 'run').length).toBeGreaterThanOrEqual(3);
  });

  for (const doc of documents()) {
    const blocks = docBlocks(readFileSync(join(REPO_ROOT, doc), 'utf8'));
    if (!blocks.some((b) => b.kind === 'run')) continue;
    it(`${doc}: every block marked test runs`, async () => {
      const dir = troupe.userFolder();
      const port = String(await freePort());
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
        for (const line of block.text.replaceAll(DOC_PORT, port).split('\n')) script.push(backgroundLine(line, ++bg));
      }
      const session = spawn('bash', ['-c', script.join('\n')], {
        cwd: dir,
        detached: true,
        env: { ...cleanEnv(), PATH: `${shims}:${process.env.PATH}`, DOCS_NATS_PORT: port },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      session.stdout.on('data', (d: Buffer) => (out += d.toString()));
      session.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const code = await new Promise<number | null>((resolve) => session.once('exit', (c) => resolve(c)));
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
    }, 300_000);
  }
});

/** The test process's environment without what would leak into a reader's shell (NATS settings, vitest). */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
  for (const key of Object.keys(env)) if (key.startsWith('TROUPE_') || key.startsWith('npm_') || key === 'NODE_OPTIONS' || key === 'VITEST') delete env[key];
  return env;
}
