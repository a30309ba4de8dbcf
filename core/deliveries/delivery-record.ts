import type { Delivery } from './delivery.ts';

/** One pending attempt of a delivery series as it travels on the deliveries topic and the retry tiers. */
export interface DeliveryRecord {
  deliveryId: string;
  tenantId: string;
  subscriptionId: string;
  eventId: string;
  eventType: string;
  entityId: string;
  occurredAt: string;
  /** Epoch ms; the series is abandoned WEBHOOK_DELIVERY_LIFETIME after it. */
  queuedAt: number;
  attempt: number;
  /** Epoch ms before which the attempt must not be made. */
  dueAt: number;
  envelope: Buffer;
  signature: string | null;
  replayOf: string | null;
  /**
   * Transport flags, carried in Kafka headers rather than in the Avro record. `expiryHop`: the record carries no
   * attempt, it only waits in a tier for the series' deadline. `mayBeDuplicate`: the series may have been sent before
   * (its event was routed again), so its stored state is checked before sending.
   */
  expiryHop?: boolean;
  mayBeDuplicate?: boolean;
}

/** Kafka headers of the transport flags of a DeliveryRecord. */
export const EXPIRY_HOP_HEADER = 'expiry-hop';
export const MAY_BE_DUPLICATE_HEADER = 'may-be-duplicate';

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
    abandonReason: null,
    nextRetryAt: null,
    queuedAt: new Date(record.queuedAt),
    occurredAt: record.occurredAt,
    replayOf: record.replayOf,
    signature: record.signature,
  };
}
