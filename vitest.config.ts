import { defineConfig } from 'vitest/config';

// Four tiers: unit tests sit next to the code and touch no network; integration and end-to-end tests run against
// real Kafka, Cassandra and schema registry, started (or reused) once by the global setup; deploy checks the Helm
// chart, the Dockerfile and the alerting rules with Go-built validators (helm, kubeconform, promtool), which compile
// on a new machine's first run: it runs after the others, which `npm test` overlaps with that build. Each project has
// its own sequence.groupOrder, run in that order: without one, a project of one worker (unit, on 2 cores) would run
// after every numbered group. Projects of one group share one pool and its worker count, so integration and e2e take
// turns here; `npm test` runs e2e in a vitest process of its own beside the others (test/support/run-tests.ts).
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: [
            '{core,producer,router,dispatcher,api,infra}/**/*.test.ts',
            'test/bench/**/*.test.ts',
            'test/chaos/**/*.test.ts',
            'sdk/**/*.test.ts',
          ],
          sequence: { groupOrder: 1 },
          exclude: ['infra/deploy/**', 'infra/monitoring/**', '**/node_modules/**'],
        },
      },
      {
        test: {
          name: 'deploy',
          include: ['infra/deploy/**/*.test.ts', 'infra/monitoring/**/*.test.ts'],
          sequence: { groupOrder: 3 },
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
          sequence: { groupOrder: 2 },
        },
      },
      {
        // The local cluster (infra/servers/cluster.ts) under faults, started once for the project (cluster-setup.ts).
        // `npm test` runs it last, once the single-node servers are stopped.
        test: {
          name: 'cluster',
          include: ['test/cluster/**/*.test.ts'],
          globalSetup: ['test/support/cluster-setup.ts'],
          testTimeout: 900_000,
          fileParallelism: false,
          sequence: { groupOrder: 5 },
        },
      },
      {
        // The container image built (infra/image.ts) and its services run against the local servers. The hook's bound
        // covers a new machine's first build: the Node base image made from Debian's packages, then the Dockerfile.
        test: {
          name: 'image',
          include: ['test/image/**/*.test.ts'],
          globalSetup: ['test/support/global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 900_000,
          sequence: { groupOrder: 4 },
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
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
