/**
 * `npx tsx test/bench/validations.ts [--orders N] [--concurrency C] [--tenants T] [--warmup W] [--tsx]`
 * Runs the gateway as a process on its own keyspace and topics (provisioned here, removed afterwards), creates N draft
 * orders spread over T tenants, then validates them with C requests in flight, and prints validations per second end
 * to end (HTTP request sent → event read back from the purchase events topic) with latency p50/p99. The gateway is a
 * fresh process: W more orders (default 1,000) are validated first, the same way, and count in no figure. It runs
 * compiled (buildServices, as in production), or through tsx with `--tsx`.
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { connectCassandra } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import { createKafka } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { createRegistry } from '../../core/registry.ts';
import { topicNames } from '../../core/topics.ts';
import { buildServices } from '../../infra/build.ts';
import { freePort, repoRoot, spawnService, waitForHttp } from '../../infra/processes.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { ensureServers } from '../../infra/servers.ts';
import { rssMb } from './bench-env.ts';
import { benchIdentityProvider, GatewayClients, latencySummary } from './gateway-clients.ts';
import { CpuMeter, formatCpu, localServerPids } from './process-cpu.ts';
import type { PublishedEvent } from '../support/purchase.ts';

const { values } = parseArgs({
  options: {
    orders: { type: 'string', default: '1000' },
    concurrency: { type: 'string', default: '50' },
    tenants: { type: 'string', default: '1' },
    warmup: { type: 'string', default: '1000' },
    tsx: { type: 'boolean', default: false },
  },
});
const orders = Number(values.orders);
const concurrency = Number(values.concurrency);
const tenantCount = Number(values.tenants);
const warmup = Number(values.warmup);

const summary = (figures: number[]) => latencySummary(figures);
/** Runs `task` for 0..count-1 with at most `limit` in flight. */
const pool = async (count: number, limit: number, task: (index: number) => Promise<void>) => {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, count) }, async () => {
      while (next < count) await task(next++);
    }),
  );
};

if (!values.tsx) buildServices((line) => console.log(line));
const servers = await ensureServers({ root: path.join(repoRoot, '.local'), progress: (line) => console.log(line) });
const run = randomUUID().slice(0, 8);
const env: Record<string, string> = {
  KAFKA_BROKERS: servers.kafkaBrokers.join(','),
  CASSANDRA_CONTACT_POINTS: servers.cassandraContactPoints.join(','),
  CASSANDRA_LOCAL_DC: servers.cassandraLocalDc,
  SCHEMA_REGISTRY_URL: servers.schemaRegistryUrl,
  CASSANDRA_KEYSPACE: `bench_${run}`,
  KAFKA_TOPIC_PREFIX: `bench.${run}.`,
  KAFKA_PARTITIONS: '6',
  SECRETS_KEY: Buffer.alloc(32, 7).toString('base64'),
  LOG_LEVEL: 'warn',
};
const logger = createLogger('bench', 'warn');
await provision(loadConfig(env), logger);

// The dev identity provider in this process, on a free port; the gateway fetches its keys from it.
const db = await connectCassandra(loadConfig(env));
const idp = await benchIdentityProvider(db);
Object.assign(env, { AUTH_URL: idp.url, GATEWAY_BASE_URL: `http://127.0.0.1:${await freePort()}` });
const config = loadConfig(env);
const clients = new GatewayClients(config.gateway.baseUrl, concurrency);

const gateway = spawnService(
  'gateway',
  'api/main.ts',
  { ...process.env, ...env },
  path.join(repoRoot, '.local', 'logs', 'bench', `gateway-${run}.log`),
  values.tsx ? 'tsx' : 'compiled',
);

// Reads the purchase events topic from its beginning and keeps when each order's first event arrived.
const kafka = createKafka(config.kafka.brokers, 'bench-reader', logger);
const registry = createRegistry(config.schemaRegistryUrl);
const consumer = kafka.consumer({ groupId: `bench-${run}`, maxWaitTimeInMs: 50 });
const eventAt = new Map<string, number>();
/** When the gateway handed each order's first event to Kafka (the record's create time, set by the producer). */
const publishedAt = new Map<string, number>();
let duplicates = 0;

try {
  await waitForHttp(`${config.gateway.baseUrl}/ready`, 'gateway', 60_000, gateway.exited);
  const joined = new Promise<void>((resolve) => consumer.on(consumer.events.GROUP_JOIN, () => resolve()));
  await consumer.connect();
  await consumer.subscribe({ topics: [topicNames(config).purchaseEvents], fromBeginning: true });
  await consumer.run({
    partitionsConsumedConcurrently: 6,
    eachMessage: async ({ message }) => {
      const receivedAt = Date.now();
      if (!message.value) return; // a subscription change marker (core/subscriptions/subscription-changes.ts)
      const event = (await registry.decode(message.value)) as PublishedEvent;
      if (eventAt.has(event.entityId)) duplicates += 1;
      else {
        eventAt.set(event.entityId, receivedAt);
        publishedAt.set(event.entityId, Number(message.timestamp));
      }
    },
  });
  await joined;

  const tenants = await Promise.all(
    Array.from({ length: tenantCount }, async (_, index) => {
      const tenantId = `bench-${run}-${index}`;
      const call = clients.as(await idp.tokenFor(`bench-${run}-${index}`, tenantId, ['purchase']));
      const item = await call('POST', '/CorePurchase/REST/Items', { code: 'B-1', name: 'Bolt', unitPrice: '0.25' });
      return { call, itemId: item.json<{ id: string }>().id };
    }),
  );

  const created: { id: string; tenant: (typeof tenants)[number] }[] = [];
  let started = Date.now();
  await pool(warmup + orders, concurrency, async (index) => {
    const tenant = tenants[index % tenants.length]!;
    const answer = await tenant.call('POST', '/CorePurchase/REST/PurchaseOrders', {
      supplierName: 'Acme',
      currency: 'EUR',
      rows: [{ itemId: tenant.itemId, quantity: String(index + 1), description: `order ${index}` }],
    });
    if (answer.status !== 201) throw new Error(`creation answered ${answer.status}: ${answer.text}`);
    created.push({ id: answer.json<{ id: string }>().id, tenant });
  });
  const creationSeconds = (Date.now() - started) / 1000;

  // The warm-up: validate the first W orders and wait for their events; none of it is measured.
  const warm = created.splice(0, warmup);
  await pool(warm.length, concurrency, async (index) => {
    const { id, tenant } = warm[index]!;
    const answer = await tenant.call('POST', `/CorePurchase/REST/PurchaseOrders/${id}/validate`);
    if (answer.status !== 200) throw new Error(`warm-up validation answered ${answer.status}: ${answer.text}`);
  });
  const warmDeadline = Date.now() + 60_000;
  while (warm.some(({ id }) => !eventAt.has(id)) && Date.now() < warmDeadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  if (warm.some(({ id }) => !eventAt.has(id))) throw new Error('warm-up: not every event arrived within 60 s');

  const sentAt = new Map<string, number>();
  const answeredAt = new Map<string, number>();
  const failures = new Map<number, number>();
  const validated = new Set<string>();
  // Every process's CPU (the local servers when their pid files are ours): where a validation's cost goes.
  const cpu = new CpuMeter({
    gateway: gateway.child.pid,
    ...(await localServerPids()),
    'bench (clients, consumer)': process.pid,
  });
  cpu.start();
  started = Date.now();
  await pool(created.length, concurrency, async (index) => {
    const { id, tenant } = created[index]!;
    sentAt.set(id, Date.now());
    const answer = await tenant.call('POST', `/CorePurchase/REST/PurchaseOrders/${id}/validate`);
    answeredAt.set(id, Date.now());
    if (answer.status === 200) validated.add(id);
    else failures.set(answer.status, (failures.get(answer.status) ?? 0) + 1);
  });
  const answeredSeconds = (Date.now() - started) / 1000;
  const validatedIds = [...validated];
  const deadline = Date.now() + 120_000;
  while (validatedIds.some((id) => !eventAt.has(id)) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const cpuLine = formatCpu(cpu.stop(), orders, 'validation');
  const withEvent = validatedIds.filter((id) => eventAt.has(id));
  const lastEvent = Math.max(...withEvent.map((id) => eventAt.get(id)!));
  const endToEndSeconds = (lastEvent - started) / 1000;
  const http = withEvent.map((id) => answeredAt.get(id)! - sentAt.get(id)!);
  const endToEnd = withEvent.map((id) => eventAt.get(id)! - sentAt.get(id)!);
  const afterAnswer = withEvent.map((id) => eventAt.get(id)! - answeredAt.get(id)!);
  const toPublish = withEvent.map((id) => publishedAt.get(id)! - answeredAt.get(id)!);
  const toRead = withEvent.map((id) => eventAt.get(id)! - publishedAt.get(id)!);
  console.log(`
${orders} orders over ${tenantCount} tenant(s), ${concurrency} requests in flight, after ${warmup} validated as a warm-up
creation: ${((warmup + orders) / creationSeconds).toFixed(0)} orders/s
validation answered: ${(orders / answeredSeconds).toFixed(0)} validations/s over ${answeredSeconds.toFixed(1)} s${failures.size ? `; non-200: ${JSON.stringify(Object.fromEntries(failures))}` : ''}
end to end (request sent → event read from the topic): ${(withEvent.length / endToEndSeconds).toFixed(0)} validations/s over ${endToEndSeconds.toFixed(1)} s; events ${withEvent.length}/${validatedIds.length}, duplicates ${duplicates}
latency HTTP (request → 200): ${summary(http)}
latency end to end (request → event): ${summary(endToEnd)}
latency answer → event: ${summary(afterAnswer)} (answer → handed to Kafka: ${summary(toPublish)}; → read: ${summary(toRead)})
${cpuLine} (from the first validation to the last event)
gateway RSS: ${rssMb(gateway.child.pid!).toFixed(0)} MB`);
} finally {
  await consumer.disconnect();
  await clients.close();
  await gateway.stop();
  await idp.close();
  await db.shutdown();
  await deprovision(config, logger);
  await servers.stop();
}
