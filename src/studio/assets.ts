/**
 * The studio's browser app: one script and one stylesheet bundled by esbuild from `app/` and npm packages
 * (preact, elkjs), never from a CDN.
 *
 * An installed package serves the files `npm run build` wrote next to this module (`dist/studio/assets/`,
 * scripts/build-studio.ts), so it needs neither esbuild nor the sources at run time. A checkout running
 * from source (tsx, vitest) has no such files: it bundles `app/` in memory on first use, so the app a
 * test sees is always the one in the tree, and `npm ci && npm test` needs no build step first.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

export interface StudioAssets {
  html: string;
  js: string;
  css: string;
}

const PAGE = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Troupe Studio</title><link rel="stylesheet" href="/assets/app.css"></head>
<body><div id="root"></div><script type="module" src="/assets/app.js"></script></body></html>`;

let cached: Promise<StudioAssets> | undefined;

/** The app's files: prebuilt when installed, bundled from the sources in a checkout. */
export function studioAssets(): Promise<StudioAssets> {
  cached ??= loadPrebuilt().then((built) => built ?? bundleStudio());
  cached.catch(() => (cached = undefined));
  return cached;
}

async function loadPrebuilt(): Promise<StudioAssets | undefined> {
  try {
    const [js, css] = await Promise.all([
      readFile(new URL('./assets/app.js', import.meta.url), 'utf8'),
      readFile(new URL('./assets/app.css', import.meta.url), 'utf8'),
    ]);
    return { html: PAGE, js, css };
  } catch {
    return undefined;
  }
}

/** Bundles `app/main.tsx` (and the CSS it imports) with esbuild; `minify` for the published build. */
export async function bundleStudio(opts: { minify?: boolean } = {}): Promise<StudioAssets> {
  const entry = fileURLToPath(new URL('./app/main.tsx', import.meta.url));
  let esbuild: typeof import('esbuild');
  try {
    esbuild = await import('esbuild');
  } catch {
    throw new Error(
      'the studio app is not built and esbuild is not installed: run `npm run build` in the checkout (or install troupe from the registry, which ships it built)',
    );
  }
  const result = await esbuild.build({
    entryPoints: [entry],
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'browser',
    target: ['chrome110', 'firefox110', 'safari16'],
    jsx: 'automatic',
    jsxImportSource: 'preact',
    minify: opts.minify ?? false,
    outdir: 'out',
    logLevel: 'silent',
    legalComments: 'none',
  });
  const js = result.outputFiles.find((f) => f.path.endsWith('.js'))?.text;
  const css = result.outputFiles.find((f) => f.path.endsWith('.css'))?.text ?? '';
  if (!js) throw new Error('esbuild produced no script for the studio app');
  return { html: PAGE, js, css };
}
