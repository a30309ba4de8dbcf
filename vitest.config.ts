import { defineConfig } from 'vitest/config';

// Three tiers: unit tests sit next to the code and touch no network; integration and end-to-end tests run against
// real Kafka, Cassandra and schema registry, started (or reused) once by the global setup.
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: [
            '{core,producer,router,dispatcher,api,infra}/**/*.test.ts',
            'test/bench/**/*.test.ts',
            'sdk/**/*.test.ts',
          ],
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          globalSetup: ['test/support/global-setup.ts'],
          testTimeout: 60_000,
          hookTimeout: 240_000,
          fileParallelism: false,
        },
      },
      {
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          globalSetup: ['test/support/global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 240_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
