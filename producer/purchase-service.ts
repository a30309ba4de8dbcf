import { MAY_BE_DUPLICATE_HEADER } from '../core/deliveries/delivery-record.ts';
import { headersOf, inSpan, startSpan, tracing } from '../core/tracing.ts';
import type { EventTypeEntry } from '../core/catalogue.ts';
import type { Config } from '../core/config.ts';
import { Publisher } from '../core/kafka.ts';
import type { Logger } from '../core/log.ts';
import type { PurchaseMetrics } from '../core/metrics.ts';
import type { Platform } from '../core/platform.ts';
import { codecFor } from '../core/registry.ts';
import { topicNames } from '../core/topics.ts';
import { catalogueRecords } from './catalogue-publisher.ts';
import { OutboxRelay } from './outbox-relay.ts';
import { PurchaseStore } from './purchase-store.ts';

/** The purchase service's parts: its store for the routes, and a background relay plus catalogue declaration. */
export async function startPurchaseService(
  config: Config,
  platform: Platform,
  logger: Logger,
  options: { relay: boolean; metrics?: PurchaseMetrics },
) {
  const topics = topicNames(config);
  // With the relay in this process, a committed transition is published at once; the sweep is the safety net.
  let relay: OutboxRelay | undefined;
  const store = new PurchaseStore(platform.db, (row, pointer) =>
    relay ? relay.nudge(row, pointer) : pointer.release(false),
  );
  const publisher = await Publisher.connect(platform.kafka);
  const eventCodec = await codecFor<Record<string, unknown>>(
    platform.registry,
    'integrationEvent',
    topics.purchaseEvents,
  );
  const catalogueCodec = await codecFor<EventTypeEntry>(platform.registry, 'eventType', topics.eventTypes);
  await publisher.publish(await catalogueRecords(topics.eventTypes, (entry) => catalogueCodec.encode(entry)));

  const outboxRelay = new OutboxRelay(
    store,
    async (row, mayBeDuplicate) => {
      // The event's publication, child of the request that made the change (its traceparent kept in the row).
      const span = tracing()
        ? startSpan(`publish ${row.eventType}`, 'producer', row.traceparent ? { traceparent: row.traceparent } : {}, {
            'messaging.system': 'kafka',
            'messaging.destination.name': topics.purchaseEvents,
            'webhook.event_id': row.outboxId,
          })
        : undefined;
      const headers: Record<string, string> = span ? headersOf(span) : {};
      if (mayBeDuplicate) headers[MAY_BE_DUPLICATE_HEADER] = '1';
      await inSpan(span, async () =>
        publisher.publish([
          {
            topic: topics.purchaseEvents,
            key: row.tenantId,
            headers,
            value: await eventCodec.encode({
              eventId: row.outboxId,
              eventType: row.eventType,
              occurredAt: row.occurredAt,
              tenantId: row.tenantId,
              entityId: row.orderId,
              reference: row.reference,
              resourceUrl: `/CorePurchase/REST/PurchaseOrders/${row.orderId}`,
              payload: Buffer.from(row.payload, 'utf8'),
            }),
          },
        ]),
      );
    },
    logger,
    {
      name: 'purchase-outbox',
      intervalMs: 100,
      lookbackMinutes: 24 * 60,
      settleMs: 30_000,
      concurrency: 32,
      peerGraceMs: config.purchase.sweepGraceMs,
      // Listing every pointer is most of the sweep's cost; a row left to its writer for the grace needs no sooner one.
      listEveryMs: config.purchase.sweepGraceMs,
      // What a Kafka outage may pile up in the gateway's memory: 64 orders, about 256 MiB of bodies plus one each.
      window: 64,
      windowBytes: 256 * 1024 * 1024,
      metrics: options.metrics,
    },
  );
  const abort = new AbortController();
  if (options.relay) relay = outboxRelay;
  const running = options.relay ? outboxRelay.run(abort.signal) : Promise.resolve();
  return {
    store,
    stop: async () => {
      abort.abort();
      await running;
      await store.close(); // the HTTP server is closed: the unused references go back to their counters
      await publisher.close();
    },
  };
}
