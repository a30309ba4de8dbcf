import type { ConsumedRecord, OutgoingRecord } from '../kafka.ts';
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
  /** A test delivery: sent with X-Webhook-Test: true, and left out of the subscription's failure days. */
  test?: boolean;
  /** The bulk replay job that queued this replay: the dispatcher counts the series' end toward the job's progress. */
  replayJobId?: string | null;
  /**
   * A delivery of a subscription with ordering 'entity': its event's place in its source topic partition (the offset),
   * which orders it among the entity's pending deliveries (entity-order.ts). Null or absent: no order.
   */
  orderSeq?: number | null;
  /**
   * The place of the entity's previous event in the same source partition, when the router routed that one too (null
   * or absent: unknown). A dispatcher that has itself seen the delivery at that place end needs no look at the rows.
   */
  orderPrev?: number | null;
  /**
   * Transport flags, carried in Kafka headers rather than in the Avro record. `expiryHop`: the record carries no
   * attempt, it only waits in a tier for the series' deadline. `mayBeDuplicate`: the series may have been sent before
   * (its event was routed again), so its stored state is checked before sending. `holdUntil` (epoch ms): a Retry-After
   * asked for more than the longest tier's delay; the record hops through tiers without an attempt until then.
   */
  expiryHop?: boolean;
  mayBeDuplicate?: boolean;
  holdUntil?: number;
  /**
   * A transport flag too: the record is a retry scheduled again by a possible duplicate of the attempt before it (the
   * first retry may have been lost in a crash: delivery-handler.ts, retryAgain). It schedules no copy of its own when it
   * finds its attempt made, unless Kafka hands it again after a rebalance (then it may be the one that made it).
   */
  rescheduled?: boolean;
  /**
   * Set by the router, in headers too: when it queued the series (epoch ms, its clock, after it read the
   * subscription) and the subscription's `updatedAt` it routed with (epoch ms). A dispatcher whose cached subscription
   * is older reads it again, as of after `routedAt`, before it decides (a change made through the API is followed).
   */
  routedAt?: number;
  subscriptionVersion?: number;
  /**
   * In a header too, while tracing is on: the W3C traceparent of the routing span (core/tracing.ts), the parent of
   * each attempt's span. Kept for the whole series, retries included.
   */
  traceparent?: string;
}

/**
 * A record's series fields without its transport flags: what a record published for the series' next step starts
 * from (its own flags are decided afresh). `routedAt` and `subscriptionVersion` stay: they hold for the whole series.
 */
export function withoutTransportFlags(record: DeliveryRecord): DeliveryRecord {
  const { expiryHop: _hop, mayBeDuplicate: _duplicate, holdUntil: _hold, rescheduled: _again, ...series } = record;
  return series;
}

/** Kafka headers of the transport flags of a DeliveryRecord, and of its due time. */
export const EXPIRY_HOP_HEADER = 'expiry-hop';
export const MAY_BE_DUPLICATE_HEADER = 'may-be-duplicate';
const HOLD_UNTIL_HEADER = 'hold-until';
const ROUTED_AT_HEADER = 'routed-at';
const SUBSCRIPTION_VERSION_HEADER = 'subscription-version';
const DUE_AT_HEADER = 'due-at';
const RESCHEDULED_HEADER = 'rescheduled';
/** W3C trace context (core/tracing.ts). */
const TRACEPARENT_HEADER = 'traceparent';

/**
 * The Kafka message of a delivery record on `topic` (key: subscription id): the Avro value without the transport
 * flags, which ride in headers with the due time (so a retry tier can pause without decoding the record).
 * `routing` names the span the record's attempts belong under (else the record's own traceparent): given apart so that
 * the router need not spread it into each record, which gives every record a hidden class of its own
 * (core/hidden-classes.test.ts).
 */
export async function deliveryMessage(
  topic: string,
  record: DeliveryRecord,
  encode: (record: DeliveryRecord) => Promise<Buffer>,
  routing?: string,
): Promise<OutgoingRecord> {
  const { expiryHop, mayBeDuplicate, holdUntil, routedAt, subscriptionVersion, rescheduled, traceparent, ...series } =
    record;
  const headers: Record<string, string> = {};
  if (series.dueAt > 0) headers[DUE_AT_HEADER] = String(series.dueAt);
  if (expiryHop) headers[EXPIRY_HOP_HEADER] = '1';
  if (mayBeDuplicate) headers[MAY_BE_DUPLICATE_HEADER] = '1';
  if (holdUntil !== undefined) headers[HOLD_UNTIL_HEADER] = String(holdUntil);
  if (routedAt !== undefined) headers[ROUTED_AT_HEADER] = String(routedAt);
  if (subscriptionVersion !== undefined) headers[SUBSCRIPTION_VERSION_HEADER] = String(subscriptionVersion);
  if (rescheduled) headers[RESCHEDULED_HEADER] = '1';
  const parent = routing ?? traceparent;
  if (parent !== undefined) headers[TRACEPARENT_HEADER] = parent;
  return { topic, key: series.subscriptionId, value: await encode(series), headers };
}

/**
 * A consumed delivery message moved aside to `topic` (a full lane's overflow): the same key, value and headers, due
 * `delayMs` from now; one that may have been handled already (redelivered) says so.
 */
export function parkedMessage(topic: string, message: ConsumedRecord, delayMs: number): OutgoingRecord {
  const headers: Record<string, string> = { ...message.headers, [DUE_AT_HEADER]: String(Date.now() + delayMs) };
  if (message.redelivered) {
    headers[MAY_BE_DUPLICATE_HEADER] = '1';
    delete headers[RESCHEDULED_HEADER]; // handed again: its attempt may be this record's own
  }
  return { topic, key: message.key?.toString('utf8') ?? '', value: message.value, headers };
}

/** The due time a consumed delivery message carries, if any (read without decoding the value). */
export function dueAtOf(message: ConsumedRecord): number | undefined {
  const due = message.headers[DUE_AT_HEADER];
  return due === undefined ? undefined : Number(due);
}

/**
 * A consumed delivery message as a record: the decoded value with its transport flags; a message found in a
 * partition this consumer was just given may be a duplicate as well.
 *
 * Every field is named, in one order, rather than spread from the decoded value: in Node 20's V8, an object spread
 * from another and given a property the other lacks (`{ ...decoded, expiryHop }`) gets a hidden class of its own each
 * time. Every property read of it then misses V8's inline caches, and each leaves a map in the old space
 * (core/hidden-classes.test.ts counts them).
 */
export function fromDeliveryMessage(message: ConsumedRecord, decoded: DeliveryRecord): DeliveryRecord {
  const holdUntil = message.headers[HOLD_UNTIL_HEADER];
  const routedAt = message.headers[ROUTED_AT_HEADER];
  const subscriptionVersion = message.headers[SUBSCRIPTION_VERSION_HEADER];
  return {
    deliveryId: decoded.deliveryId,
    tenantId: decoded.tenantId,
    subscriptionId: decoded.subscriptionId,
    eventId: decoded.eventId,
    eventType: decoded.eventType,
    entityId: decoded.entityId,
    occurredAt: decoded.occurredAt,
    queuedAt: decoded.queuedAt,
    attempt: decoded.attempt,
    dueAt: decoded.dueAt,
    envelope: decoded.envelope,
    signature: decoded.signature,
    replayOf: decoded.replayOf,
    test: decoded.test,
    replayJobId: decoded.replayJobId,
    orderSeq: decoded.orderSeq,
    orderPrev: decoded.orderPrev,
    expiryHop: message.headers[EXPIRY_HOP_HEADER] === '1',
    mayBeDuplicate: message.redelivered === true || message.headers[MAY_BE_DUPLICATE_HEADER] === '1',
    holdUntil: holdUntil === undefined ? undefined : Number(holdUntil),
    routedAt: routedAt === undefined ? undefined : Number(routedAt),
    subscriptionVersion: subscriptionVersion === undefined ? undefined : Number(subscriptionVersion),
    rescheduled: message.headers[RESCHEDULED_HEADER] === '1' && message.redelivered !== true,
    traceparent: message.headers[TRACEPARENT_HEADER],
  };
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
    abandonReason: null,
    nextRetryAt: null,
    queuedAt: new Date(record.queuedAt),
    occurredAt: record.occurredAt,
    replayOf: record.replayOf,
    signature: record.signature,
    ...(record.test ? { test: true } : {}),
  };
}
