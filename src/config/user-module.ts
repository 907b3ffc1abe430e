/**
 * Modules the user writes — agent and team modules, `function` tools, the TS members of a team.yaml — are
 * imported through here and nowhere else, so the installed CLI (plain Node running dist/) loads them the
 * same way the test suite (tsx) does. tsx's loaders are registered once, before the first such import:
 * its ESM hooks compile `.ts`/`.mts` and its CommonJS hooks compile a `.ts` in a folder whose package.json
 * does not say `"type": "module"` (or that has none), so a file imports `troupe` by name wherever it lives.
 * A `.cts` file is required through Node's CommonJS loader: loaded through the ESM loader instead, Node 20
 * gives it a `require` that cannot load an ES module such as `troupe`. A file tsx compiled to CommonJS
 * (`export` written in a folder without `"type": "module"`) has its exports under `default`, marked
 * `__esModule`: they are returned as they were written.
 */
import { createRequire } from 'node:module';
import { extname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

/** The file types a module the user writes may have. */
export const USER_MODULE_EXTENSIONS = ['.ts', '.mts', '.cts', '.js', '.mjs'] as const;

let registered: Promise<void> | undefined;

/** Registers tsx's ESM and CommonJS loaders in this process, once. */
function registerTypeScript(): Promise<void> {
  registered ??= (async () => {
    const [esm, cjs] = await Promise.all([import('tsx/esm/api'), import('tsx/cjs/api')]);
    esm.register();
    cjs.register();
  })();
  return registered;
}

/** Imports a module the user wrote, by path (relative to the working directory, or absolute); returns its exports. */
export async function importUserModule(file: string): Promise<Record<string, unknown>> {
  const path = resolve(file);
  await registerTypeScript();
  if (extname(path).toLowerCase() === '.cts') {
    return createRequire(import.meta.url)(path) as Record<string, unknown>;
  }
  const mod = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  const compiled = mod.default as Record<string, unknown> | undefined;
  return compiled !== null && typeof compiled === 'object' && compiled.__esModule === true ? compiled : mod;
}
