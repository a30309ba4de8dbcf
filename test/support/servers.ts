import path from 'node:path';
import { dockerAvailable, startContainers } from '../../infra/containers.ts';
import { repoRoot } from '../../infra/processes.ts';
import { ensureServers, type Progress, type StartedServers } from '../../infra/servers.ts';
import { warmUpMs } from '../../infra/servers/warm-up.ts';

const external = ['KAFKA_BROKERS', 'CASSANDRA_CONTACT_POINTS', 'SCHEMA_REGISTRY_URL'].every(
  (name) => process.env[name],
);

/**
 * The servers tests run against: those named by the environment; else containers where a Docker engine answers;
 * else Kafka, Cassandra and Apicurio from Maven Central as local processes (started or reused).
 */
export async function testServers(progress?: Progress): Promise<StartedServers> {
  if (!external && (await dockerAvailable())) return startContainers({ progress });
  // No warm-up unless asked for (SERVERS_WARM_UP): its writes leave Cassandra flushing and compacting while the first
  // tests run, and two CI runs with it had a slower isolation test (fast p50 544 and 880 ms against 80 ms without).
  return ensureServers({
    root: path.join(repoRoot, '.local'),
    progress,
    warmUpMs: warmUpMs(process.env.SERVERS_WARM_UP ?? '0'),
  });
}
