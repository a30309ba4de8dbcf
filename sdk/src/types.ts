// The body and headers of a Core Webhooks delivery, as the service sends them. Written from the service's own code
// (core/envelope.ts buildEnvelope, producer/purchase-order.ts, producer/purchase-routes.ts), copied here so this kit
// needs nothing outside sdk/.

/** States of a purchase order; the spelling is the purchase API's. */
export type PurchaseOrderStatus = 'Draft' | 'Validated' | 'Cancelled';

/** One row of a purchase order. Quantities and money are decimal strings ("0.125"), never JSON numbers. */
export interface PurchaseOrderRow {
  /** 1, 2, 3 … in the order the rows were given. */
  lineNumber: number;
  itemId: string;
  itemCode: string;
  itemName: string;
  description: string | null;
  /** Decimal string, e.g. "100" or "2.5". */
  quantity: string;
  /** Decimal string: the item's unit price when the row was priced. */
  unitPrice: string;
  /** Decimal string: quantity × unitPrice, exact. */
  amount: string;
}

/**
 * PurchaseOrderDTO: the body of GET /CorePurchase/REST/PurchaseOrders/{id} and the payload of every purchaseOrder.*
 * event, byte for byte (same serializer, property order and casing).
 */
export interface PurchaseOrderDTO {
  id: string;
  /** Business reference such as "PO-000042"; null while the order is a draft. */
  reference: string | null;
  status: PurchaseOrderStatus;
  supplierName: string;
  /** ISO 4217 code, e.g. "EUR". */
  currency: string;
  rows: PurchaseOrderRow[];
  /** Decimal string: the sum of the rows' amounts, exact. */
  totalAmount: string;
  /** Id of the validated order this one amends, or null. */
  amends: string | null;
  /** ISO-8601 UTC with milliseconds, like every instant below. */
  createdAt: string;
  validatedAt: string | null;
  cancelledAt: string | null;
}

/** The payload of purchaseOrder.validated: the order just validated, so it has its reference. */
export type ValidatedPurchaseOrder = PurchaseOrderDTO & {
  status: 'Validated';
  reference: string;
  validatedAt: string;
  cancelledAt: null;
};

/** The payload of purchaseOrder.cancelled: a draft (no reference) or a validated order, now cancelled. */
export type CancelledPurchaseOrder = PurchaseOrderDTO & { status: 'Cancelled'; cancelledAt: string };

/** The event types the purchase service declares (purchaseOrder.sent is declared but nothing raises it yet). */
export const PURCHASE_EVENT_TYPES = [
  'purchaseOrder.validated',
  'purchaseOrder.cancelled',
  'purchaseOrder.sent',
] as const;

export type PurchaseEventType = (typeof PURCHASE_EVENT_TYPES)[number];

/** The envelope fields other than the payload, in the order the service writes them. */
export interface EnvelopeFields<T extends string = string> {
  /** Identity of the event: stable across retries and replays; the key to deduplicate on. */
  eventId: string;
  eventType: T;
  /** When the event occurred (ISO-8601 UTC with milliseconds); order on this, not on arrival. */
  occurredAt: string;
  entityId: string;
  /** Business reference of the entity, when it has one. */
  reference: string | null;
  /**
   * A path (not an absolute URL) resolved against the gateway base address, to fetch the entity's current state:
   * /CorePurchase/REST/PurchaseOrders/{id} for purchase orders (a test event's names no real resource).
   */
  resourceUrl: string;
  subscriptionId: string;
}

/**
 * A delivery body: the fields, then the producer's payload, or null with payloadOmitted true when the payload was
 * over the size limit (204,800 bytes of UTF-8 by default); fetch `resourceUrl` then.
 */
export type Envelope<T extends string, P> = EnvelopeFields<T> &
  ({ payload: P; payloadOmitted: false } | { payload: null; payloadOmitted: true });

/** purchaseOrder.validated: a purchase order (or an amendment, under its own id) was validated. */
export type PurchaseOrderValidatedEnvelope = Envelope<'purchaseOrder.validated', ValidatedPurchaseOrder> & {
  reference: string;
};

/** purchaseOrder.cancelled: a purchase order was cancelled and will not be executed. */
export type PurchaseOrderCancelledEnvelope = Envelope<'purchaseOrder.cancelled', CancelledPurchaseOrder>;

/** purchaseOrder.sent: declared and subscribable; no delivery arrives until the supplier-sending flow exists. */
export type PurchaseOrderSentEnvelope = Envelope<'purchaseOrder.sent', PurchaseOrderDTO>;

/** Every envelope of the purchase service's events: switch on `eventType`, then on `payloadOmitted`. */
export type PurchaseOrderEnvelope =
  PurchaseOrderValidatedEnvelope | PurchaseOrderCancelledEnvelope | PurchaseOrderSentEnvelope;

/** The header names of a delivery, lower-cased as Node presents them. */
export const DELIVERY_HEADERS = {
  eventId: 'x-webhook-event-id',
  deliveryId: 'x-webhook-delivery-id',
  eventType: 'x-webhook-event-type',
  subscriptionId: 'x-webhook-subscription-id',
  attempt: 'x-webhook-attempt',
  /** The default; a subscription may choose another name for its signature header. */
  signature: 'x-webhook-signature',
  /** "true" on a test delivery (POST /Subscriptions/{id}/test), absent otherwise. */
  test: 'x-webhook-test',
} as const;

/** The headers of a delivery as sent (none of them is signed: only the body is). */
export interface WebhookDeliveryHeaders {
  'content-type': 'application/json';
  /** Same value as the body's eventId; stable across every retry and replay. */
  'x-webhook-event-id': string;
  /** One attempt series; a replay gets a new one. */
  'x-webhook-delivery-id': string;
  'x-webhook-event-type': string;
  'x-webhook-subscription-id': string;
  /** "1" on the first attempt, incremented on every retry; a replay starts again at "1". */
  'x-webhook-attempt': `${number}`;
  /** base64(HMAC-SHA256(secret, raw body)) when the subscription uses Hmac (under its chosen name, if any). */
  'x-webhook-signature'?: string;
  /** Only on a test delivery: the catalogue's example payload, sent on request, under a new eventId. */
  'x-webhook-test'?: 'true';
}

/** The delivery headers read into values; null for a header that is absent. */
export interface DeliveryInfo {
  eventId: string | null;
  deliveryId: string | null;
  eventType: string | null;
  subscriptionId: string | null;
  attempt: number | null;
  /** True for a test delivery (X-Webhook-Test: true). */
  test: boolean;
}
