/**
 * `npx tsx test/bench/lwt-cost.ts [--rate 250] [--seconds 30] [--warmup 10]`
 * What one compare-and-set costs Cassandra, against a plain write: the shape of a purchase order's transition (a
 * logged batch of `UPDATE … IF version = ?` on the order's static columns and the INSERT of its outbox row, one
 * partition), then the same batch without its condition, each at `--rate` a second (paced, one in flight per order) on
 * the local servers' Cassandra (npm run servers). Prints each one's p50/p99 and Cassandra's CPU per operation, so a
 * setting of the server (paxos_variant, say) can be compared across restarts.
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import cassandra from 'cassandra-driver';
import { loadConfig } from '../../core/config.ts';
import { CpuMeter, localServerPids } from './process-cpu.ts';
import { latencySummary } from './gateway-clients.ts';

const { values } = parseArgs({
  options: {
    rate: { type: 'string', default: '250' },
    seconds: { type: 'string', default: '30' },
    warmup: { type: 'string', default: '10' },
  },
});
const rate = Number(values.rate);
const seconds = Number(values.seconds);
const warmup = Number(values.warmup);
// Where Cassandra is, as the services read it (CASSANDRA_CONTACT_POINTS, CASSANDRA_LOCAL_DC).
const { contactPoints, localDc } = loadConfig().cassandra;
const keyspace = `lwt_bench_${randomUUID().slice(0, 8)}`;

const client = new cassandra.Client({
  contactPoints,
  localDataCenter: localDc,
});
await client.connect();
await client.execute(
  `CREATE KEYSPACE ${keyspace} WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`,
);
await client.execute(`CREATE TABLE ${keyspace}.orders (tenant_id text, id text, version int static, dto text static,
  outbox_id text, payload text, PRIMARY KEY ((tenant_id, id), outbox_id))`);
const release = (await client.execute('SELECT release_version FROM system.local')).first()?.get('release_version');
const paxos = await client
  .execute("SELECT value FROM system_views.settings WHERE name = 'paxos_variant'")
  .then((result) => String(result.first()?.get('value')))
  .catch(() => 'unknown');

const body = JSON.stringify({ supplierName: 'Acme', rows: Array.from({ length: 3 }, (_, i) => ({ i, q: '1.5' })) });
let next = 0;

/** One transition of a fresh order from version `from`: conditional (as the service does) or not. */
async function transition(conditional: boolean): Promise<void> {
  const id = `o${next++}`;
  const update = conditional
    ? `UPDATE ${keyspace}.orders SET version = ?, dto = ? WHERE tenant_id = ? AND id = ? IF version = ?`
    : `UPDATE ${keyspace}.orders SET version = ?, dto = ? WHERE tenant_id = ? AND id = ?`;
  const queries = [
    { query: update, params: conditional ? [1, body, 't', id, null] : [1, body, 't', id] },
    {
      query: `INSERT INTO ${keyspace}.orders (tenant_id, id, outbox_id, payload) VALUES (?, ?, ?, ?)`,
      params: ['t', id, randomUUID(), body],
    },
  ];
  await client.batch(queries, { prepare: true, logged: true });
}

/** `count` operations at `rate` a second; each one's latency in ms. */
async function paced(count: number, op: () => Promise<void>): Promise<number[]> {
  const latencies: number[] = [];
  const started = performance.now();
  const inFlight: Promise<void>[] = [];
  for (let i = 0; i < count; i += 1) {
    const due = started + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const sent = performance.now();
    inFlight.push(op().then(() => void latencies.push(performance.now() - sent)));
  }
  await Promise.all(inFlight);
  return latencies;
}

const pids = await localServerPids();
try {
  console.log(`Cassandra ${release}, paxos_variant ${paxos}, ${rate}/s for ${seconds} s each after ${warmup} s`);
  // What Cassandra spends with nothing asked of it (compaction, gossip, its own tables): taken off each figure below.
  const idle = new CpuMeter({ cassandra: pids.cassandra });
  idle.start();
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const idleShare = idle.stop()[0];
  const idlePerSecond = idleShare ? idleShare.seconds / seconds : 0;
  console.log(`idle: cassandra ${idleShare?.percentOfCore.toFixed(1)} % of a core`);
  for (const [name, conditional] of [
    ['conditional batch (IF version = ?)', true],
    ['the same batch without its condition', false],
    ['conditional batch again', true],
  ] as const) {
    await paced(rate * warmup, () => transition(conditional));
    const cpu = new CpuMeter({ cassandra: pids.cassandra });
    cpu.start();
    const latencies = await paced(rate * seconds, () => transition(conditional));
    const [share] = cpu.stop();
    const busy = share ? share.seconds - idlePerSecond * seconds : undefined;
    const perOp = busy === undefined ? '?' : ((busy / latencies.length) * 1e6).toFixed(0);
    console.log(
      `${name}: ${latencySummary(latencies, 1, true)}; cassandra ${share?.percentOfCore.toFixed(0)} % of a core, ` +
        `${perOp} µs per operation above idle`,
    );
  }
} finally {
  await client.execute(`DROP KEYSPACE ${keyspace}`);
  await client.shutdown();
}
