/**
 * Imports an optional package on first use (config/optional.ts lists them, by feature). When it is not
 * installed, the error names the package and the command to run.
 */
import { missingFor, missingMessage, OPTIONAL_FEATURES, packageOf, type OptionalFeature } from '../config/optional.js';
import { TroupeError } from '../protocol/errors.js';

/** Imports `specifier`; throws DEPENDENCY_MISSING naming the package and `npm i <package>` when it is not installed. */
export async function importOptional<T>(specifier: string, feature: string): Promise<T> {
  try {
    return (await import(specifier)) as T;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const pkg = packageOf(specifier);
    // Only the package itself missing: a package that is there but fails to load is its own error.
    if ((code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') && String((err as Error).message).includes(`'${pkg}`)) {
      throw new TroupeError('DEPENDENCY_MISSING', missingMessage(feature, [pkg]), { package: pkg }, { cause: err });
    }
    throw err;
  }
}

/**
 * Throws DEPENDENCY_MISSING naming every package of `feature` that is not installed, before any work
 * starts; `where` says what in the configuration needs it (`model`, `agent.yaml tools[0] "notes"`).
 */
export function requireInstalled(feature: OptionalFeature, where: string): void {
  const missing = missingFor(feature);
  if (missing.length) {
    throw new TroupeError('DEPENDENCY_MISSING', `${where}: ${missingMessage(OPTIONAL_FEATURES[feature].feature, missing)}`, { packages: missing });
  }
}
