/**
 * A fresh Kafka or Cassandra JVM runs its request paths interpreted until the JIT has compiled them, and the first
 * minutes of load after a start are several times slower than later ones (issue 29: the first bench runs after a start
 * gave a p99 of 209 ms where warm ones gave 130 and less). So a server this process started is first given some load
 * of the kinds the services make: idempotent acks=all produces and group fetches on a scratch topic; prepared writes,
 * unlogged batches, partition reads and lightweight transactions at LOCAL_QUORUM on a scratch keyspace; and, beside
 * them, the router and dispatcher themselves delivering on scratch topics (./warm-up-pipeline.ts), since generic load
 * left most of the JIT's work for the first real minute. Its rows expire and the topic keeps ten minutes, so nothing
 * accumulates across starts.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { connectCassandra, connectSchemaAdmin, types, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import { parseDuration } from '../../core/duration.ts';
import { applyTopics, createKafka, Publisher, tailTopic, type OutgoingRecord } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import type { ServerEndpoints } from '../servers.ts';
import type { Progress } from './server-def.ts';
import { endpointsEnv, errorMessage, secondsSince } from './util.ts';
import { openPipeline, type PipelineWarmUp } from './warm-up-pipeline.ts';

export const WARM_UP_TOPIC = '_core_warm_up';
export const WARM_UP_KEYSPACE = 'core_warm_up';

/** How long a cold server is loaded after its start: SERVERS_WARM_UP, a duration (0 skips it). */
export function warmUpMs(setting: string | undefined): number {
  if (setting === undefined || setting === '') return DEFAULT_WARM_UP_MS;
  const ms = setting.trim() === '0' ? 0 : parseDuration(setting);
  if (ms === undefined) {
    throw new Error(
      `SERVERS_WARM_UP must be a duration such as 60s, or 0 to skip the warm-up, not ${JSON.stringify(setting)}`,
    );
  }
  return ms;
}
const DEFAULT_WARM_UP_MS = 60_000;
/** Callers of the generic loads: few enough to leave the pipeline's pace its share of the machine. */
const GENERIC_KAFKA_CALLERS = 2;
const GENERIC_CASSANDRA_CALLERS = 8;

/** What a warm-up did: requests each server answered in the time given. */
export interface WarmUpReport {
  kafka?: { produced: number; consumed: number };
  cassandra?: { requests: number };
  /** Events published to the scratch pipeline, orders validated there, and deliveries its receiver got. */
  pipeline?: PipelineWarmUp;
}

/**
 * Loads the `servers` named for `ms`, then answers what each carried. `settings` are the services' replication
 * settings on these servers (the cluster's), which the scratch keyspaces and topics take.
 */
export async function warmUp(
  endpoints: ServerEndpoints,
  servers: ('kafka' | 'cassandra')[],
  ms: number,
  progress: Progress = () => {},
  settings: Readonly<Record<string, string>> = {},
): Promise<WarmUpReport> {
  if (ms <= 0 || servers.length === 0) return {};
  const t0 = Date.now();
  // The scratch pipeline first, alone: its schema changes are slow on a cold Cassandra, slower beside the loads. Speed
  // only: without it the generic loads still run.
  const pipeline = await openPipeline(endpoints, settings).catch((error: unknown) => {
    progress(`warm-up: no scratch pipeline, generic load only (${errorMessage(error)})`);
    return undefined;
  });
  if (pipeline) {
    progress(`warm-up: a purchase service, a router and a dispatcher on scratch topics, ready in ${secondsSince(t0)}`);
  }
  const until = Date.now() + ms;
  progress(`warm-up: loading ${servers.join(' and ')} for ${Math.round(ms / 1000)} s (SERVERS_WARM_UP=0 skips it)…`);
  const [kafka, cassandra, delivered] = await Promise.all([
    servers.includes('kafka') ? warmKafka(endpoints, until) : undefined,
    servers.includes('cassandra') ? warmCassandra(endpoints, until, settings) : undefined,
    pipeline?.load(until),
  ]).finally(() =>
    pipeline
      ?.close()
      .catch((error: unknown) => progress(`warm-up: scratch pipeline not removed (${errorMessage(error)})`)),
  );
  const report: WarmUpReport = {
    ...(kafka && { kafka }),
    ...(cassandra && { cassandra }),
    ...(delivered && { pipeline: delivered }),
  };
  const parts = [
    kafka &&
      `kafka ${kafka.produced.toLocaleString('en-US')} records produced and ${kafka.consumed.toLocaleString('en-US')} consumed`,
    cassandra && `cassandra ${cassandra.requests.toLocaleString('en-US')} requests`,
    delivered &&
      `${delivered.delivered.toLocaleString('en-US')} deliveries of ${delivered.published.toLocaleString('en-US')} events ` +
        `and ${delivered.validated.toLocaleString('en-US')} validations`,
  ].filter(Boolean);
  progress(`warm-up: ${parts.join(', ')} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return report;
}

/** Batches of records, a few callers at once (as the router's and dispatcher's publishers), read back by a group. */
async function warmKafka(endpoints: ServerEndpoints, until: number): Promise<{ produced: number; consumed: number }> {
  const logger = createLogger('warm-up', 'error');
  const kafka = createKafka(endpoints.kafkaBrokers, 'core-warm-up', logger);
  await applyTopics(kafka, [{ name: WARM_UP_TOPIC, partitions: 3, config: { 'retention.ms': String(10 * 60_000) } }]);
  let consumed = 0;
  const tail = await tailTopic(
    kafka,
    WARM_UP_TOPIC,
    `core-warm-up-${randomUUID()}`,
    async () => {
      consumed += 1;
    },
    { fromBeginning: false, maxWaitMs: 50 },
  );
  const publisher = await Publisher.connect(kafka);
  let produced = 0;
  const value = randomBytes(800);
  try {
    await Promise.all(
      Array.from({ length: GENERIC_KAFKA_CALLERS }, async () => {
        // One batch at least (the setup may take the whole time on a loaded machine), and on until the group has read
        // a record (it joins at the end of the topic, perhaps after the first batches), 10 s past the time at most.
        for (
          let batch = 0;
          batch === 0 || Date.now() < until || (consumed === 0 && Date.now() < until + 10_000);
          batch += 1
        ) {
          const records: OutgoingRecord[] = Array.from({ length: 1 + (produced % 20) }, () => ({
            topic: WARM_UP_TOPIC,
            key: randomUUID(),
            value,
            headers: { 'warm-up': 'true' },
          }));
          await publisher.publish(records);
          produced += records.length;
        }
      }),
    );
  } finally {
    await publisher.close();
    await tail.stop();
  }
  return { produced, consumed };
}

/** Writes alone and batched, reads of a partition, and compare-and-sets, by a few concurrent callers. */
async function warmCassandra(
  endpoints: ServerEndpoints,
  until: number,
  settings: Readonly<Record<string, string>>,
): Promise<{ requests: number }> {
  const config = loadConfig({ ...settings, ...endpointsEnv(endpoints) });
  const { localDc, replicationFactor } = config.cassandra;
  const admin = await connectSchemaAdmin(config);
  let db: CassandraClient | undefined;
  try {
    await admin.execute(
      `CREATE KEYSPACE IF NOT EXISTS ${WARM_UP_KEYSPACE} WITH replication = {'class': 'NetworkTopologyStrategy', '${localDc}': ${replicationFactor}}`,
    );
    await admin.execute(
      `CREATE TABLE IF NOT EXISTS ${WARM_UP_KEYSPACE}.rows (k text, c timeuuid, v blob, n int, PRIMARY KEY (k, c))
       WITH default_time_to_live = 600 AND gc_grace_seconds = 600`,
    );
    await admin.execute(
      `CREATE TABLE IF NOT EXISTS ${WARM_UP_KEYSPACE}.cells (k text PRIMARY KEY, n int)
       WITH default_time_to_live = 600 AND gc_grace_seconds = 600`,
    );
    db = await connectCassandra(config, WARM_UP_KEYSPACE);
    const client = db;
    const value = randomBytes(600);
    const insert = 'INSERT INTO rows (k, c, v, n) VALUES (?, ?, ?, ?)';
    let requests = 0;
    await Promise.all(
      Array.from({ length: GENERIC_CASSANDRA_CALLERS }, async (_, worker) => {
        // One round at least: connecting and creating the tables may take the whole time on a loaded machine.
        for (let round = 0; round === 0 || Date.now() < until; round += 1) {
          const k = `w${worker}-${round % 50}`;
          const row = () => ({ query: insert, params: [k, types.TimeUuid.now(), value, round] });
          await client.execute(insert, row().params, { prepare: true });
          await client.batch([row(), row(), row()], { prepare: true, logged: false });
          await client.execute('SELECT c, v, n FROM rows WHERE k = ? LIMIT 20', [k], { prepare: true });
          requests += 3;
          if (round % 4 === 0) {
            const cell = `${k}-${round}`;
            await client.execute('INSERT INTO cells (k, n) VALUES (?, ?) IF NOT EXISTS', [cell, 0], { prepare: true });
            await client.execute('UPDATE cells SET n = ? WHERE k = ? IF n = ?', [1, cell, 0], { prepare: true });
            requests += 2;
          }
        }
      }),
    );
    return { requests };
  } finally {
    await db?.shutdown();
    await admin.shutdown();
  }
}
