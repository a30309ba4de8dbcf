/**
 * `npm run servers -- start|stop|status [--cluster]`: the local Kafka, Cassandra and Apicurio under the repo's
 * `.local/`. `start` leaves them running in the background (later starts and `npm start` reuse them); `stop` ends them.
 * With `--cluster`, the three-broker, three-node cluster of infra/servers/cluster.ts instead (`stop` without it stops
 * both).
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CLUSTER_SERVICE_ENV } from './servers/cluster.ts';
import { ensureCluster, ensureServers, serverStatus, stopServers } from './servers.ts';
import { warmUpMs } from './servers/warm-up.ts';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '.local');
const log = (line: string): void => console.log(line);

async function start(cluster: boolean): Promise<void> {
  const servers = cluster
    ? await ensureCluster({ root, progress: log, warmUpMs: warmUpMs(process.env.SERVERS_WARM_UP) })
    : await ensureServers({ root, progress: log });
  log('');
  log(`KAFKA_BROKERS=${servers.kafkaBrokers.join(',')}`);
  log(`CASSANDRA_CONTACT_POINTS=${servers.cassandraContactPoints.join(',')}`);
  log(`CASSANDRA_LOCAL_DC=${servers.cassandraLocalDc}`);
  log(`SCHEMA_REGISTRY_URL=${servers.schemaRegistryUrl}`);
  if (cluster) for (const [name, value] of Object.entries(CLUSTER_SERVICE_ENV)) log(`${name}=${value}`);
  const logs = cluster ? path.join(root, 'logs', 'cluster') : path.join(root, 'logs');
  log(`Logs in ${logs}; stop them with: npm run servers -- stop${cluster ? ' --cluster' : ''}`);
}

async function status(cluster: boolean): Promise<boolean> {
  const all = await serverStatus(root, cluster);
  for (const s of all) {
    const pid = s.pid === undefined ? 'no pid file' : `pid ${s.pid}`;
    const role = s.role ? ` ${s.role}` : '';
    log(
      `${s.id.padEnd(cluster ? 20 : 10)} ${s.healthy ? 'up  ' : 'down'} ${s.address} (${pid})${role} ${s.healthy ? '' : s.detail}`.trimEnd(),
    );
  }
  return all.every((s) => s.healthy);
}

const [command, ...flags] = process.argv.slice(2);
const cluster = flags.includes('--cluster');
const unknown = flags.filter((flag) => flag !== '--cluster');
try {
  if (unknown.length > 0) {
    console.error(`unknown option ${unknown.join(' ')}; usage: npm run servers -- start|stop|status [--cluster]`);
    process.exitCode = 2;
  } else if (command === 'start') await start(cluster);
  else if (command === 'stop') await stopServers(root, log, cluster ? 'cluster' : undefined);
  else if (command === 'status') process.exitCode = (await status(cluster)) ? 0 : 3;
  else {
    console.error('usage: npm run servers -- start|stop|status [--cluster]');
    process.exitCode = 2;
  }
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exitCode = 1;
}
