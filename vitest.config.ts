import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 180_000,
    // Workflow and e2e suites start servers; run files one at a time on this 2-core machine.
    fileParallelism: false,
    pool: 'forks',
  },
});
