export type DeliveryStatus = 'queued' | 'retrying' | 'acknowledged' | 'abandoned' | 'superseded';

/** A delivery series as the history shows it. */
export interface Delivery {
  tenantId: string;
  id: string;
  eventId: string;
  eventType: string;
  subscriptionId: string;
  entityId: string;
  status: DeliveryStatus;
  attemptCount: number;
  lastStatusCode: number | null;
  /** The last attempt's transport error or HTTP status, as the receiver answered. */
  lastErrorMessage: string | null;
  /** Why the series ended without success (lifetime exceeded, subscription disabled…); null otherwise. */
  abandonReason?: string | null;
  nextRetryAt: Date | null;
  queuedAt: Date;
  occurredAt: string;
  replayOf: string | null;
  signature: string | null;
  /** A test delivery (POST /Subscriptions/{id}/test): the catalogue's example payload, sent on request. */
  test?: boolean;
}

/** One attempt of a series; immutable once written. */
export interface Attempt {
  attempt: number;
  at: Date;
  statusCode: number | null;
  errorMessage: string | null;
  durationMs: number;
}

/** The integration event as the router received it; envelopes are rebuilt from it byte for byte. */
export interface StoredEvent {
  tenantId: string;
  eventId: string;
  eventType: string;
  occurredAt: string;
  entityId: string;
  reference: string | null;
  resourceUrl: string;
  /** Null when the payload was over the size limit: envelopes omit it, so it is not kept. */
  payload: Buffer | null;
  /** Set on a test event: it is routed to this subscription only, whatever its event types, as a test delivery. */
  testSubscriptionId?: string | null;
}

/** An event's StoredEvent with `payload`, every field named (why: delivery-record.ts, fromDeliveryMessage). */
export function storedEvent(event: Omit<StoredEvent, 'payload'>, payload: Buffer | null): StoredEvent {
  return {
    tenantId: event.tenantId,
    eventId: event.eventId,
    eventType: event.eventType,
    occurredAt: event.occurredAt,
    entityId: event.entityId,
    reference: event.reference ?? null,
    resourceUrl: event.resourceUrl,
    payload,
    testSubscriptionId: event.testSubscriptionId,
  };
}
