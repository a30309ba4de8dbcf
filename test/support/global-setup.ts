// Provisions an isolated world for one test run: a random keyspace and topic prefix on real Kafka, Cassandra and
// schema registry. The servers come from the environment (set by test/support/run-tests.ts) or are started here.
import { randomBytes } from 'node:crypto';
import type { TestProject } from 'vitest/node';
import { loadConfig } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { testServers } from './servers.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    testEnv: Record<string, string>;
  }
}

export default async function setup(project: TestProject) {
  const servers = await testServers();
  const run = randomBytes(4).toString('hex');
  const env: Record<string, string> = {
    KAFKA_BROKERS: servers.kafkaBrokers.join(','),
    CASSANDRA_CONTACT_POINTS: servers.cassandraContactPoints.join(','),
    CASSANDRA_LOCAL_DC: servers.cassandraLocalDc,
    SCHEMA_REGISTRY_URL: servers.schemaRegistryUrl,
    CASSANDRA_KEYSPACE: `test_${project.name.replace(/\W/g, '')}_${run}`,
    KAFKA_TOPIC_PREFIX: `test.${project.name}.${run}.`,
    KAFKA_PARTITIONS: '3',
    SECRETS_KEY: randomBytes(32).toString('base64'),
    LOG_LEVEL: 'debug',
  };
  const config = loadConfig(env);
  const logger = createLogger('test-setup', 'warn');
  await provision(config, logger);
  project.provide('testEnv', env);

  return async () => {
    // Leave nothing behind on a developer's long-lived local servers.
    await deprovision(config, logger);
    await servers.stop();
  };
}
