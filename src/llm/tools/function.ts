/**
 * `type: function` tools. A `.ts`/`.js` file is imported once at start and its named export is called
 * with the arguments object (and a context with an abort signal); a `.py` file runs its function in a
 * `python3` subprocess per call — JSON arguments on stdin, a JSON result on stdout, killed when the call
 * times out — so existing Python tools keep working without a Python SDK.
 */
import { spawn } from 'node:child_process';
import { extname, resolve } from 'node:path';
import type { FunctionToolConfig } from '../../config/agent.js';
import { importUserModule } from '../../config/user-module.js';
import { TroupeError } from '../../protocol/errors.js';
import { parametersSchema } from './parameters.js';
import { toResultText, type RunnableTool, type ToolRunContext } from './types.js';

/** A Python tool may print this much JSON; more is refused (and the process killed). */
const MAX_PYTHON_OUTPUT_BYTES = 1024 * 1024;
const STDERR_TAIL = 2_000;

/**
 * Loads the module, calls the function with the JSON arguments from stdin and prints
 * {"ok": true, "result": …} or {"ok": false, "error": "…"} on the real stdout. While the tool runs,
 * sys.stdout points at stderr, so a print() in the tool cannot corrupt the result.
 */
const PYTHON_RUNNER = `
import asyncio, importlib.util, inspect, json, os, sys
path, name = sys.argv[1], sys.argv[2]
out = sys.stdout
sys.stdout = sys.stderr
def reply(value):
    out.write(json.dumps(value, default=str))
    out.flush()
try:
    args = json.loads(sys.stdin.read() or "{}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location("troupe_tool", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise LookupError(f"{path} has no function {name}")
    result = fn(**args)
    if inspect.isawaitable(result):
        async def wait():
            return await result
        result = asyncio.run(wait())
    reply({"ok": True, "result": result})
except BaseException as e:
    reply({"ok": False, "error": f"{type(e).__name__}: {e}"})
`;

function pythonExecutable(env: NodeJS.ProcessEnv = process.env): string {
  return env.TROUPE_PYTHON || 'python3';
}

/** Runs `name` from the Python file with `args`; resolves with its result, rejects with its error. */
export function runPythonFunction(
  file: string,
  name: string,
  args: Record<string, unknown>,
  signal: AbortSignal,
  python = pythonExecutable(),
): Promise<unknown> {
  return new Promise((resolvePromise, reject) => {
    if (signal.aborted) {
      reject(new Error('cancelled'));
      return;
    }
    const child = spawn(python, ['-c', PYTHON_RUNNER, file, name], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stdoutBytes = 0;
    let stderr = '';
    let failure: Error | undefined;
    const kill = (reason: Error) => {
      failure ??= reason;
      child.kill('SIGKILL');
    };
    const onAbort = () => kill(new Error('cancelled (the call timed out or the agent stopped)'));
    signal.addEventListener('abort', onAbort, { once: true });
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (d: string) => {
      stdoutBytes += Buffer.byteLength(d);
      if (stdoutBytes > MAX_PYTHON_OUTPUT_BYTES) kill(new Error(`the tool printed more than ${MAX_PYTHON_OUTPUT_BYTES} bytes`));
      else stdout += d;
    });
    child.stderr.on('data', (d: string) => {
      stderr = (stderr + d).slice(-STDERR_TAIL);
    });
    child.stdin.on('error', () => undefined);
    child.once('error', (err) => kill(new Error(`could not run ${python}: ${err.message}`)));
    child.once('close', (code) => {
      signal.removeEventListener('abort', onAbort);
      if (failure) return reject(failure);
      let reply: { ok?: unknown; result?: unknown; error?: unknown };
      try {
        reply = JSON.parse(stdout) as typeof reply;
      } catch {
        return reject(new Error(`${python} exited with code ${code} without a result${stderr.trim() ? `: ${stderr.trim()}` : ''}`));
      }
      if (reply.ok === true) resolvePromise(reply.result);
      else reject(new Error(typeof reply.error === 'string' ? reply.error : 'the tool failed'));
    });
    child.stdin.end(JSON.stringify(args));
  });
}

type JsToolFunction = (args: Record<string, unknown>, ctx: ToolRunContext) => unknown;

/** Builds a function tool; imports JS/TS modules now, so a missing export fails the start. */
export async function functionTool(tool: FunctionToolConfig, dir: string, where: string): Promise<RunnableTool> {
  const file = resolve(dir, tool.file);
  const definition = { name: tool.name, description: tool.description, parameters: parametersSchema(tool.parameters) };
  const timeout = tool.timeout_ms !== undefined ? { timeoutMs: tool.timeout_ms } : {};
  if (extname(file).toLowerCase() === '.py') {
    const python = pythonExecutable();
    return {
      definition,
      ...timeout,
      run: async (args, ctx) => toResultText(await runPythonFunction(file, tool.function, args, ctx.signal, python)),
    };
  }
  let mod: Record<string, unknown>;
  try {
    mod = await importUserModule(file);
  } catch (err) {
    throw new TroupeError('CONFIG_INVALID', `${where}: could not import ${tool.file}: ${(err as Error).message}`, { tool: tool.name });
  }
  const fn = mod[tool.function];
  if (typeof fn !== 'function') {
    throw new TroupeError('CONFIG_INVALID', `${where}: ${tool.file} exports no function "${tool.function}"`, { tool: tool.name });
  }
  return {
    definition,
    ...timeout,
    run: async (args, ctx) => toResultText(await (fn as JsToolFunction)(args, ctx)),
  };
}
