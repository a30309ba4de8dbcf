/**
 * `npx tsx test/bench/history-layout.ts [--deliveries N] [--rounds R] [--concurrency C]`
 * What the delivery history costs Cassandra per delivery, for today's layout and for the per-tenant listing with
 * Storage-Attached Indexes that issue 9 proposed. Each layout writes N deliveries the way the router and the dispatcher
 * do (an event row per two deliveries and the delivery's routing rows, then its attempt), through the same WriteBatcher,
 * C events in flight, on tables of its own in a keyspace of its own. The layouts alternate for R rounds; the figures are
 * each layout's median over its rounds: deliveries/s, Cassandra CPU per delivery (from /proc, the local Cassandra of
 * `npm run servers`) and this process's CPU per delivery (the driver's encoding, the services' share).
 *   current        a delivery row, 4 index rows (tenant, subscription, event type, event); an attempt row and an
 *                  update of the delivery row
 *   listing+sai    a delivery row and one listing row per tenant and hour holding subscription, event type and event,
 *                  each with a SAI index, instead of the 4 index tables; the attempt as today
 *   listing+sai,   as listing+sai, and the attempt is a cell of the delivery row (a map keyed by attempt number)
 *   attempt-in-row instead of a row of its own: one row written per attempt
 *   listing        the listing row without its indexes: what the 3 SAI indexes cost
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { connectCassandra, statementSender, types } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import { DEFAULT_WRITE_BATCHING, WriteBatcher, type WriteStatement } from '../../core/write-batcher.ts';
import { repoRoot } from '../../infra/processes.ts';
import { ensureServers, serverStatus } from '../../infra/servers.ts';
import { CpuMeter } from './process-cpu.ts';

const { values } = parseArgs({
  options: {
    deliveries: { type: 'string', default: '60000' },
    rounds: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '64' },
  },
});
const deliveries = Number(values.deliveries);
const rounds = Number(values.rounds);
const concurrency = Number(values.concurrency);

const LAYOUTS = ['current', 'listing+sai', 'listing+sai,attempt-in-row', 'listing'] as const;
type Layout = (typeof LAYOUTS)[number];

const servers = await ensureServers({ root: path.join(repoRoot, '.local'), progress: (line) => console.log(line) });
const cassandraPid = (await serverStatus(path.join(repoRoot, '.local'))).find((s) => s.name === 'cassandra')?.pid;
if (cassandraPid === undefined) throw new Error('no local Cassandra pid: start it with npm run servers -- start');
const keyspace = `layout_${randomUUID().slice(0, 8)}`;
const config = loadConfig({
  CASSANDRA_CONTACT_POINTS: servers.cassandraContactPoints.join(','),
  CASSANDRA_KEYSPACE: keyspace,
});
const db = await connectCassandra(config, null);
await db.execute(`CREATE KEYSPACE ${keyspace} WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`);

const DELIVERY_COLUMNS = `tenant_id text, id text, event_id text, event_type text, subscription_id text, entity_id text,
  status text, attempt_count int, last_status_code int, last_error_message text, next_retry_at timestamp,
  queued_at timestamp, occurred_at text, replay_of text, signature text`;
const INDEX = (name: string, key: string) =>
  `CREATE TABLE ${keyspace}.${name} (tenant_id text, ${key}hour bigint, queued_at timestamp, delivery_id text,
   PRIMARY KEY ((tenant_id, ${key.replace(/ text, /, ', ')}hour), queued_at, delivery_id))
   WITH CLUSTERING ORDER BY (queued_at DESC, delivery_id DESC)`;
const LISTING = (name: string) =>
  `CREATE TABLE ${keyspace}.${name} (tenant_id text, hour bigint, queued_at timestamp, delivery_id text,
   subscription_id text, event_type text, event_id text, PRIMARY KEY ((tenant_id, hour), queued_at, delivery_id))
   WITH CLUSTERING ORDER BY (queued_at DESC, delivery_id DESC)`;
for (const statement of [
  `CREATE TABLE ${keyspace}.events (tenant_id text, event_id text, event_type text, occurred_at text, entity_id text,
   resource_url text, payload blob, PRIMARY KEY ((tenant_id, event_id)))`,
  `CREATE TABLE ${keyspace}.deliveries (${DELIVERY_COLUMNS}, PRIMARY KEY ((tenant_id, id)))`,
  `CREATE TABLE ${keyspace}.deliveries_with_attempts (${DELIVERY_COLUMNS},
   attempts map<int, frozen<tuple<timestamp, int, text, int>>>, PRIMARY KEY ((tenant_id, id)))`,
  `CREATE TABLE ${keyspace}.delivery_attempts (tenant_id text, delivery_id text, attempt int, at timestamp,
   status_code int, error_message text, duration_ms int, PRIMARY KEY ((tenant_id, delivery_id), attempt))`,
  INDEX('by_tenant', ''),
  INDEX('by_subscription', 'subscription_id text, '),
  INDEX('by_event_type', 'event_type text, '),
  `CREATE TABLE ${keyspace}.by_event (tenant_id text, event_id text, queued_at timestamp, delivery_id text,
   PRIMARY KEY ((tenant_id, event_id), queued_at, delivery_id)) WITH CLUSTERING ORDER BY (queued_at DESC, delivery_id DESC)`,
  LISTING('listing_sai'),
  LISTING('listing_plain'),
  ...['subscription_id', 'event_type', 'event_id'].map(
    (column) => `CREATE INDEX ON ${keyspace}.listing_sai (${column}) USING 'sai'`,
  ),
]) {
  await db.execute(statement);
}

const TTL = 'USING TTL 2592000';
const PAYLOAD = Buffer.alloc(400, 1);
const HOUR = 3_600_000;

/** One delivery as the router stores it, in a layout: its routing rows, and its first attempt's rows. */
function deliveryWrites(layout: Layout, tenantId: string, eventId: string, index: number) {
  const id = randomUUID();
  const subscriptionId = `sub-${tenantId}-${index % 2}`;
  const queuedAt = new Date();
  const hour = Math.floor(queuedAt.getTime() / HOUR);
  const eventType = 'purchaseOrder.validated';
  const inRow = layout === 'listing+sai,attempt-in-row';
  const deliveryRow: WriteStatement = {
    query: `INSERT INTO ${keyspace}.${inRow ? 'deliveries_with_attempts' : 'deliveries'} (tenant_id, id, event_id,
      event_type, subscription_id, entity_id, status, attempt_count, queued_at, occurred_at, signature)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ${TTL}`,
    params: [
      tenantId,
      id,
      eventId,
      eventType,
      subscriptionId,
      `po-${index}`,
      'queued',
      0,
      queuedAt,
      '',
      'v1,'.padEnd(47, 'x'),
    ],
  };
  const routing: WriteStatement[] =
    layout === 'current'
      ? [
          deliveryRow,
          {
            query: `INSERT INTO ${keyspace}.by_tenant (tenant_id, hour, queued_at, delivery_id) VALUES (?, ?, ?, ?) ${TTL}`,
            params: [tenantId, hour, queuedAt, id],
          },
          {
            query: `INSERT INTO ${keyspace}.by_subscription (tenant_id, subscription_id, hour, queued_at, delivery_id) VALUES (?, ?, ?, ?, ?) ${TTL}`,
            params: [tenantId, subscriptionId, hour, queuedAt, id],
          },
          {
            query: `INSERT INTO ${keyspace}.by_event_type (tenant_id, event_type, hour, queued_at, delivery_id) VALUES (?, ?, ?, ?, ?) ${TTL}`,
            params: [tenantId, eventType, hour, queuedAt, id],
          },
          {
            query: `INSERT INTO ${keyspace}.by_event (tenant_id, event_id, queued_at, delivery_id) VALUES (?, ?, ?, ?) ${TTL}`,
            params: [tenantId, eventId, queuedAt, id],
          },
        ]
      : [
          deliveryRow,
          {
            query: `INSERT INTO ${keyspace}.${layout === 'listing' ? 'listing_plain' : 'listing_sai'} (tenant_id, hour, queued_at,
              delivery_id, subscription_id, event_type, event_id) VALUES (?, ?, ?, ?, ?, ?, ?) ${TTL}`,
            params: [tenantId, hour, queuedAt, id, subscriptionId, eventType, eventId],
          },
        ];
  const at = new Date();
  const attempt: WriteStatement[] = inRow
    ? [
        {
          query: `UPDATE ${keyspace}.deliveries_with_attempts ${TTL} SET status = ?, attempt_count = ?, last_status_code = ?,
            attempts[?] = ? WHERE tenant_id = ? AND id = ?`,
          params: ['acknowledged', 1, 204, 1, new types.Tuple(at, 204, null, 2), tenantId, id],
        },
      ]
    : [
        {
          query: `INSERT INTO ${keyspace}.delivery_attempts (tenant_id, delivery_id, attempt, at, status_code, duration_ms)
            VALUES (?, ?, ?, ?, ?, ?) ${TTL}`,
          params: [tenantId, id, 1, at, 204, 2],
        },
        {
          query: `UPDATE ${keyspace}.deliveries ${TTL} SET status = ?, attempt_count = ?, last_status_code = ?
            WHERE tenant_id = ? AND id = ?`,
          params: ['acknowledged', 1, 204, tenantId, id],
        },
      ];
  return { routing, attempt };
}

/** Writes `deliveries` in one layout (2 per event, 10 tenants); answers deliveries/s and CPU µs per delivery. */
async function runLayout(layout: Layout) {
  const batcher = new WriteBatcher(statementSender(db), DEFAULT_WRITE_BATCHING);
  const meter = new CpuMeter({ cassandra: cassandraPid, bench: process.pid });
  let next = 0;
  const worker = async () => {
    while (next < deliveries) {
      const index = next;
      next += 2;
      const tenantId = `tenant-${index % 10}`;
      const eventId = randomUUID();
      const pair = [0, 1].map((offset) => deliveryWrites(layout, tenantId, eventId, index + offset));
      const eventRow: WriteStatement = {
        query: `INSERT INTO ${keyspace}.events (tenant_id, event_id, event_type, occurred_at, entity_id, resource_url,
          payload) VALUES (?, ?, ?, ?, ?, ?, ?) ${TTL}`,
        params: [tenantId, eventId, 'purchaseOrder.validated', '', `po-${index}`, 'https://example.com/po', PAYLOAD],
      };
      await Promise.all([batcher.write([eventRow]), ...pair.map((writes) => batcher.write(writes.routing))]);
      await Promise.all(pair.map((writes) => batcher.write(writes.attempt)));
    }
  };
  const started = performance.now();
  meter.start();
  await Promise.all(Array.from({ length: concurrency }, worker));
  const shares = meter.stop();
  const seconds = (performance.now() - started) / 1000;
  const micros = (name: string) => ((shares.find((share) => share.name === name)?.seconds ?? NaN) / deliveries) * 1e6;
  return { perSecond: deliveries / seconds, cassandra: micros('cassandra'), client: micros('bench') };
}
const results = new Map<Layout, { perSecond: number; cassandra: number; client: number }[]>();
try {
  // A first pass of the first layout warms Cassandra's JIT and the driver; it counts in no figure.
  await runLayout('current');
  for (let round = 1; round <= rounds; round += 1) {
    for (const layout of LAYOUTS) {
      const result = await runLayout(layout);
      results.set(layout, [...(results.get(layout) ?? []), result]);
      console.log(
        `round ${round} ${layout}: ${result.perSecond.toFixed(0)} deliveries/s, Cassandra ` +
          `${result.cassandra.toFixed(0)} µs/delivery, client ${result.client.toFixed(0)} µs/delivery`,
      );
    }
  }
  const median = (list: number[]) => list.slice().sort((a, b) => a - b)[Math.floor(list.length / 2)]!;
  console.log(`\nmedians over ${rounds} rounds of ${deliveries} deliveries, ${concurrency} events in flight:`);
  for (const [layout, list] of results) {
    console.log(
      `  ${layout.padEnd(28)} ${median(list.map((r) => r.perSecond))
        .toFixed(0)
        .padStart(6)} deliveries/s, ` +
        `Cassandra ${median(list.map((r) => r.cassandra)).toFixed(0)} µs/delivery, ` +
        `client ${median(list.map((r) => r.client)).toFixed(0)} µs/delivery`,
    );
  }
} finally {
  await db.execute(`DROP KEYSPACE IF EXISTS ${keyspace}`);
  await db.shutdown();
}
