import { headersOf, inSpan, startSpan, tracing } from '../core/tracing.ts';
import type { Config } from '../core/config.ts';
import { DeliveryStore } from '../core/deliveries/delivery-store.ts';
import { deliveryMessage, MAY_BE_DUPLICATE_HEADER, type DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import { ConsumerRunner, Publisher, type ConsumedRecord } from '../core/kafka.ts';
import { consumerJoined, createMetrics, Readiness, serveMetrics } from '../core/metrics.ts';
import type { Logger } from '../core/log.ts';
import type { Platform } from '../core/platform.ts';
import { codecFor } from '../core/registry.ts';
import { SubscriptionCache } from '../core/subscriptions/subscription-cache.ts';
import { changedTenant } from '../core/subscriptions/subscription-changes.ts';
import { SubscriptionStore } from '../core/subscriptions/subscription-store.ts';
import { topicNames } from '../core/topics.ts';
import { requireSecrets } from '../core/config.ts';
import { routeEvent, routingTurns, UnwrittenRoutingError } from './event-router.ts';
import { storedEvent, type StoredEvent } from '../core/deliveries/delivery.ts';
import { newId } from '../core/ids.ts';
import { ReplayJobStore } from '../core/replay-jobs/replay-job-store.ts';
import { ReplayRunner } from './replay-runner.ts';
import { SourceOrder } from './source-order.ts';

interface IntegrationEvent extends Omit<StoredEvent, 'payload'> {
  payload: Buffer;
}

/** Starts a router: consumes the producers' event topics and writes deliveries. Returns its stop function. */
export async function startRouter(config: Config, platform: Platform, logger: Logger): Promise<() => Promise<void>> {
  const topics = topicNames(config);
  const metrics = createMetrics('router');
  const readiness = new Readiness(['cassandra', 'schema registry', 'consumer group']);
  const metricsServer = await serveMetrics(metrics.registry, config.gateway.host, config.metricsPort, readiness);
  readiness.set('cassandra', async () =>
    (await platform.db.execute('SELECT release_version FROM system.local')).rowLength === 1 ? undefined : 'no answer',
  );
  const subscriptions = new SubscriptionStore(platform.db, requireSecrets(config));
  const cache = new SubscriptionCache(
    (tenantId) => subscriptions.listByTenant(tenantId),
    config.webhook.subscriptionCacheTtlMs,
  );
  const store = new DeliveryStore(platform.db, config.webhook.historyRetentionMs, config.cassandra.writeBatch);
  const deliveryCodec = await codecFor<DeliveryRecord>(platform.registry, 'delivery', topics.deliveries);
  const eventCodec = await codecFor<IntegrationEvent>(platform.registry, 'integrationEvent', topics.purchaseEvents);
  readiness.set('schema registry', () => undefined); // it answered: the codecs above were fetched
  const publisher = await Publisher.connect(platform.kafka);
  const sourceOrder = new SourceOrder();
  const turns = routingTurns();
  // Records whose deliveries went out and whose rows did not get written: their next try only writes (event-router.ts).
  const unwritten = new WeakMap<ConsumedRecord, UnwrittenRoutingError>();
  const consumer = new ConsumerRunner(platform.kafka, {
    groupId: `${config.kafka.topicPrefix}webhook-router`,
    topics: config.kafka.sourceTopics,
    maxInFlight: config.router.maxInFlight,
    fromBeginning: true,
    logger,
    metrics: metrics.consumer,
    // Stateless: exiting hands the partitions to the other members and lets the supervisor start a fresh process.
    onFatal: (error) => {
      logger.fatal({ err: error }, 'consumer stopped for good; exiting');
      process.exit(1);
    },
    // Partitions that changed hands may carry change markers their previous owner handled: read every tenant afresh.
    onJoin: () => {
      cache.clear();
      sourceOrder.clear();
    },
    handle: async (record) => {
      // Entered before any wait, so in the partition's order; written once this event's rows are (or, at the latest,
      // once it is routed). A failed try stays entered: it is tried again, and the events after it keep waiting.
      const partition = `${record.topic}/${record.partition}`;
      const offset = Number(record.offset);
      sourceOrder.enter(partition, offset);
      const changed = changedTenant(record);
      if (changed !== undefined) {
        // Dropped at once, before any later record of the partition is handled (they start after this one does).
        cache.forget(changed);
        sourceOrder.written(partition, offset);
        return;
      }
      if (!record.value) {
        sourceOrder.written(partition, offset);
        return;
      }
      const started = Date.now();
      const unfinished = unwritten.get(record);
      if (unfinished) {
        const routed = await unfinished.finish();
        unwritten.delete(record);
        metrics.routed(routed.length);
        logger.info({ offset, deliveries: routed.length }, 'event routed: history written after its publication');
        return;
      }
      metrics.stage('event_to_routed', started - record.timestamp);
      const decoded = await eventCodec.decode(record.value);
      const event = storedEvent(decoded, decoded.payload);
      const entity = `${event.tenantId}\u0000${event.entityId}`;
      const marked = record.redelivered === true || record.headers[MAY_BE_DUPLICATE_HEADER] === '1';
      // The routing span, child of the event's publication; each delivery's attempts are its children.
      const span = tracing()
        ? startSpan(`route ${event.eventType}`, 'consumer', record.headers, {
            'messaging.system': 'kafka',
            'messaging.destination.name': record.topic,
            'webhook.event_id': event.eventId,
            'webhook.tenant_id': event.tenantId,
          })
        : undefined;
      const traceparent = span ? headersOf(span).traceparent : undefined;
      const routing = turns.run(`${event.tenantId}\u0000${event.eventId}`, (afterAnother) =>
        routeEvent(
          event,
          record.timestamp,
          {
            subscriptionsOf: (tenantId) => cache.forTenant(tenantId),
            store,
            payloadLimitBytes: config.webhook.payloadLimitBytes,
            observe: (part, ms) => metrics.stage(part, ms),
            source: {
              offset,
              redelivered: record.redelivered === true,
              written: () => sourceOrder.written(partition, offset),
              earlier: () => sourceOrder.earlier(partition, offset),
              seen: () => sourceOrder.seen(partition, offset, entity),
              previous: () => sourceOrder.previous(partition, offset, entity),
            },
            filtered: (subscription) => metrics.filtered(subscription.tenantId, subscription.id),
            publish: async (records) =>
              publisher.publish(
                await Promise.all(
                  records.map((delivery) =>
                    deliveryMessage(topics.deliveries, delivery, (value) => deliveryCodec.encode(value), traceparent),
                  ),
                ),
              ),
          },
          marked || afterAnother,
        ),
      );
      const routed = await inSpan(span, async () => {
        const deliveries = await routing.catch((error: unknown) => {
          if (error instanceof UnwrittenRoutingError) unwritten.set(record, error);
          throw error;
        });
        span?.setAttribute('webhook.deliveries', deliveries.length);
        return deliveries;
      });
      sourceOrder.written(partition, offset);
      metrics.stage('routing', Date.now() - started);
      metrics.routed(routed.length);
      logger.info({ eventId: event.eventId, eventType: event.eventType, deliveries: routed.length }, 'event routed');
    },
  });
  readiness.set(
    'consumer group',
    consumerJoined(() => consumer.assignedPartitions),
  );
  await consumer.start();
  logger.info({ topics: config.kafka.sourceTopics }, 'router started');
  // Bulk replay jobs run beside the routing, on the same store and publisher (router/replay-runner.ts).
  const replays = new ReplayRunner({
    jobs: new ReplayJobStore(platform.db, config.webhook.historyRetentionMs),
    history: store,
    sources: {
      getEvent: (tenantId, eventId) => store.getEvent(tenantId, eventId),
      subscriptionExists: async (tenantId, id) => (await subscriptions.get(tenantId, id)) !== undefined,
    },
    publish: async (records) =>
      publisher.publish(
        await Promise.all(
          records.map((record) => deliveryMessage(topics.deliveries, record, (value) => deliveryCodec.encode(value))),
        ),
      ),
    store: (delivery) => store.insertDelivery(delivery),
    owner: `router-${newId()}`,
    settings: { ...config.replay, historyRetentionMs: config.webhook.historyRetentionMs },
    logger,
    metrics: metrics.replay,
  });
  const stopReplays = new AbortController();
  const replaying = replays.run(stopReplays.signal);
  return async () => {
    stopReplays.abort();
    await replaying;
    await consumer.stop();
    await publisher.close();
    metricsServer?.close();
  };
}
