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
}
