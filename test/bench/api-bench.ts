/**
 * `npm run bench -- --api [--rate 250] [--seconds 30] [--subs 2] [--tenants 10] [--warmup 5] [--patches 100] [--tsx]`
 * The path an integrator sees: the purchase API call that validates an order, to the webhook's arrival at the
 * subscriber. Runs the gateway, a router and a dispatcher as processes (compiled, as production runs them) on a keyspace
 * and topics of their own, the dev identity provider and a receiver on a thread of this process; per tenant, `--subs` Hmac
 * subscriptions to purchaseOrder.validated are created through the API (their answers timed, then `--patches` PATCHes
 * of one, timed too: each waits for its change marker's produce). Then `--rate` validations a second (round robin over
 * the tenants) for `--warmup` seconds, not counted, and for `--seconds`. Prints the validate call's p50/p99/max, the
 * call → receipt and answer → event on the topic → receipt latencies, validations/s answered, CPU per validation of
 * every process and the stages of the gateway (the purchase service's), the router and the dispatcher.
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
import type { PublishedEvent } from '../support/purchase.ts';
import { benchEnv, rssMb } from './bench-env.ts';
import { benchIdentityProvider, GatewayClients, latencySummary } from './gateway-clients.ts';
import { CpuMeter, formatCpu, localServerPids } from './process-cpu.ts';
import { startReceiverThread } from './receiver-thread.ts';
import { formatRuntime, formatStage, scrapeStages } from './stage-histograms.ts';

const { values } = parseArgs({
  options: {
    api: { type: 'boolean', default: true },
    rate: { type: 'string', default: '250' },
    seconds: { type: 'string', default: '30' },
    subs: { type: 'string', default: '2' },
    tenants: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '5' },
    patches: { type: 'string', default: '100' },
    tsx: { type: 'boolean', default: false },
  },
});
const rate = Number(values.rate);
const seconds = Number(values.seconds);
const subsPerTenant = Number(values.subs);
const tenantCount = Number(values.tenants);
const warmupSeconds = Number(values.warmup);
const patches = Number(values.patches);

const summary = (figures: number[]) => latencySummary(figures, 1, true);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// The receiver, on a thread of its own (test/bench/receiver-worker.ts), so that the clients' work here does not delay
// its stamps: when each (order, subscription) first arrived.
const receivedAt = new Map<string, number>();
let requests = 0;
const receiver = await startReceiverThread();
receiver.onReceipt(({ entityId, subscriptionId, at }) => {
  requests += 1;
  const key = `${entityId}/${subscriptionId}`;
  if (!receivedAt.has(key)) receivedAt.set(key, at);
});
const receiverUrl = receiver.url;

if (!values.tsx) buildServices((line) => console.log(line));
const servers = await ensureServers({ root: path.join(repoRoot, '.local'), progress: (line) => console.log(line) });
const run = randomUUID().slice(0, 8);
const env = benchEnv(servers, run, { CASSANDRA_LOCAL_DC: servers.cassandraLocalDc });
const logger = createLogger('bench', 'warn');
await provision(loadConfig(env), logger);
const db = await connectCassandra(loadConfig(env));
const idp = await benchIdentityProvider(db);
Object.assign(env, { AUTH_URL: idp.url, GATEWAY_BASE_URL: `http://127.0.0.1:${await freePort()}` });
const config = loadConfig(env);
const runtime = values.tsx ? 'tsx' : 'compiled';
const logs = path.join(repoRoot, '.local', 'logs', 'bench');
const metricsPorts = { gateway: await freePort(), router: await freePort(), dispatcher: await freePort() };
const gateway = spawnService(
  'gateway',
  'api/main.ts',
  { ...process.env, ...env, METRICS_PORT: String(metricsPorts.gateway) },
  path.join(logs, `gateway-${run}.log`),
  runtime,
);
const services = [
  gateway,
  ...(['router', 'dispatcher'] as const).map((name) =>
    spawnService(
      name,
      `${name}/main.ts`,
      { ...process.env, ...env, METRICS_PORT: String(metricsPorts[name]) },
      path.join(logs, `${name}-${run}.log`),
      runtime,
    ),
  ),
];

const clients = new GatewayClients(config.gateway.baseUrl, 64);
const timed = async <T>(into: number[], call: () => Promise<T>) => {
  const started = performance.now();
  const result = await call();
  into.push(performance.now() - started);
  return result;
};

// Reads the purchase events topic once the run is over: when each order's event was handed to Kafka (its create time,
// kept in the record). Read live, this observer added a fetch and a decode per event to the machine it measures, on
// the thread that times the validate calls.
const kafka = createKafka(config.kafka.brokers, 'bench-api-reader', logger);
const registry = createRegistry(config.schemaRegistryUrl);
const consumer = kafka.consumer({ groupId: `bench-${run}`, maxWaitTimeInMs: 50 });
const publishedAt = new Map<string, number>();
const readCreateTimes = async (ids: string[]) => {
  await consumer.connect();
  await consumer.subscribe({ topics: [topicNames(config).purchaseEvents], fromBeginning: true });
  await consumer.run({
    partitionsConsumedConcurrently: 6,
    eachMessage: async ({ message }) => {
      if (!message.value) return; // a subscription change marker
      const event = (await registry.decode(message.value)) as PublishedEvent;
      if (!publishedAt.has(event.entityId)) publishedAt.set(event.entityId, Number(message.timestamp));
    },
  });
  const deadline = Date.now() + 60_000;
  while (ids.some((id) => !publishedAt.has(id))) {
    if (Date.now() > deadline) throw new Error('the purchase events topic did not give every event within a minute');
    await sleep(50);
  }
};

try {
  await waitForHttp(`${config.gateway.baseUrl}/ready`, 'gateway', 60_000, gateway.exited);

  const creates: number[] = [];
  const tenants = await Promise.all(
    Array.from({ length: tenantCount }, async (_, index) => {
      const tenantId = `bench-${run}-${index}`;
      const call = clients.as(await idp.tokenFor(`bench-${run}-${index}`, tenantId, ['purchase', 'webhook']));
      const item = await call('POST', '/CorePurchase/REST/Items', { code: 'B-1', name: 'Bolt', unitPrice: '0.25' });
      const subscriptions: string[] = [];
      for (let sub = 0; sub < subsPerTenant; sub += 1) {
        const created = await timed(creates, () =>
          call('POST', '/CoreWebhook/REST/Webhooks/Subscriptions', {
            url: receiverUrl,
            eventTypes: ['purchaseOrder.validated'],
            authenticationMode: 'Hmac',
          }),
        );
        if (created.status !== 201)
          throw new Error(`subscription creation answered ${created.status}: ${created.text}`);
        subscriptions.push(created.json<{ id: string }>().id);
      }
      return { call, itemId: item.json<{ id: string }>().id, subscriptions };
    }),
  );
  const updates: number[] = [];
  for (let index = 0; index < patches; index += 1) {
    const tenant = tenants[index % tenants.length]!;
    const answer = await timed(updates, () =>
      tenant.call('PATCH', `/CoreWebhook/REST/Webhooks/Subscriptions/${tenant.subscriptions[0]}`, {
        description: `patch ${index}`,
      }),
    );
    if (answer.status !== 200) throw new Error(`PATCH answered ${answer.status}: ${answer.text}`);
  }

  // Drafts for the warm-up and the run, made beforehand.
  const total = Math.round(rate * (warmupSeconds + seconds));
  const drafts: { id: string; tenant: (typeof tenants)[number] }[] = [];
  for (let next = 0; next < total;) {
    await Promise.all(
      Array.from({ length: Math.min(50, total - next) }, async () => {
        const index = next++;
        const tenant = tenants[index % tenants.length]!;
        const answer = await tenant.call('POST', '/CorePurchase/REST/PurchaseOrders', {
          supplierName: 'Acme',
          currency: 'EUR',
          rows: [{ itemId: tenant.itemId, quantity: '1', description: `order ${index}` }],
        });
        if (answer.status !== 201) throw new Error(`creation answered ${answer.status}: ${answer.text}`);
        drafts.push({ id: answer.json<{ id: string }>().id, tenant });
      }),
    );
  }

  /** Validates `orders` at `rate` a second (a tick every 10 ms); resolves when every call was answered. */
  const validate = async (orders: typeof drafts) => {
    const sent = new Map<string, number>();
    const answered = new Map<string, number>();
    const failures = new Map<number, number>();
    const calls: Promise<void>[] = [];
    const started = performance.now();
    for (let next = 0; next < orders.length;) {
      const due = Math.min(orders.length, Math.floor(((performance.now() - started) / 1000) * rate) + 1);
      for (; next < due; next += 1) {
        const { id, tenant } = orders[next]!;
        sent.set(id, performance.timeOrigin + performance.now());
        calls.push(
          tenant.call('POST', `/CorePurchase/REST/PurchaseOrders/${id}/validate`).then((answer) => {
            answered.set(id, performance.timeOrigin + performance.now());
            if (answer.status !== 200) failures.set(answer.status, (failures.get(answer.status) ?? 0) + 1);
          }),
        );
      }
      await sleep(10);
    }
    await Promise.all(calls);
    return { sent, answered, failures, seconds: (performance.now() - started) / 1000 };
  };
  const arrived = (orders: typeof drafts) =>
    orders.every(({ id, tenant }) => tenant.subscriptions.every((sub) => receivedAt.has(`${id}/${sub}`)));
  const waitFor = async (orders: typeof drafts, what: string) => {
    const deadline = Date.now() + 120_000;
    while (!arrived(orders)) {
      if (Date.now() > deadline) throw new Error(`${what}: not every delivery arrived within 2 minutes`);
      await sleep(50);
    }
  };

  const warm = drafts.splice(0, Math.round(rate * warmupSeconds));
  await validate(warm);
  await waitFor(warm, 'warm-up');
  const warmScrapes = new Map<string, string | undefined>();
  for (const [service, port] of Object.entries(metricsPorts)) {
    warmScrapes.set(service, (await scrapeStages(`http://127.0.0.1:${port}/metrics`)).text);
  }
  const cpu = new CpuMeter({
    ...Object.fromEntries(services.map((service) => [service.name, service.child.pid])),
    ...(await localServerPids()),
    'bench (clients, receiver)': process.pid,
  });
  console.log(`warm-up done; measuring ${drafts.length} validations`);
  cpu.start();
  const measured = await validate(drafts);
  await waitFor(drafts, 'run');
  const cpuLine = formatCpu(cpu.stop(), drafts.length, 'validation');
  await readCreateTimes(drafts.map(({ id }) => id));

  const validateMs: number[] = [];
  const callToReceipt: number[] = [];
  const answerToTopic: number[] = [];
  const topicToReceipt: number[] = [];
  for (const { id, tenant } of drafts) {
    const sent = measured.sent.get(id)!;
    const answered = measured.answered.get(id)!;
    validateMs.push(answered - sent);
    const onTopic = publishedAt.get(id);
    if (onTopic !== undefined) answerToTopic.push(onTopic - answered);
    for (const sub of tenant.subscriptions) {
      const at = receivedAt.get(`${id}/${sub}`)!;
      callToReceipt.push(at - sent);
      if (onTopic !== undefined) topicToReceipt.push(at - onTopic);
    }
  }
  const stages: string[] = [];
  for (const [service, port] of Object.entries(metricsPorts)) {
    const scrape = await scrapeStages(`http://127.0.0.1:${port}/metrics`, warmScrapes.get(service));
    stages.push(...scrape.stages.map((entry) => formatStage(service, entry)));
    if (scrape.runtime) stages.push(formatRuntime(service, scrape.runtime));
  }
  const failures = [...measured.failures].map(([status, count]) => `${count}× ${status}`).join(', ');
  console.log(`
${drafts.length} validations at ${rate}/s over ${tenantCount} tenants × ${subsPerTenant} subscriptions (${drafts.length * subsPerTenant} deliveries), after ${warm.length} as a warm-up
validations answered: ${(drafts.length / measured.seconds).toFixed(0)}/s${failures ? `; not 200: ${failures}` : ''}; requests received ${requests}
validate call (request → 200): ${summary(validateMs)}
call → receipt (each delivery): ${summary(callToReceipt)}
  answer → event on the topic (its create time): ${summary(answerToTopic)}
  event on the topic → receipt: ${summary(topicToReceipt)}
subscription create (request → 201): ${summary(creates)}; PATCH (request → 200): ${summary(updates)}
${cpuLine}
${stages.join('\n')}
gateway RSS ${rssMb(gateway.child.pid!).toFixed(0)} MB`);
} finally {
  await consumer.disconnect();
  await clients.close();
  await Promise.all(services.map((service) => service.stop()));
  await idp.close();
  await db.shutdown();
  await receiver.stop();
  await deprovision(config, logger);
  await servers.stop();
}
