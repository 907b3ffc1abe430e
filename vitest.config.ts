import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // `import … from 'troupe'` (examples, fixtures) resolves to the sources, as `--conditions=source` does for tsx.
    alias: [
      { find: /^troupe$/, replacement: fileURLToPath(new URL('./src/index.ts', import.meta.url)) },
      { find: /^troupe\/demo$/, replacement: fileURLToPath(new URL('./src/bin/demo/index.ts', import.meta.url)) },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    // A suite's setup starts servers and CLI processes, each allowed READY_TIMEOUT_MS (test/helpers/processes.ts).
    hookTimeout: 120_000,
    // Suites start their own nats-server and processes, and spend much of their time waiting on them: three
    // files at a time keep two cores busy (on this machine 467 s for the suite with three, 558 s with two).
    pool: 'forks',
    maxWorkers: 3,
  },
});
