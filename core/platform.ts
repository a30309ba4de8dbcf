import type { Config } from './config.ts';
import { connectCassandra, type CassandraClient } from './cassandra.ts';
import { createKafka, type Kafka } from './kafka.ts';
import type { Logger } from './log.ts';
import { createRegistry } from './registry.ts';
import type { SchemaRegistry } from '@kafkajs/confluent-schema-registry';

/** Connections every service shares: Kafka, Cassandra and the schema registry. */
export interface Platform {
  kafka: Kafka;
  db: CassandraClient;
  registry: SchemaRegistry;
  close(): Promise<void>;
}

/**
 * `requestTimeoutMs` bounds each Cassandra request (the gateway's is short: see GATEWAY_DEPENDENCY_TIMEOUT);
 * `connectionsPerNode` sizes its pool (connectCassandra).
 */
export async function connectPlatform(
  config: Config,
  logger: Logger,
  clientId: string,
  cassandraOptions: { requestTimeoutMs?: number; connectionsPerNode?: number } = {},
): Promise<Platform> {
  const { requestTimeoutMs, connectionsPerNode } = cassandraOptions;
  const db = await connectCassandra(config, config.cassandra.keyspace, requestTimeoutMs, connectionsPerNode);
  return {
    kafka: createKafka(config.kafka.brokers, `${config.kafka.clientId}-${clientId}`, logger),
    db,
    registry: createRegistry(config.schemaRegistryUrl),
    close: () => db.shutdown(),
  };
}

/**
 * Runs `start` and stops what it returned on SIGTERM or SIGINT, closing resources in reverse order. The handlers are
 * there from the first moment: a service works before its start resolves (a dispatcher's consumers deliver while the
 * rest starts), and a signal then would otherwise kill it at once, attempts in flight and their offsets uncommitted;
 * a stop asked meanwhile waits for the start to end.
 */
export function runUntilSignalled(logger: Logger, start: () => Promise<() => Promise<void>>): void {
  const started = start();
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'stopping');
    started
      .then((stop) => stop())
      .then(() => process.exit(0))
      .catch((error: unknown) => {
        logger.error({ err: error }, 'stop failed');
        process.exit(1);
      });
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  started.catch((error: unknown) => {
    logger.fatal({ err: error }, 'start failed');
    process.exit(1);
  });
}
