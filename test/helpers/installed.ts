/**
 * Troupe as a user gets it: the checkout built (`npm run build`), packed (`npm pack`) and installed from
 * the tarball into a folder of its own, offline. Suites that test the product — the installed bin, the
 * docs' commands — share one install per source tree: it is cached under `.tmp/installed/<hash of the
 * sources>/`, made once by whichever suite gets there first (the others wait for it).
 *
 * `npm i --offline <tarball>` cannot resolve the tarball's dependencies from npm's cache (the cache holds
 * the tarballs `npm ci` fetched, not the registry's package documents), so the install folder gets a
 * package-lock.json made from the checkout's: the same versions and integrity hashes as `npm ci` installed
 * here, without the dev dependencies. `npm ci --offline` then installs it from the cache; what it printed
 * is kept (`installLog`). An install may also take some of troupe's optional packages, as a user who runs
 * `npm i <package>` next to troupe has them: `installedTroupe({ optional: ['@anthropic-ai/sdk'] })`.
 *
 *   const troupe = await installedTroupe();
 *   const dir = troupe.userFolder({ packageJson: false });   // an empty folder that sees node_modules/troupe
 *   const agent = troupe.spawn('npx', ['troupe', 'agent', 'hello.ts', …], dir);
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { REPO_ROOT } from './nats-server.js';
import { ManagedProcess, type Env } from './processes.js';

/** What the build and the package are made from: a change to any of these makes a new install. */
const SOURCES = ['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json', 'bin', 'src', 'scripts/build-studio.ts', 'README.md'];
const INSTALL_TIMEOUT_MS = 300_000;

function hashSources(): string {
  const hash = createHash('sha256');
  const add = (path: string): void => {
    const full = join(REPO_ROOT, path);
    if (!existsSync(full)) return;
    if (statSync(full).isDirectory()) {
      for (const entry of readdirSync(full).sort()) add(join(path, entry));
    } else {
      hash.update(path).update('\0').update(readFileSync(full)).update('\0');
    }
  };
  for (const s of SOURCES) add(s);
  return hash.digest('hex').slice(0, 16);
}

interface LockEntry {
  dev?: boolean;
  link?: boolean;
  [key: string]: unknown;
}

/**
 * The checkout's lockfile names no tarball URLs; without one npm asks the registry for the package's
 * document to find it, which offline works only when that document happens to be cached. The registry's
 * URL is a function of the name and version.
 */
function withResolved(key: string, entry: LockEntry): LockEntry {
  if (typeof entry.resolved === 'string' || typeof entry.version !== 'string') return entry;
  const name = typeof entry.name === 'string' ? entry.name : key.slice(key.lastIndexOf('node_modules/') + 'node_modules/'.length);
  const base = name.slice(name.lastIndexOf('/') + 1);
  return { ...entry, resolved: `https://registry.npmjs.org/${name}/-/${base}-${entry.version}.tgz` };
}

/** Where Node finds `dep` from the package at lock key `from` (`node_modules/a/node_modules/b`): nearest first. */
function resolveInLock(packages: Record<string, LockEntry>, from: string, dep: string): string | undefined {
  for (let at = from; ;) {
    const key = at ? `${at}/node_modules/${dep}` : `node_modules/${dep}`;
    if (packages[key]) return key;
    if (!at) return undefined;
    const cut = at.lastIndexOf('/node_modules/');
    at = cut < 0 ? '' : at.slice(0, cut);
  }
}

/** The lock keys of `names` and of everything they need (dependencies, non-optional peers), as the lockfile resolves them. */
function lockClosure(packages: Record<string, LockEntry>, names: readonly string[]): Set<string> {
  const out = new Set<string>();
  const visit = (from: string, dep: string) => {
    const key = resolveInLock(packages, from, dep);
    if (!key || out.has(key)) return;
    out.add(key);
    const entry = packages[key] as { dependencies?: object; peerDependencies?: object; peerDependenciesMeta?: Record<string, { optional?: boolean }> };
    for (const d of Object.keys(entry.dependencies ?? {})) visit(key, d);
    for (const d of Object.keys(entry.peerDependencies ?? {})) if (!entry.peerDependenciesMeta?.[d]?.optional) visit(key, d);
  };
  for (const name of names) visit('', name);
  return out;
}

/** package.json and package-lock.json of a folder that depends on the tarball (and the optional packages named). */
function writeInstallManifest(dir: string, tarball: string, optional: readonly string[]): void {
  const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as Record<string, unknown>;
  const lock = JSON.parse(readFileSync(join(REPO_ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> };
  const spec = `file:${relative(dir, tarball)}`;
  const extra = Object.fromEntries(optional.map((name) => [name, String(lock.packages[`node_modules/${name}`]?.version)]));
  // No overrides: a user's `npm i troupe` gets none of the checkout's, so the install must not need any.
  const dependencies = { troupe: spec, ...extra };
  const manifest = { name: 'troupe-user', private: true, dependencies };
  const packages: Record<string, unknown> = {
    '': { name: 'troupe-user', dependencies },
    'node_modules/troupe': {
      version: pkg.version,
      resolved: spec,
      license: pkg.license,
      dependencies: pkg.dependencies,
      peerDependencies: pkg.peerDependencies,
      peerDependenciesMeta: pkg.peerDependenciesMeta,
      bin: pkg.bin,
      engines: pkg.engines,
    },
  };
  const wanted = lockClosure(lock.packages, optional);
  for (const [key, entry] of Object.entries(lock.packages)) {
    if (key && !entry.link && (!entry.dev || wanted.has(key))) packages[key] = withResolved(key, { ...entry, dev: undefined });
  }
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  writeFileSync(join(dir, 'package-lock.json'), `${JSON.stringify({ name: 'troupe-user', lockfileVersion: 3, requires: true, packages }, null, 2)}\n`);
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export interface InstalledTroupe {
  /** The packed tarball. */
  readonly tarball: string;
  /** The folder holding package.json and node_modules/troupe. */
  readonly dir: string;
  /** What `npm ci` printed (stdout, then stderr) when it installed the folder. */
  readonly installLog: string;
  /**
   * A new empty folder outside any package that sees the install (its node_modules is a link to it), as a
   * user's project folder: with a package.json saying `"type": "module"`, or none.
   */
  userFolder(opts?: { packageJson?: boolean }): string;
  /** Starts a command in a folder, in a process group of its own (npx's child ends with it). */
  spawn(command: string, args: string[], cwd: string, env?: Env): InstalledProcess;
}

/** A child started in its own process group: `stop()` signals the whole group and waits until all of it is gone. */
export class InstalledProcess extends ManagedProcess {
  /** Whether any process of the group is left (npx's child can outlive npx). */
  get groupAlive(): boolean {
    try {
      process.kill(-this.pid, 0);
      return true;
    } catch {
      return false;
    }
  }

  async stop(graceMs = 5_000): Promise<void> {
    const signal = (sig: NodeJS.Signals) => {
      try {
        process.kill(-this.pid, sig);
      } catch {
        // The group is gone.
      }
    };
    signal('SIGTERM');
    const deadline = Date.now() + graceMs;
    // A group's end has no event to wait on: look every 50 ms, SIGKILL what is left after the grace time.
    while (this.groupAlive) {
      if (Date.now() > deadline) signal('SIGKILL');
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

const started = new Set<InstalledProcess>();
const folders: string[] = [];
process.once('exit', () => {
  for (const p of started) if (p.groupAlive) process.kill(-p.pid, 'SIGKILL');
  for (const f of folders) rmSync(f, { recursive: true, force: true });
});

function childEnv(env: Env): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
  for (const key of Object.keys(out)) if (key.startsWith('TROUPE_') || key.startsWith('npm_')) delete out[key];
  // No vitest or tsx of the test process may reach the user's process.
  delete out.NODE_OPTIONS;
  delete out.VITEST;
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined) delete out[k];
    else out[k] = v;
  }
  return out;
}

const installs = new Map<string, Promise<InstalledTroupe>>();

/**
 * Builds, packs and installs the checkout once per source tree (and set of optional packages); later
 * calls (and suites) reuse it.
 */
export function installedTroupe(opts: { optional?: readonly string[] } = {}): Promise<InstalledTroupe> {
  const optional = [...new Set(opts.optional ?? [])].sort();
  const key = optional.join(' ');
  let installing = installs.get(key);
  if (!installing) {
    installing = install(optional);
    installs.set(key, installing);
  }
  return installing;
}

async function install(optional: readonly string[]): Promise<InstalledTroupe> {
  // The core install builds and packs the tarball; a variant waits for it rather than build beside it.
  if (optional.length) await installedTroupe();
  const hash = hashSources();
  const variant = optional.length ? `-with-${createHash('sha256').update(optional.join(' ')).digest('hex').slice(0, 8)}` : '';
  const packed = join(REPO_ROOT, '.tmp/packed', hash);
  const base = join(tmpdir(), 'troupe-installed');
  const dir = join(base, `${hash}${variant}`);
  const done = join(dir, '.done');
  const lock = `${dir}.lock`;
  mkdirSync(base, { recursive: true });
  const deadline = Date.now() + INSTALL_TIMEOUT_MS;
  while (!existsSync(done)) {
    let mine = false;
    try {
      mkdirSync(lock);
      writeFileSync(join(lock, 'pid'), String(process.pid));
      mine = true;
    } catch {
      // Another suite is installing; a lock whose process is gone is taken over.
      const holder = Number(readFileSync(join(lock, 'pid'), { encoding: 'utf8', flag: 'a+' }) || 0);
      if (holder && !pidAlive(holder)) rmSync(lock, { recursive: true, force: true });
    }
    if (mine) {
      try {
        rmSync(dir, { recursive: true, force: true });
        const staging = mkdtempSync(`${dir}.staging-`);
        if (!existsSync(packed) || !readdirSync(packed).some((f) => f.endsWith('.tgz'))) {
          execFileSync('npm', ['run', 'build'], { cwd: REPO_ROOT, stdio: 'pipe' });
          mkdirSync(packed, { recursive: true });
          execFileSync('npm', ['pack', '--pack-destination', packed, '--ignore-scripts'], { cwd: REPO_ROOT, stdio: 'pipe' });
        }
        const tarball = readdirSync(packed).find((f) => f.endsWith('.tgz'))!;
        copyFileSync(join(packed, tarball), join(staging, tarball));
        const app = join(staging, 'app');
        mkdirSync(app);
        writeInstallManifest(app, join(staging, tarball), optional);
        const ci = spawnSync('npm', ['ci', '--offline', '--no-audit', '--no-fund'], { cwd: app, encoding: 'utf8', env: childEnv({}) });
        if (ci.status !== 0) throw new Error(`npm ci of the packed tarball failed (${ci.status}): ${ci.stderr}`);
        writeFileSync(join(staging, 'npm-ci.log'), `${ci.stdout}${ci.stderr}`);
        writeFileSync(join(staging, '.done'), '');
        renameSync(staging, dir);
      } finally {
        rmSync(lock, { recursive: true, force: true });
      }
      break;
    }
    if (Date.now() > deadline) throw new Error(`waited ${INSTALL_TIMEOUT_MS} ms for another suite's install at ${dir}`);
    // Polls the other suite's marker file; there is no event to wait on across processes.
    await new Promise((r) => setTimeout(r, 500));
  }
  const tarball = join(
    dir,
    readdirSync(dir).find((f) => f.endsWith('.tgz'))!,
  );
  const app = join(dir, 'app');
  return {
    tarball,
    dir: app,
    installLog: readFileSync(join(dir, 'npm-ci.log'), 'utf8'),
    userFolder({ packageJson = false } = {}) {
      const folder = mkdtempSync(join(tmpdir(), 'troupe-user-'));
      folders.push(folder);
      symlinkSync(join(app, 'node_modules'), join(folder, 'node_modules'), 'dir');
      if (packageJson) writeFileSync(join(folder, 'package.json'), JSON.stringify({ name: 'user', private: true, type: 'module' }));
      return folder;
    },
    spawn(command, args, cwd, env = {}) {
      const child = spawn(command, args, { cwd, env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      const proc = new InstalledProcess(`${command} ${args.slice(0, 3).join(' ')}`, child);
      started.add(proc);
      return proc;
    },
  };
}
