/**
 * Optional dependencies: packages only some features need (office file parsers, …) are peer
 * dependencies marked optional, so the core install stays small. A feature loads its package on first
 * use through here; when it is not installed, the error names the package and the command to run.
 */
import { TroupeError } from '../protocol/errors.js';

/** The npm package of an import specifier: `@scope/name/sub` → `@scope/name`, `name/sub` → `name`. */
function packageOf(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
}

/** Imports `specifier`; throws DEPENDENCY_MISSING naming the package and `npm i <package>` when it is not installed. */
export async function importOptional<T>(specifier: string, feature: string): Promise<T> {
  try {
    return (await import(specifier)) as T;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const pkg = packageOf(specifier);
    // Only the package itself missing: a package that is there but fails to load is its own error.
    if ((code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') && String((err as Error).message).includes(`'${pkg}`)) {
      throw new TroupeError(
        'DEPENDENCY_MISSING',
        `${feature} needs the optional package ${pkg}, which is not installed: run npm i ${pkg}`,
        { package: pkg },
        { cause: err },
      );
    }
    throw err;
  }
}
