/**
 * `npm run servers -- start|stop|status`: the local Kafka, Cassandra and Apicurio under the repo's `.local/`.
 * `start` leaves them running in the background (later starts and `npm start` reuse them); `stop` ends them.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureServers, serverStatus, stopServers } from './servers.ts';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '.local');
const log = (line: string): void => console.log(line);

async function start(): Promise<void> {
  const servers = await ensureServers({ root, progress: log });
  log('');
  log(`KAFKA_BROKERS=${servers.kafkaBrokers.join(',')}`);
  log(`CASSANDRA_CONTACT_POINTS=${servers.cassandraContactPoints.join(',')}`);
  log(`CASSANDRA_LOCAL_DC=${servers.cassandraLocalDc}`);
  log(`SCHEMA_REGISTRY_URL=${servers.schemaRegistryUrl}`);
  log(`Logs in ${path.join(root, 'logs')}; stop them with: npm run servers -- stop`);
}

async function status(): Promise<boolean> {
  const all = await serverStatus(root);
  for (const s of all) {
    const pid = s.pid === undefined ? 'no pid file' : `pid ${s.pid}`;
    log(`${s.name.padEnd(10)} ${s.healthy ? 'up  ' : 'down'} ${s.address} (${pid}) ${s.healthy ? '' : s.detail}`);
  }
  return all.every((s) => s.healthy);
}

const command = process.argv[2];
try {
  if (command === 'start') await start();
  else if (command === 'stop') await stopServers(root, log);
  else if (command === 'status') process.exitCode = (await status()) ? 0 : 3;
  else {
    console.error('usage: npm run servers -- start|stop|status');
    process.exitCode = 2;
  }
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exitCode = 1;
}
