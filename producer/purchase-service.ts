import type { FastifyInstance } from 'fastify';
import type { EventTypeEntry } from '../core/catalogue.ts';
import type { Config } from '../core/config.ts';
import { Publisher } from '../core/kafka.ts';
import type { Logger } from '../core/log.ts';
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
  options: { relay: boolean },
) {
  const topics = topicNames(config);
  const store = new PurchaseStore(platform.db);
  const publisher = await Publisher.connect(platform.kafka);
  const eventCodec = await codecFor<Record<string, unknown>>(
    platform.registry,
    'integrationEvent',
    topics.purchaseEvents,
  );
  const catalogueCodec = await codecFor<EventTypeEntry>(platform.registry, 'eventType', topics.eventTypes);
  await publisher.publish(await catalogueRecords(topics.eventTypes, (entry) => catalogueCodec.encode(entry)));

  const relay = new OutboxRelay(
    store,
    async (row) =>
      publisher.publish([
        {
          topic: topics.purchaseEvents,
          key: row.tenantId,
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
    logger,
    { name: 'purchase-outbox', intervalMs: 100, lookbackMinutes: 24 * 60 },
  );
  const abort = new AbortController();
  const running = options.relay ? relay.run(abort.signal) : Promise.resolve();
  return {
    store,
    stop: async () => {
      abort.abort();
      await running;
      await publisher.close();
    },
  };
}

export type { FastifyInstance };
