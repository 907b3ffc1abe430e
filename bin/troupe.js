#!/usr/bin/env node
// The installed CLI runs the compiled JavaScript in dist/ (built by `npm run build`, which `npm ci` runs
// through `prepare`). A checkout without dist/ falls back to the TypeScript sources through tsx.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const compiled = new URL('../dist/bin/troupe.js', import.meta.url);
if (existsSync(fileURLToPath(compiled))) {
  await import(compiled.href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import('../src/bin/troupe.ts');
}
