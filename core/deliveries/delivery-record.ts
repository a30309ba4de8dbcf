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
