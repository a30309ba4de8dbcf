import { buildEnvelope, signBody } from '../core/envelope.ts';
import { matchesAny } from '../core/event-types.ts';
import { deliveryIdFor } from '../core/ids.ts';
import type { Delivery, StoredEvent } from '../core/deliveries/delivery.ts';
import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import type { Subscription } from '../core/subscriptions/subscription.ts';

/** What the router needs to store deliveries. */
export interface RoutingStore {
  createDeliveries(event: StoredEvent, deliveries: Delivery[], writeTime: number): Promise<void>;
  markLatestForEntity(delivery: Delivery, writeTime: number): Promise<void>;
}

export interface RouterDeps {
  subscriptionsOf(tenantId: string): Promise<Subscription[]>;
  store: RoutingStore;
  /** Resolves once Kafka acknowledged every record. */
  publish(records: DeliveryRecord[]): Promise<void>;
  payloadLimitBytes: number;
}

/**
 * Expands one integration event into a delivery per matching enabled subscription of the event's tenant. The delivery
 * id is derived from (event, subscription), so routing the same event again after a crash repeats the same series.
 * `receivedAt` is the source record's timestamp: the queue time, stable across reprocessing.
 */
export async function routeEvent(event: StoredEvent, receivedAt: number, deps: RouterDeps): Promise<DeliveryRecord[]> {
  const subscriptions = (await deps.subscriptionsOf(event.tenantId)).filter(
    (subscription) =>
      subscription.tenantId === event.tenantId &&
      subscription.status === 'enabled' &&
      matchesAny(subscription.eventTypes, event.eventType),
  );
  if (subscriptions.length === 0) return [];
  const records = subscriptions.map((subscription) => {
    const envelope = buildEnvelope(
      { ...event, subscriptionId: subscription.id },
      event.payload,
      deps.payloadLimitBytes,
    );
    const signature =
      subscription.authenticationMode === 'Hmac' && subscription.secrets.hmacSecret
        ? signBody(subscription.secrets.hmacSecret, envelope)
        : null;
    return {
      subscription,
      record: {
        deliveryId: deliveryIdFor(event.eventId, subscription.id),
        tenantId: event.tenantId,
        subscriptionId: subscription.id,
        eventId: event.eventId,
        eventType: event.eventType,
        entityId: event.entityId,
        occurredAt: event.occurredAt,
        queuedAt: receivedAt,
        attempt: 1,
        dueAt: 0,
        envelope,
        signature,
        replayOf: null,
      } satisfies DeliveryRecord,
    };
  });
  const deliveries = records.map(({ record }) => queuedDelivery(record));
  // A payload over the limit is never embedded, so it is not kept either (it can be tens of megabytes).
  const kept = event.payload !== null && event.payload.length <= deps.payloadLimitBytes ? event.payload : null;
  await deps.store.createDeliveries({ ...event, payload: kept }, deliveries, receivedAt);
  await Promise.all(
    records.map(({ subscription }, index) =>
      subscription.supersedePendingDeliveries ? deps.store.markLatestForEntity(deliveries[index]!, receivedAt) : null,
    ),
  );
  await deps.publish(records.map(({ record }) => record));
  return records.map(({ record }) => record);
}

/** The history row of a series that has just been queued. */
export function queuedDelivery(record: DeliveryRecord): Delivery {
  return {
    tenantId: record.tenantId,
    id: record.deliveryId,
    eventId: record.eventId,
    eventType: record.eventType,
    subscriptionId: record.subscriptionId,
    entityId: record.entityId,
    status: 'queued',
    attemptCount: 0,
    lastStatusCode: null,
    lastErrorMessage: null,
    nextRetryAt: null,
    queuedAt: new Date(record.queuedAt),
    occurredAt: record.occurredAt,
    replayOf: record.replayOf,
    signature: record.signature,
  };
}
