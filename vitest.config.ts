import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Suites start their own nats-server; two cores, so keep parallelism modest.
    pool: 'forks',
    maxWorkers: 2,
  },
});
