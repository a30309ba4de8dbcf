/**
 * `npx tsx test/bench/api-load.ts [--seconds 10] [--requests 20000] [--concurrency 32] [--history 2000]`
 * Load on the webhook API of an in-process gateway (real Cassandra, Kafka and registry, its own keyspace and topics,
 * loopback only): requests per second and latency p50/p99 of `GET /Deliveries?limit=50` over a seeded history and of
 * `POST /Subscriptions`. Each phase stops at --requests or --seconds, whichever comes first.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { startGateway } from '../../api/gateway-service.ts';
import { loadConfig } from '../../core/config.ts';
import type { Delivery } from '../../core/deliveries/delivery.ts';
import { DeliveryStore } from '../../core/deliveries/delivery-store.ts';
import { IntegratorStore } from '../../core/integrators/integrator-store.ts';
import { createLogger } from '../../core/log.ts';
import { connectPlatform } from '../../core/platform.ts';
import { ClientStore } from '../../infra/client-store.ts';
import { buildIdentityProvider, loadOrCreateSigningKey } from '../../infra/identity-provider.ts';
import { freePort, repoRoot } from '../../infra/processes.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { ensureServers } from '../../infra/servers.ts';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    requests: { type: 'string', default: '20000' },
    concurrency: { type: 'string', default: '32' },
    history: { type: 'string', default: '2000' },
  },
});
const maxSeconds = Number(values.seconds);
const maxRequests = Number(values.requests);
const concurrency = Number(values.concurrency);
const historySize = Number(values.history);

const WEBHOOKS = '/CoreWebhook/REST/Webhooks';
const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? NaN;

const servers = await ensureServers({ root: path.join(repoRoot, '.local'), progress: (line) => console.log(line) });
const run = randomUUID().slice(0, 8);
const gatewayPort = await freePort();
const idpPort = await freePort();
const env: Record<string, string> = {
  KAFKA_BROKERS: servers.kafkaBrokers.join(','),
  CASSANDRA_CONTACT_POINTS: servers.cassandraContactPoints.join(','),
  CASSANDRA_LOCAL_DC: servers.cassandraLocalDc,
  SCHEMA_REGISTRY_URL: servers.schemaRegistryUrl,
  CASSANDRA_KEYSPACE: `bench_api_${run}`,
  KAFKA_TOPIC_PREFIX: `bench.api.${run}.`,
  KAFKA_PARTITIONS: '3',
  SECRETS_KEY: randomBytes(32).toString('base64'),
  AUTH_URL: `http://127.0.0.1:${idpPort}`,
  GATEWAY_HOST: '127.0.0.1',
  GATEWAY_PORT: String(gatewayPort),
  GATEWAY_BASE_URL: `http://127.0.0.1:${gatewayPort}`,
  PURCHASE_OUTBOX_RELAY: 'false',
  LOG_LEVEL: 'warn',
};
const config = loadConfig(env);
const logger = createLogger('api-load', 'warn');
console.log(`provisioning keyspace ${config.cassandra.keyspace} and topics ${config.kafka.topicPrefix}*`);
await provision(config, logger);

const platform = await connectPlatform(config, logger, 'api-load');
const keyDir = await mkdtemp(path.join(tmpdir(), 'api-load-'));
const idp = buildIdentityProvider({
  issuer: `${config.auth.url}/`,
  key: await loadOrCreateSigningKey(path.join(keyDir, 'key.json')),
  clients: new ClientStore(platform.db),
  defaultAudience: 'core-api',
});
let stopGateway: (() => Promise<void>) | undefined;
const pool = new Pool(config.gateway.baseUrl, { connections: concurrency, pipelining: 1 });

try {
  await idp.listen({ host: '127.0.0.1', port: idpPort });
  const tenant = `bench-${run}`;
  const clientId = `bench-client-${run}`;
  const clientSecret = randomBytes(16).toString('hex');
  await new ClientStore(platform.db).create(clientId, clientSecret, tenant);
  await new IntegratorStore(platform.db).register('webhook', clientId, tenant);
  stopGateway = await startGateway(config, platform, logger, { webhook: true, purchase: true });

  const tokenResponse = await fetch(`${config.auth.url}/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ client_id: clientId, client_secret: clientSecret, grant_type: 'client_credentials' }),
  });
  const { access_token: token } = (await tokenResponse.json()) as { access_token: string };
  const authorization = `Bearer ${token}`;

  // The catalogue arrives through Kafka; subscriptions are accepted once it lists the purchase event types.
  const deadline = Date.now() + 60_000;
  for (;;) {
    const answer = await pool.request({ method: 'GET', path: `${WEBHOOKS}/EventTypes`, headers: { authorization } });
    const body = (await answer.body.json()) as { items?: unknown[] };
    if ((body.items?.length ?? 0) >= 3) break;
    if (Date.now() > deadline) throw new Error('the catalogue never listed the purchase event types');
    await new Promise((resolve) => setTimeout(resolve, 200));
  }

  // A history spread over the last hour, so every GET reads a full page of 50 rows.
  const store = new DeliveryStore(platform.db, config.webhook.historyRetentionMs);
  const now = Date.now();
  const subscriptionIds = Array.from({ length: 5 }, () => randomUUID());
  const history: Delivery[] = Array.from({ length: historySize }, (_, index) => ({
    tenantId: tenant,
    id: randomUUID(),
    eventId: randomUUID(),
    eventType: 'purchaseOrder.validated',
    subscriptionId: subscriptionIds[index % subscriptionIds.length]!,
    entityId: `po-${index}`,
    status: index % 10 === 0 ? 'abandoned' : 'acknowledged',
    attemptCount: 1,
    lastStatusCode: 204,
    lastErrorMessage: null,
    nextRetryAt: null,
    queuedAt: new Date(now - 1_000 - Math.floor((index / historySize) * 3_000_000)),
    occurredAt: new Date(now - 2_000).toISOString(),
    replayOf: null,
    signature: null,
  }));
  for (let start = 0; start < history.length; start += 200) {
    await Promise.all(history.slice(start, start + 200).map((delivery) => store.insertDelivery(delivery)));
  }
  console.log(
    `seeded ${history.length} deliveries; ${concurrency} connections, ≤${maxRequests} requests or ≤${maxSeconds} s per phase`,
  );

  const subscriptionBody = JSON.stringify({ url: 'https://93.184.216.34/hook', eventTypes: ['purchaseOrder.*'] });
  const phases = [
    {
      name: 'GET /Deliveries?limit=50',
      expect: 200,
      send: () => pool.request({ method: 'GET', path: `${WEBHOOKS}/Deliveries?limit=50`, headers: { authorization } }),
    },
    {
      name: 'GET /Deliveries?subscriptionId=…&status=abandoned',
      expect: 200,
      send: () =>
        pool.request({
          method: 'GET',
          path: `${WEBHOOKS}/Deliveries?subscriptionId=${subscriptionIds[0]}&status=abandoned&limit=50`,
          headers: { authorization },
        }),
    },
    {
      name: 'POST /Subscriptions',
      expect: 201,
      send: () =>
        pool.request({
          method: 'POST',
          path: `${WEBHOOKS}/Subscriptions`,
          headers: { authorization, 'content-type': 'application/json' },
          body: subscriptionBody,
        }),
    },
  ];

  const results = [];
  for (const phase of phases) {
    // A short warm-up (JIT, prepared statements, connection pool) that is not measured.
    for (let i = 0; i < 100; i += 1) await (await phase.send()).body.dump();
    const latencies: number[] = [];
    let errors = 0;
    let issued = 0;
    const started = performance.now();
    const stopAt = started + maxSeconds * 1000;
    const worker = async () => {
      while (issued < maxRequests && performance.now() < stopAt) {
        issued += 1;
        const t0 = performance.now();
        try {
          const response = await phase.send();
          await response.body.dump();
          if (response.statusCode !== phase.expect) errors += 1;
        } catch {
          errors += 1;
        }
        latencies.push(performance.now() - t0);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    const seconds = (performance.now() - started) / 1000;
    latencies.sort((a, b) => a - b);
    results.push({
      phase: phase.name,
      requests: latencies.length,
      errors,
      seconds: Number(seconds.toFixed(2)),
      'req/s': Math.round(latencies.length / seconds),
      'p50 ms': Number(percentile(latencies, 0.5).toFixed(2)),
      'p99 ms': Number(percentile(latencies, 0.99).toFixed(2)),
      'max ms': Number((latencies.at(-1) ?? NaN).toFixed(2)),
    });
  }
  console.table(results);
  console.log(JSON.stringify({ concurrency, history: historySize, results }));
} finally {
  await pool.close();
  await stopGateway?.();
  await idp.close();
  await platform.close();
  await rm(keyDir, { recursive: true, force: true });
  await deprovision(config, logger);
  await servers.stop();
}
