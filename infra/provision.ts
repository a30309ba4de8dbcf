import { connectSchemaAdmin, migrate } from '../core/cassandra.ts';
import type { Config } from '../core/config.ts';
import { applyTopics, createKafka } from '../core/kafka.ts';
import type { Logger } from '../core/log.ts';
import { codecFor, createRegistry, type SchemaName } from '../core/registry.ts';
import { topicLayout, topicNames } from '../core/topics.ts';

/** Applies CQL migrations; idempotent. */
export const applyMigrations = (config: Config) => migrate(config);

/** Creates or widens every topic; idempotent. */
export async function applyTopicLayout(config: Config, logger: Logger) {
  return applyTopics(createKafka(config.kafka.brokers, `${config.kafka.clientId}-admin`, logger), topicLayout(config));
}

/** Registers each Avro schema under the subject of every topic that carries it; registering again changes nothing. */
export async function registerSchemas(config: Config): Promise<{ subject: string; schema: string; id: number }[]> {
  const registry = createRegistry(config.schemaRegistryUrl);
  const topics = topicNames(config);
  const subjects: [SchemaName, string][] = [
    ['integrationEvent', topics.purchaseEvents],
    ['eventType', topics.eventTypes],
    ['delivery', topics.deliveries],
    ...topics.retries.map(({ topic }) => ['delivery', topic] as [SchemaName, string]),
    // Registered here rather than by the first dispatcher: two starting at once on a fresh environment raced on the
    // subject's compatibility setting, and one died (ConfluentSchemaRegistryCompatibilityError, BACKWARD != NONE).
    ['delivery', topics.overflow],
  ];
  const registered = [];
  for (const [schema, topic] of subjects) {
    const { schemaId } = await codecFor(registry, schema, topic);
    registered.push({ subject: `${topic}-value`, schema, id: schemaId });
  }
  return registered;
}

/** Everything a fresh environment needs before the services start. */
export async function provision(config: Config, logger: Logger) {
  const migrations = await applyMigrations(config);
  const topics = await applyTopicLayout(config, logger);
  const schemas = await registerSchemas(config);
  return { migrations, topics, schemas };
}

/** Removes a provisioned environment's topics and keyspace (tests and benchmarks clean up after themselves). */
export async function deprovision(config: Config, logger: Logger, what = { keyspace: true }): Promise<void> {
  const admin = createKafka(config.kafka.brokers, `${config.kafka.clientId}-admin`, logger).admin();
  await admin.connect();
  try {
    const existing = new Set(await admin.listTopics());
    const topics = topicLayout(config)
      .map((topic) => topic.name)
      .filter((name) => existing.has(name));
    if (topics.length > 0) await admin.deleteTopics({ topics });
  } finally {
    await admin.disconnect();
  }
  if (!what.keyspace) return;
  const db = await connectSchemaAdmin(config);
  try {
    await db.execute(`DROP KEYSPACE IF EXISTS ${config.cassandra.keyspace}`);
  } finally {
    await db.shutdown();
  }
}
