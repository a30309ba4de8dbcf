// Publishes integration events straight onto a producer topic, as any producing API would.
import { randomUUID } from 'node:crypto';
import { loadConfig } from '../../core/config.ts';
import { createKafka, Publisher } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { codecFor, createRegistry } from '../../core/registry.ts';
import { topicNames } from '../../core/topics.ts';

export interface TestEvent {
  tenantId: string;
  eventType: string;
  entityId?: string;
  payload?: string;
  eventId?: string;
  /** Kafka headers of the record (e.g. the producer's may-be-duplicate mark). */
  headers?: Record<string, string>;
}

export async function eventPublisher(env: Record<string, string>) {
  const config = loadConfig(env);
  const topic = topicNames(config).purchaseEvents;
  const kafka = createKafka(config.kafka.brokers, 'test-events', createLogger('test-events', 'warn'));
  const publisher = await Publisher.connect(kafka);
  const codec = await codecFor<Record<string, unknown>>(
    createRegistry(config.schemaRegistryUrl),
    'integrationEvent',
    topic,
  );
  return {
    /** Publishes events and returns their ids once Kafka acknowledged them. */
    async publish(events: TestEvent[]): Promise<string[]> {
      const ids = events.map((event) => event.eventId ?? randomUUID());
      const records = await Promise.all(
        events.map(async (event, index) => {
          const entityId = event.entityId ?? randomUUID();
          return {
            topic,
            key: event.tenantId,
            headers: event.headers,
            value: await codec.encode({
              eventId: ids[index],
              eventType: event.eventType,
              occurredAt: new Date().toISOString(),
              tenantId: event.tenantId,
              entityId,
              reference: null,
              resourceUrl: `/CorePurchase/REST/PurchaseOrders/${entityId}`,
              payload: Buffer.from(event.payload ?? JSON.stringify({ id: entityId, note: 'test' }), 'utf8'),
            }),
          };
        }),
      );
      await publisher.publish(records);
      return ids;
    },
    close: () => publisher.close(),
  };
}
