import path from 'node:path';
import { dockerAvailable, startContainers } from '../../infra/containers.ts';
import { repoRoot } from '../../infra/processes.ts';
import { ensureServers, type Progress, type StartedServers } from '../../infra/servers.ts';

const external = ['KAFKA_BROKERS', 'CASSANDRA_CONTACT_POINTS', 'SCHEMA_REGISTRY_URL'].every(
  (name) => process.env[name],
);

/**
 * The servers tests run against: those named by the environment; else containers where a Docker engine answers;
 * else Kafka, Cassandra and Apicurio from Maven Central as local processes (started or reused).
 */
export async function testServers(progress?: Progress): Promise<StartedServers> {
  if (!external && (await dockerAvailable())) return startContainers({ progress });
  return ensureServers({ root: path.join(repoRoot, '.local'), progress });
}
