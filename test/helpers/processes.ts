/**
 * Child processes for end-to-end suites: the `troupe` CLI (and any other program, e.g. the Python agent)
 * run as real processes from the repo root, with their output captured.
 *
 *   const procs = new ProcessGroup();
 *   const node = await procs.spawnTroupe(['up', '--nats', url], nats.env);        // resolves once ready
 *   const { code, stdout } = await runTroupe(['ps', '--nats', url, '--json'], nats.env);
 *   afterAll(() => procs.stopAll());                                              // also after a failure
 *
 * The CLI runs as `node --conditions=source --import tsx src/bin/troupe.ts …` (no npx wrapper), so the child's pid is the
 * troupe process itself and a signal sent to it reaches the runtime directly.
 *
 * Every child leads a process group of its own, and is stopped with its group: what it started (the nats-servers
 * of `troupe cluster up`, an MCP server, a Python tool) ends with it, even when it is killed with SIGKILL. Every
 * child is registered at once, so one whose readiness wait fails is killed there, and any still running when
 * the test process exits is killed then (without an afterAll, as when a worker ends on a timeout).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { REPO_ROOT } from './nats-server.js';

const TROUPE_ENTRY = 'src/bin/troupe.ts';

export type Env = Record<string, string | undefined>;

/**
 * How long a child may take to say it is ready. A child compiles its sources with tsx (a cold cache on a fresh
 * clone) while the other vitest worker runs a suite of its own, so on two busy cores a start has taken over 20 s
 * (CI, stop 25: an agent started beside three others). The wait ends as soon as the line appears.
 */
export const READY_TIMEOUT_MS = 45_000;

/**
 * How long one run of a one-shot CLI command may take (runTroupe's default): a fresh process that compiles its
 * sources with tsx, on two cores busy with the other suites, has taken over 10 s where a quiet machine takes 1.5 s.
 */
const CLI_RUN_MS = 20_000;

/**
 * The timeout of a test that runs `runs` CLI processes one after another: each may take CLI_RUN_MS, plus
 * `ownMs` for the test's own work. The test still ends as soon as its runs do; only a hung one waits this long.
 */
export const cliTestTimeout = (runs: number, ownMs = 15_000): number => runs * CLI_RUN_MS + ownMs;

/** How long after a child's exit its process group is still signalled to end what it left behind. */
const GROUP_AFTER_EXIT_MS = 60_000;

/** What the CLI prints on stderr once a long-running command is ready. */
export const READY = {
  up: /troupe node \S+ up on /,
  agent: /agent instance\(s\) joined /,
} as const;

export interface SpawnOptions {
  /** A label for error messages; default: the command. */
  name?: string;
  /** Resolve once stderr (or `readyOn`) matches; default for `up` and `agent`: their readiness line. */
  ready?: RegExp;
  readyOn?: 'stdout' | 'stderr';
  /** How long readiness may take; default 20 s. */
  readyTimeoutMs?: number;
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The environment a child gets: ours, no colours, plus the given variables (undefined removes one). */
function childEnv(env: Env): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
  // A URL or credentials from the outer shell must not leak into a test's child.
  for (const key of [
    'TROUPE_NATS_URL',
    'TROUPE_NATS_USER',
    'TROUPE_NATS_PASSWORD',
    'TROUPE_NATS_CREDS',
    'TROUPE_NATS_TLS_CA',
    'TROUPE_CREDS_DIR',
    'TROUPE_TENANT',
  ])
    delete out[key];
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined) delete out[k];
    else out[k] = v;
  }
  return out;
}

function tail(text: string, max = 4_000): string {
  return text.length > max ? `…${text.slice(-max)}` : text;
}

/** A running child with its output captured. */
export class ManagedProcess {
  readonly pid: number;
  readonly exited: Promise<ExitInfo>;
  private out = '';
  private err = '';
  private exit?: ExitInfo;
  private exitedAt?: number;
  private readonly startedAt = Date.now();
  private lastOutputAt?: number;
  private readonly watchers = new Set<() => void>();

  constructor(
    readonly name: string,
    readonly child: ChildProcess,
  ) {
    if (child.pid === undefined) throw new Error(`${name}: the process did not start`);
    this.pid = child.pid;
    child.stdout?.setEncoding('utf8');
    child.stderr?.setEncoding('utf8');
    child.stdout?.on('data', (d: string) => {
      this.out += d;
      this.lastOutputAt = Date.now();
      this.notify();
    });
    child.stderr?.on('data', (d: string) => {
      this.err += d;
      this.lastOutputAt = Date.now();
      this.notify();
    });
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        this.exitedAt = Date.now();
        this.notify();
        resolve(this.exit);
      });
    });
  }

  get stdout(): string {
    return this.out;
  }

  get stderr(): string {
    return this.err;
  }

  get running(): boolean {
    return this.exit === undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  private notify(): void {
    for (const w of [...this.watchers]) w();
  }

  /** Resolves when the stream matches; rejects when the process exits first or the timeout passes. */
  waitFor(pattern: RegExp, opts: { on?: 'stdout' | 'stderr'; timeoutMs?: number } = {}): Promise<void> {
    const on = opts.on ?? 'stderr';
    const timeoutMs = opts.timeoutMs ?? 20_000;
    const text = () => (on === 'stdout' ? this.out : this.err);
    return new Promise((resolve, reject) => {
      const done = (err?: Error) => {
        clearTimeout(timer);
        this.watchers.delete(check);
        if (err) reject(err);
        else resolve();
      };
      const check = () => {
        if (pattern.test(text())) done();
        else if (this.exit) done(new Error(`${this.name} exited (${this.exit.code ?? this.exit.signal}) before ${pattern} on ${on}:\n${this.describe()}`));
      };
      const timer = setTimeout(() => done(new Error(`${this.name}: no ${pattern} on ${on} within ${timeoutMs} ms:\n${this.describe()}`)), timeoutMs);
      this.watchers.add(check);
      check();
    });
  }

  /**
   * Sends `signal` to the child's process group (the child and whatever it started); false when none is left.
   * Once the child has exited its pid may be taken again (pid_max can be as low as 32768), so its group is
   * signalled only for a while after the exit, when its leftovers are what shares that id.
   */
  signalGroup(signal: NodeJS.Signals): boolean {
    if (this.exitedAt !== undefined && Date.now() - this.exitedAt > GROUP_AFTER_EXIT_MS) return false;
    try {
      process.kill(-this.pid, signal);
      return true;
    } catch {
      // No such group (it was never one, or every member is gone): the child alone, if it still runs.
      return this.running ? this.child.kill(signal) : false;
    }
  }

  /**
   * Sends the signal to the child's group and waits for the child's exit; escalates to SIGKILL after `graceMs`.
   * Whatever of its group outlives it (a grandchild it did not stop) is killed once it has exited.
   */
  async kill(signal: NodeJS.Signals = 'SIGTERM', graceMs = 5_000): Promise<ExitInfo> {
    if (!this.running) {
      const exit = this.exit ?? (await this.exited);
      this.signalGroup('SIGKILL');
      return exit;
    }
    this.signalGroup(signal);
    const timer =
      signal === 'SIGKILL'
        ? undefined
        : setTimeout(() => {
            if (this.running) this.signalGroup('SIGKILL');
          }, graceMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
      this.signalGroup('SIGKILL');
    }
  }

  /** The tail of its output, for failure messages. */
  describe(): string {
    const now = Date.now();
    const quiet = this.lastOutputAt === undefined ? 'no output yet' : `last output ${now - this.lastOutputAt} ms ago`;
    return `--- ${this.name} (pid ${this.pid}, started ${now - this.startedAt} ms ago, ${quiet}) stderr ---\n${tail(this.err)}\n--- stdout ---\n${tail(this.out)}`;
  }
}

function spawnProcess(command: string, args: string[], env: Env, opts: SpawnOptions = {}): ManagedProcess {
  // detached: the child leads a new process group (see the header), stopped as a whole by ManagedProcess.kill.
  const child = spawn(command, args, { cwd: REPO_ROOT, env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  // Without a listener a failed spawn (ENOENT) would be an uncaught error in the test process.
  let spawnError: Error | undefined;
  child.once('error', (err) => (spawnError = err));
  if (child.pid === undefined) throw new Error(`could not start ${command}: ${spawnError?.message ?? 'no pid'}`);
  const proc = new ManagedProcess(opts.name ?? [command, ...args].join(' ').slice(0, 80), child);
  live.add(proc);
  void proc.exited.then(() => live.delete(proc));
  return proc;
}

/** Waits for `proc`'s readiness line; a child that is not ready in time (or exits first) is killed with its group. */
async function awaitReady(proc: ManagedProcess, ready: RegExp, opts: SpawnOptions): Promise<ManagedProcess> {
  try {
    await proc.waitFor(ready, { on: opts.readyOn ?? 'stderr', timeoutMs: opts.readyTimeoutMs ?? READY_TIMEOUT_MS });
    return proc;
  } catch (err) {
    await proc.kill('SIGKILL');
    throw err;
  }
}

function troupeArgs(args: string[]): string[] {
  return ['--conditions=source', '--import', 'tsx', TROUPE_ENTRY, ...args];
}

/** Starts `troupe <args>` (a long-running command) and resolves once it is ready. */
export async function spawnTroupe(args: string[], env: Env, opts: SpawnOptions = {}, group?: ProcessGroup): Promise<ManagedProcess> {
  const proc = spawnProcess(process.execPath, troupeArgs(args), env, { name: opts.name ?? `troupe ${args.slice(0, 2).join(' ')}`, ...opts });
  group?.add(proc);
  const ready = opts.ready ?? (args[0] === 'up' ? READY.up : args[0] === 'agent' ? READY.agent : undefined);
  return ready ? awaitReady(proc, ready, opts) : proc;
}

/** Runs a one-shot `troupe <args>` and collects its output; kills it after `timeoutMs`. */
export async function runTroupe(args: string[], env: Env, opts: { timeoutMs?: number } = {}): Promise<RunResult> {
  const timeoutMs = opts.timeoutMs ?? CLI_RUN_MS;
  const proc = spawnProcess(process.execPath, troupeArgs(args), env, { name: `troupe ${args.slice(0, 2).join(' ')}` });
  const timer = setTimeout(() => {
    if (proc.running) proc.signalGroup('SIGKILL');
  }, timeoutMs);
  try {
    const exit = await proc.exited;
    if (exit.signal === 'SIGKILL') throw new Error(`troupe ${args.join(' ')} did not finish within ${timeoutMs} ms:\n${proc.describe()}`);
    return { code: exit.code, stdout: proc.stdout, stderr: proc.stderr };
  } finally {
    clearTimeout(timer);
    // Whatever it started and left behind goes with it.
    proc.signalGroup('SIGKILL');
  }
}

/** Runs `troupe <args>` with `--json` output expected on stdout; fails with its output when it is not JSON. */
export async function runTroupeJson<T = unknown>(args: string[], env: Env, opts: { timeoutMs?: number; expectCode?: number } = {}): Promise<T> {
  const res = await runTroupe(args, env, opts);
  const expected = opts.expectCode ?? 0;
  if (res.code !== expected) throw new Error(`troupe ${args.join(' ')} exited ${res.code} (expected ${expected}):\n${res.stderr}\n${res.stdout}`);
  try {
    return JSON.parse(res.stdout) as T;
  } catch {
    throw new Error(`troupe ${args.join(' ')} printed no JSON:\n${res.stdout}\n${res.stderr}`);
  }
}

/** Children that must not outlive the test process, even when the worker exits without afterAll. */
const live = new Set<ManagedProcess>();
process.once('exit', () => {
  for (const p of live) p.signalGroup('SIGKILL');
});

/** The long-running children of one suite; `stopAll` in afterAll ends every one of them. */
export class ProcessGroup {
  private readonly procs: ManagedProcess[] = [];

  add(proc: ManagedProcess): ManagedProcess {
    this.procs.push(proc);
    return proc;
  }

  spawnTroupe(args: string[], env: Env, opts: SpawnOptions = {}): Promise<ManagedProcess> {
    return spawnTroupe(args, env, opts, this);
  }

  /** Starts any program (e.g. the Python agent); resolves once `opts.ready` matches, if given. */
  async spawn(command: string, args: string[], env: Env, opts: SpawnOptions = {}): Promise<ManagedProcess> {
    const proc = this.add(spawnProcess(command, args, env, opts));
    return opts.ready ? awaitReady(proc, opts.ready, opts) : proc;
  }

  get all(): readonly ManagedProcess[] {
    return this.procs;
  }

  /** SIGTERM to every child still running (they drain), SIGKILL to any that takes longer than `graceMs`. */
  async stopAll(graceMs = 3_000): Promise<void> {
    await Promise.all(this.procs.splice(0).map((p) => p.kill('SIGTERM', graceMs).catch(() => undefined)));
  }
}
