/**
 * `npm run build`'s last step: bundles the studio app into dist/studio/assets/, where the installed
 * package's studio server reads it (src/studio/assets.ts). Run with tsx: `tsx scripts/build-studio.ts`.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { bundleStudio } from '../src/studio/assets.js';

const out = new URL('../dist/studio/assets/', import.meta.url);
const assets = await bundleStudio({ minify: true });
await mkdir(out, { recursive: true });
await writeFile(new URL('app.js', out), assets.js);
await writeFile(new URL('app.css', out), assets.css);
process.stdout.write(
  `studio app: ${(assets.js.length / 1024).toFixed(0)} KiB script, ${(assets.css.length / 1024).toFixed(0)} KiB styles in dist/studio/assets\n`,
);
