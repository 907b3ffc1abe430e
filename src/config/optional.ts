/**
 * The optional packages: what only some features of an agent.yaml need — a model provider's SDK, the MCP
 * client, the vector database, the file parsers of test cases. They are optional peer dependencies of
 * troupe, so the core install stays small; the repository has them as dev dependencies. A feature imports
 * its packages on first use (`importOptional`, llm/optional.ts) and fails with DEPENDENCY_MISSING naming
 * the `npm i` to run; `troupe validate` warns about the same from this table.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

export const OPTIONAL_FEATURES = {
  anthropic: { feature: 'an anthropic model', packages: ['@anthropic-ai/sdk'] },
  mcp: { feature: 'an mcp tool', packages: ['@modelcontextprotocol/sdk'] },
  vectorstore: { feature: 'a vectorstore tool', packages: ['@lancedb/lancedb'] },
  pdf: { feature: 'reading pdf files', packages: ['pdfjs-dist'] },
  excel: { feature: 'reading excel files', packages: ['exceljs', 'fflate'] },
  word: { feature: 'reading word files', packages: ['mammoth', 'fflate', '@xmldom/xmldom'] },
  powerpoint: { feature: 'reading powerpoint files', packages: ['fflate', '@xmldom/xmldom'] },
} as const satisfies Record<string, { feature: string; packages: readonly string[] }>;

export type OptionalFeature = keyof typeof OPTIONAL_FEATURES;

const resolveFromHere = createRequire(import.meta.url);

/** The npm package of an import specifier: `@scope/name/sub` → `@scope/name`, `name/sub` → `name`. */
export function packageOf(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
}

/**
 * Whether the package is installed where Node looks for it from troupe's own folder (each
 * `node_modules` up the tree, then the global folders): its package.json is there. Resolving the package
 * itself would depend on what its `exports` offer `require`.
 */
function isInstalled(pkg: string): boolean {
  return (resolveFromHere.resolve.paths(pkg) ?? []).some((dir) => existsSync(join(dir, pkg, 'package.json')));
}

/** The packages of a feature that are not installed (none when it can run). */
export function missingFor(feature: OptionalFeature): string[] {
  return OPTIONAL_FEATURES[feature].packages.filter((p) => !isInstalled(p));
}

/** What to tell the user when packages of a feature are missing: which, and the command that installs them. */
export function missingMessage(feature: string, missing: readonly string[]): string {
  const which = missing.length === 1 ? `the optional package ${missing[0]}, which is` : `the optional packages ${missing.join(', ')}, which are`;
  return `${feature} needs ${which} not installed: run npm i ${missing.join(' ')}`;
}
