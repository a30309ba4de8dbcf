import { buildEnvelope, envelopeFields, signBody } from '../core/envelope.ts';
import { matchesAny } from '../core/event-types.ts';
import { deliveryIdFor } from '../core/ids.ts';
import { storedEvent, type Delivery, type DeliveryStatus, type StoredEvent } from '../core/deliveries/delivery.ts';
import { queuedDelivery, type DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import type { Subscription } from '../core/subscriptions/subscription.ts';
import { compileFilter, type CompiledFilter, type FilterSubject } from '../core/subscriptions/filter.ts';
import { Turns } from '../core/turns.ts';

/** What the router needs to store deliveries. */
/**
 * The router's turns, keyed by tenant and event id: copies of one event are routed one after another, and every copy
 * after the first, at once or within ten minutes, as a possible repeat (a copy whose gateway published it after a
 * peer's sweep did, Kafka being slow, comes after the first copy was routed). The last 50,000 events routed here are
 * remembered, a few megabytes; an older copy, or one reaching another router, is still delivered at least once.
 */
export function routingTurns(): Turns {
  return new Turns({ entries: 50_000, ms: 10 * 60_000 });
}

export interface RoutingStore {
  createDeliveries(event: StoredEvent, deliveries: Delivery[], writeTime: number): Promise<void>;
  /** The status of each of the event's deliveries already stored, if the event was routed before (else empty). */
  routedBefore(tenantId: string, eventId: string, deliveryIds: string[]): Promise<Map<string, DeliveryStatus>>;
  markLatestForEntity(delivery: Delivery, writeTime: number): Promise<void>;
  /** Writes the entity-order rows of ordered deliveries (core/deliveries/entity-order.ts) before they are published. */
  enqueueOrdered(records: (DeliveryRecord & { orderSeq: number })[], writeTime: number): Promise<void>;
}

export interface RouterDeps {
  subscriptionsOf(tenantId: string): Promise<Subscription[]>;
  store: RoutingStore;
  /** Resolves once Kafka acknowledged every record. */
  publish(records: DeliveryRecord[]): Promise<void>;
  payloadLimitBytes: number;
  /** Told of each subscription whose filter refused the event (it gets no delivery). */
  filtered?: (subscription: Subscription) => void;
  /**
   * The event's place in its source partition (ordering 'entity' orders deliveries by it), and the router's source
   * order (router/source-order.ts): `written` once this event's rows are stored, `earlier` resolving once every earlier
   * event of its partition has stored its own; `seen`, said of an event with ordered deliveries before its rows are
   * written, and `previous`, once the earlier events are written, the offset of the entity's event before this one
   * that had ordered deliveries (undefined when unknown: source-order.ts). Without them, no delivery is ordered.
   */
  source?: {
    offset: number;
    redelivered: boolean;
    written(): void;
    earlier(): Promise<void>;
    seen(): void;
    previous(): number | undefined;
  };
  /** Told how long the two waits of routing took (ms): the history write, and the publication. */
  observe?: (part: 'routing_write' | 'routing_publish', ms: number) => void;
}

/**
 * Expands one integration event into a delivery per matching enabled subscription of the event's tenant. The delivery
 * id is derived from (event, subscription), so routing the same event again (after a crash, or a producer publishing
 * it twice) names the same series. For an event that may be such a repeat, a series a dispatcher has already taken up
 * is left alone, and one still queued is published again marked as a possible duplicate (its first record may never
 * have been sent), for the dispatcher to check.
 * `receivedAt` is the source record's timestamp: the queue time, stable across reprocessing.
 */
export async function routeEvent(
  event: StoredEvent,
  receivedAt: number,
  deps: RouterDeps,
  /** The event may have been routed before (redelivered after a rebalance, or a producer's marked re-publication). */
  mayBeRepeat = false,
): Promise<DeliveryRecord[]> {
  // A test event goes to the one subscription it was raised for, whatever event types that one subscribes to.
  const test = event.testSubscriptionId ?? null;
  // Built only once a subscription with a filter is met: most events' routing allocates nothing for filters.
  let subject: ((withPayload: boolean) => FilterSubject) | undefined;
  const subscriptions = (await deps.subscriptionsOf(event.tenantId)).filter(
    (subscription) =>
      subscription.tenantId === event.tenantId &&
      subscription.status === 'enabled' &&
      (test === null
        ? matchesAny(subscription.eventTypes, event.eventType) &&
          (subscription.filter === null || passesFilter(subscription, (subject ??= subjectOf(event)), deps))
        : subscription.id === test),
  );
  if (subscriptions.length === 0) {
    deps.source?.written();
    return [];
  }
  // Only an event that may be a repeat costs a read: the first routing of an event, the hot path, reads nothing.
  const routed = mayBeRepeat
    ? await deps.store.routedBefore(
        event.tenantId,
        event.eventId,
        subscriptions.map((subscription) => deliveryIdFor(event.eventId, subscription.id)),
      )
    : new Map<string, DeliveryStatus>();
  // After the subscriptions were read: a dispatcher reading them as of this time sees at least what was routed with.
  const routedAt = Date.now();
  const source = deps.source;
  const all = subscriptions.map((subscription) => {
    const envelope = buildEnvelope(envelopeFields(event, subscription.id), event.payload, deps.payloadLimitBytes);
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
        ...(test === null ? {} : { test: true }),
        routedAt,
        subscriptionVersion: subscription.updatedAt.getTime(),
        ...(subscription.ordering === 'entity' && test === null && source ? { orderSeq: source.offset } : {}),
      } satisfies DeliveryRecord,
    };
  });
  // An event of the entity with ordered deliveries, for the events after it (an entity of a tenant without ordered
  // subscriptions costs the router no memory).
  if (source && all.some(({ record }) => record.orderSeq !== undefined)) source.seen();
  // Series a dispatcher has taken up (or finished) are not sent again; stored queued ones are, as possible duplicates.
  // So is every series of a record routed again (a crash, a failed try): its first routing may have published it
  // before its row was written (below), and the dispatcher looks at the history before it sends.
  const again = source?.redelivered === true;
  const records = all
    .filter(({ record }) => (routed.get(record.deliveryId) ?? 'queued') === 'queued')
    .map(({ subscription, record }) =>
      routed.has(record.deliveryId) || again
        ? { subscription, record: { ...record, mayBeDuplicate: true } }
        : { subscription, record },
    );
  if (records.length === 0) {
    source?.written();
    return [];
  }
  const fresh = records.filter(({ record }) => !routed.has(record.deliveryId));
  const deliveries = fresh.map(({ record }) => queuedDelivery(record));
  // Every new ordered delivery gets its row before it is published, and so does a queued one published again from the
  // same source record (its first routing may have stopped before writing it): the same cells. One published again
  // from another record (the producer's repeat, at another offset) is not given a second place.
  const ordered = records
    .filter(({ record }) => !routed.has(record.deliveryId) || source?.redelivered === true)
    .map(({ record }): DeliveryRecord => record)
    .filter((record): record is DeliveryRecord & { orderSeq: number } => typeof record.orderSeq === 'number');
  // A payload over the limit is never embedded, so it is not kept either (it can be tens of megabytes).
  const kept = event.payload !== null && event.payload.length <= deps.payloadLimitBytes ? event.payload : null;
  const write = async () => {
    await Promise.all([
      deliveries.length > 0 ? deps.store.createDeliveries(storedEvent(event, kept), deliveries, receivedAt) : null,
      ordered.length > 0 ? deps.store.enqueueOrdered(ordered, receivedAt) : null,
      ...fresh.map(({ subscription }, index) =>
        subscription.supersedePendingDeliveries && test === null
          ? deps.store.markLatestForEntity(deliveries[index]!, receivedAt)
          : null,
      ),
    ]);
    source?.written();
  };
  let published = records.map(({ record }): DeliveryRecord => record);
  const writing = performance.now();
  // A dispatcher reads nothing the router writes before a first attempt, unless the delivery is ordered (its entity's
  // rows) or supersedes (the entity's latest mark): every other delivery is published beside its history row, whose
  // queued state, stamped below every later one (write-time.ts), never rolls back what a dispatcher wrote first.
  const beside =
    published.every((record) => record.orderSeq === undefined) &&
    !fresh.some(({ subscription }) => subscription.supersedePendingDeliveries && test === null);
  if (beside) {
    const [stored, sent] = await Promise.allSettled([
      write().finally(() => deps.observe?.('routing_write', performance.now() - writing)),
      deps.publish(published).finally(() => deps.observe?.('routing_publish', performance.now() - writing)),
    ]);
    // Not published (or not everywhere): routed again, as after any failed try.
    if (sent.status === 'rejected') throw sent.reason;
    // Published, not stored: only the write is tried again, so that no series goes out twice for it.
    if (stored.status === 'rejected') throw new UnwrittenRoutingError(stored.reason, published, write);
    return published;
  }
  await write();
  // An ordered delivery is published once every earlier event of the partition has its rows: a dispatcher that sees
  // it finds every delivery it must wait for.
  if (ordered.length > 0 && source) {
    await source.earlier();
    // Its entity's event before it, for the dispatcher that saw that one's delivery end: it need not look at the rows.
    const orderPrev = source.previous();
    if (orderPrev !== undefined)
      published = published.map((record) => (typeof record.orderSeq === 'number' ? { ...record, orderPrev } : record));
  }
  const publishing = performance.now();
  deps.observe?.('routing_write', publishing - writing);
  await deps.publish(published);
  deps.observe?.('routing_publish', performance.now() - publishing);
  return published;
}

/**
 * An event's deliveries were published but their history rows not written (Cassandra failed): `finish` writes them,
 * and only them, and resolves with what was published. The source record is not committed until it has.
 */
export class UnwrittenRoutingError extends Error {
  readonly code = 'ROUTING_UNWRITTEN';
  constructor(
    cause: unknown,
    readonly published: DeliveryRecord[],
    private readonly write: () => Promise<void>,
  ) {
    super(`deliveries published, their history not written: ${(cause as Error)?.message ?? String(cause)}`, { cause });
  }

  async finish(): Promise<DeliveryRecord[]> {
    await this.write();
    return this.published;
  }
}

/**
 * Filters compiled once per subscription object: the router's subscription cache hands out the same objects until a
 * change or its TTL replaces them, and a replaced one is collected with its filter.
 */
const compiled = new WeakMap<Subscription, CompiledFilter | null>();
/**
 * The event as filters see it, built on first use and its payload parsed at most once (only when a filter reads the
 * payload): an event no filter looks at costs nothing.
 */
function subjectOf(event: StoredEvent): (withPayload: boolean) => FilterSubject {
  let subject: FilterSubject | undefined;
  let parsed = false;
  return (withPayload) => {
    // The envelope's fields as every subscription's envelope has them (the subscription id is no filter path).
    subject ??= { ...envelopeFields(event, ''), payload: undefined };
    if (withPayload && !parsed) {
      parsed = true;
      // A payload over the size limit is not kept (null), and one that is not JSON has no fields: either way no
      // payload path resolves, so only $exist false, $neq and $nin clauses on it hold.
      try {
        if (event.payload !== null) subject.payload = JSON.parse(event.payload.toString('utf8')) as unknown;
      } catch {
        subject.payload = undefined;
      }
    }
    return subject;
  };
}

/** Whether the subscription's filter (not null) lets the event through; a refusal is reported to `deps`. */
function passesFilter(
  subscription: Subscription,
  subject: (withPayload: boolean) => FilterSubject,
  deps: RouterDeps,
): boolean {
  let filter = compiled.get(subscription);
  if (filter === undefined) {
    // The API stored only filters that compiled; one that no longer does (a later, stricter version) filters nothing
    // rather than dropping the subscription's events.
    try {
      filter = compileFilter(subscription.filter);
    } catch {
      filter = null;
    }
    compiled.set(subscription, filter);
  }
  if (filter === null) return true;
  const passes = filter.matches(subject(filter.readsPayload));
  if (!passes) deps.filtered?.(subscription);
  return passes;
}
