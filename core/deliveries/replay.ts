// The replay rules (spec "States and transitions", DESIGN §10), shared by POST /Deliveries/{id}/replay and the bulk
// replay jobs: which deliveries may be replayed, how the new series is built, and in which order it is queued.
import { buildEnvelope, envelopeFields } from '../envelope.ts';
import { queuedDelivery, type DeliveryRecord } from './delivery-record.ts';
import type { Delivery, StoredEvent } from './delivery.ts';

/** What deciding a replay reads: the original's event, and whether its subscription still exists. */
export interface ReplaySources {
  getEvent(tenantId: string, eventId: string): Promise<StoredEvent | undefined>;
  subscriptionExists(tenantId: string, subscriptionId: string): Promise<boolean>;
}

/** The event a delivery can be replayed from, or why it cannot be replayed now (a sentence naming the delivery). */
export type Replayable = { event: StoredEvent } | { refused: string };

/**
 * Whether `original` can be replayed: it has ended (acknowledged, abandoned or superseded), its event is still stored
 * (the envelope is rebuilt from it) and its subscription still exists (a disabled one is fine: the dispatcher then
 * abandons the replay as it would any delivery of that subscription).
 */
export async function replayable(original: Delivery, sources: ReplaySources): Promise<Replayable> {
  if (original.status === 'queued' || original.status === 'retrying') {
    return { refused: `delivery ${original.id} is still ${original.status}; replay it once it has ended` };
  }
  const event = await sources.getEvent(original.tenantId, original.eventId);
  if (!event) return { refused: `the event of delivery ${original.id} is past its retention` };
  if (!(await sources.subscriptionExists(original.tenantId, original.subscriptionId))) {
    return { refused: `subscription ${original.subscriptionId} was deleted` };
  }
  return { event };
}

/** The new series of a replay: its id and queue time, and the bulk replay job making it, if any. */
export interface ReplaySeries {
  deliveryId: string;
  queuedAt: number;
  replayJobId?: string;
}

/**
 * The record of a replay: the same event to the same subscription with exactly the envelope bytes and signature first
 * sent, as a new series (its own id, `replayOf` the original, starting at attempt 1).
 */
export function replayRecord(original: Delivery, event: StoredEvent, series: ReplaySeries): DeliveryRecord {
  return {
    deliveryId: series.deliveryId,
    tenantId: original.tenantId,
    subscriptionId: original.subscriptionId,
    eventId: original.eventId,
    eventType: original.eventType,
    entityId: original.entityId,
    occurredAt: original.occurredAt,
    queuedAt: series.queuedAt,
    attempt: 1,
    dueAt: 0,
    envelope: sentEnvelope(event, original.subscriptionId),
    signature: original.signature,
    replayOf: original.id,
    ...(original.test ? { test: true } : {}),
    ...(series.replayJobId === undefined ? {} : { replayJobId: series.replayJobId }),
  };
}

/**
 * The envelope bytes the deliveries of `event` to `subscriptionId` were sent with, whatever the payload limit is now:
 * a payload is kept only when it was embedded (router), so a kept one is embedded again and a missing one omitted
 * again, and the stored signature matches.
 */
export function sentEnvelope(event: StoredEvent, subscriptionId: string): Buffer {
  return buildEnvelope(envelopeFields(event, subscriptionId), event.payload, Number.POSITIVE_INFINITY);
}

/**
 * Queues replays: sent first, stored second, so a failed send leaves no row that nothing will ever send. The
 * dispatcher's writes are stamped after the stored row (write-time.ts) and carry the series' fields, so the order in
 * which the two land does not matter. Answers the history rows written.
 */
export async function queueReplays(
  records: DeliveryRecord[],
  publish: (records: DeliveryRecord[]) => Promise<void>,
  store: (delivery: Delivery) => Promise<void>,
): Promise<Delivery[]> {
  if (records.length === 0) return [];
  await publish(records);
  const rows = records.map((record) => queuedDelivery(record));
  await Promise.all(rows.map((row) => store(row)));
  return rows;
}
