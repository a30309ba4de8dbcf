// What the delivery benches share: the environment of a run on its own keyspace and topics, a free port, a process's
// resident memory.
import { readFileSync } from 'node:fs';
import type { ensureServers } from '../../infra/servers.ts';

/** A router's and a dispatcher's environment on the local servers, on keyspace and topics named after `run`. */
export function benchEnv(
  servers: Awaited<ReturnType<typeof ensureServers>>,
  run: string,
  extra: Record<string, string>,
): Record<string, string> {
  return {
    KAFKA_BROKERS: servers.kafkaBrokers.join(','),
    CASSANDRA_CONTACT_POINTS: servers.cassandraContactPoints.join(','),
    SCHEMA_REGISTRY_URL: servers.schemaRegistryUrl,
    CASSANDRA_KEYSPACE: `bench_${run}`,
    KAFKA_TOPIC_PREFIX: `bench.${run}.`,
    KAFKA_PARTITIONS: '6',
    SECRETS_KEY: Buffer.alloc(32, 7).toString('base64'),
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    LOG_LEVEL: 'warn',
    ...extra,
  };
}

/** A process's resident memory in MB; NaN once it has exited. */
export function rssMb(pid: number): number {
  try {
    const line = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
    return line ? Number(line[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}
