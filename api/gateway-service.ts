import { randomUUID } from 'node:crypto';
import { Catalogue, type EventTypeEntry, type PartitionOffsets } from '../core/catalogue.ts';
import { requireSecrets, type Config } from '../core/config.ts';
import { RequestBudget } from '../core/budget.ts';
import { createTokenVerifier } from '../core/auth/verifier.ts';
import { DeliveryStore } from '../core/deliveries/delivery-store.ts';
import { IntegratorStore } from '../core/integrators/integrator-store.ts';
import { Publisher, tailTopic, type Kafka } from '../core/kafka.ts';
import { deliveryMessage, type DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import type { Logger } from '../core/log.ts';
import type { Platform } from '../core/platform.ts';
import { codecFor } from '../core/registry.ts';
import { parseCidrs } from '../core/ssrf.ts';
import { IdempotencyStore } from '../core/subscriptions/idempotency-store.ts';
import { SubscriptionStore } from '../core/subscriptions/subscription-store.ts';
import { topicNames } from '../core/topics.ts';
import { ReplayJobStore } from '../core/replay-jobs/replay-job-store.ts';
import type { ReplayJobRoutesOptions } from './replay-job-routes.ts';
import { startPurchaseService } from '../producer/purchase-service.ts';
import { CONSOLE_ROOT } from './console-routes.ts';
import { buildGateway, type ReadinessCheck } from './gateway.ts';
import type { TestEvent } from './webhook-routes.ts';
import { subscriptionChangeMarkers } from '../core/subscriptions/subscription-changes.ts';
import { lookup } from 'node:dns/promises';
import { operationalEventTypes } from '../core/operational-event-types.ts';
import { OperationalLimit } from '../core/operational-limit.ts';
import { startOperationalOutbox } from '../core/operational-service.ts';
import { createGatewayMetrics, Readiness, serveMetrics } from '../core/metrics.ts';

/**
 * How long start-up waits for the catalogue to catch up before listening anyway (it then answers subscription writes
 * 503 and /ready 503 until it has): the topic is small, so this is only reached when Kafka is in trouble.
 */
const CATALOGUE_CATCH_UP_MS = 30_000;

/** Starts the gateway: both APIs on one port, the purchase outbox relay, and the catalogue follower. */
export async function startGateway(
  config: Config,
  platform: Platform,
  logger: Logger,
  apis: { webhook: boolean; purchase: boolean },
): Promise<() => Promise<void>> {
  const topics = topicNames(config);
  const verifier = createTokenVerifier(config.auth);
  const integrators = new IntegratorStore(platform.db);
  const metrics = createGatewayMetrics();
  const purchase = apis.purchase
    ? await startPurchaseService(config, platform, logger, {
        relay: config.purchase.outboxRelay,
        metrics: metrics.purchase,
      })
    : undefined;
  let catalogueTail: { stop(): Promise<void> } | undefined;
  const readiness: ReadinessCheck[] = [
    {
      name: 'cassandra',
      ready: async () => (await platform.db.execute('SELECT release_version FROM system.local')).rowLength === 1,
    },
  ];
  let webhook;
  let replayJobs: ReplayJobRoutesOptions | undefined;
  let publisher: Publisher | undefined;
  let operational: { stop(): Promise<void> } | undefined;
  if (apis.webhook) {
    const replays = await Publisher.connect(platform.kafka);
    publisher = replays;
    const deliveryCodec = await codecFor<DeliveryRecord>(platform.registry, 'delivery', topics.deliveries);
    const eventCodec = await codecFor<TestEvent>(platform.registry, 'integrationEvent', topics.purchaseEvents);
    const catalogueCodec = await codecFor<EventTypeEntry>(platform.registry, 'eventType', topics.eventTypes);
    const catalogue = new Catalogue(catalogueCodec);
    // The service's own event types (operational events), declared like a producer's.
    await replays.publish(
      await Promise.all(
        operationalEventTypes().map(async (entry) => ({
          topic: topics.eventTypes,
          key: entry.eventType,
          value: await catalogueCodec.encode(entry),
        })),
      ),
    );
    // The end offsets are taken after this process's own catalogue entries were published (purchase service above).
    catalogue.expect(await topicOffsets(platform.kafka, topics.eventTypes));
    catalogueTail = await tailTopic(platform.kafka, topics.eventTypes, `catalogue-${randomUUID()}`, (record) =>
      catalogue.apply(record.value, record.key, record),
    );
    if (!(await catalogue.whenCaughtUp(CATALOGUE_CATCH_UP_MS))) {
      logger.warn(
        { topic: topics.eventTypes },
        'catalogue not caught up yet; subscription writes answer 503 until it is',
      );
    }
    readiness.push({ name: 'catalogue', ready: () => catalogue.caughtUp });
    const subscriptionStore = new SubscriptionStore(platform.db, requireSecrets(config));
    const deliveryStore = new DeliveryStore(
      platform.db,
      config.webhook.historyRetentionMs,
      config.cassandra.writeBatch,
    );
    const operationalOutbox = await startOperationalOutbox(
      config,
      platform,
      replays,
      {
        subscription: (tenantId, id) => subscriptionStore.get(tenantId, id),
        deliveryStatus: async (tenantId, id) => (await deliveryStore.state(tenantId, id))?.status,
      },
      logger,
    );
    operational = operationalOutbox;
    const outbox = operationalOutbox.outbox;
    webhook = {
      subscriptions: subscriptionStore,
      deliveries: deliveryStore,
      operational: { intend: outbox.intend.bind(outbox), limit: new OperationalLimit() },
      idempotency: new IdempotencyStore(platform.db),
      catalogue,
      historyRetentionMs: config.webhook.historyRetentionMs,
      dependencyTimeoutMs: config.gateway.dependencyTimeoutMs,
      enqueue: async (record: DeliveryRecord) =>
        replays.publish([await deliveryMessage(topics.deliveries, record, (value) => deliveryCodec.encode(value))]),
      // Test events take the purchase events topic (keyed by tenant, as the producer's own): the router reads it.
      raiseTestEvent: async (event: TestEvent) =>
        replays.publish([{ topic: topics.purchaseEvents, key: event.tenantId, value: await eventCodec.encode(event) }]),
      // Every events topic the routers read (a marker in the tenant's partition, ahead of its later events), and the
      // changes topic the dispatchers tail.
      subscriptionsChanged: (tenantId: string) =>
        replays.publish(
          subscriptionChangeMarkers([...config.kafka.sourceTopics, topics.subscriptionChanges], tenantId),
        ),
      rules: {
        allowHttp: config.webhook.allowHttp,
        allowed: parseCidrs(config.webhook.allowedCidrs),
        resolve: async (host: string) => (await lookup(host, { all: true })).map((entry) => entry.address),
      },
    };
    // Jobs are only recorded here; the routers' replay runners carry them out.
    const subscriptions = webhook.subscriptions;
    replayJobs = {
      jobs: new ReplayJobStore(platform.db, config.webhook.historyRetentionMs),
      subscriptionExists: async (tenantId, id) => (await subscriptions.get(tenantId, id)) !== undefined,
    };
  }
  const app = await buildGateway({
    logger,
    verifier,
    integrators,
    webhook,
    replayJobs,
    purchase: purchase ? { store: purchase.store, metrics: metrics.purchase } : undefined,
    requestMetrics: metrics.request,
    readiness,
    requestBudget: new RequestBudget(
      config.gateway.requestBudgetMs,
      config.gateway.degradedBudgetMs,
      config.gateway.degradedWindowMs,
    ),
    lookupTimeoutMs: config.gateway.dependencyTimeoutMs,
    // The operator console calls the webhook API; its sign-in goes to the identity provider through the gateway.
    console: apis.webhook
      ? { root: CONSOLE_ROOT, tokenUrl: `${config.auth.url}/oauth/token`, audience: config.auth.audience }
      : undefined,
  });
  // Metrics, and /health and /ready as on the API's port, on a port of their own (METRICS_PORT; 0: not served).
  const probes = new Readiness(readiness.map((check) => check.name));
  for (const check of readiness) {
    probes.set(check.name, async () => ((await check.ready()) ? undefined : 'not ready'));
  }
  const metricsServer = await serveMetrics(metrics.registry, config.gateway.host, config.metricsPort, probes);
  await app.listen({ host: config.gateway.host, port: config.gateway.port });
  logger.info({ baseUrl: config.gateway.baseUrl }, 'gateway listening');
  return async () => {
    await app.close();
    metricsServer?.close();
    await catalogueTail?.stop();
    await purchase?.stop();
    await operational?.stop();
    await publisher?.close();
    verifier.close?.();
  };
}

/** A topic's offsets now, per partition: what a follower starting from the beginning has to read to catch up. */
async function topicOffsets(kafka: Kafka, topic: string): Promise<PartitionOffsets[]> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const offsets = await admin.fetchTopicOffsets(topic);
    return offsets.map(({ partition, low, high }) => ({ partition, start: low, end: high }));
  } finally {
    await admin.disconnect();
  }
}
