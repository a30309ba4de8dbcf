import { stableIdFor } from './ids.ts';
import type { Subscription } from './subscriptions/subscription.ts';

/**
 * Operational events: what the webhook service itself tells a tenant about its subscriptions and deliveries. They are
 * raised onto the events topic like a producer's events and delivered to the tenant's subscriptions to them like any
 * event (signed, retried, in the history). Their own deliveries never raise operational events (no loops: see
 * `raisesOperationalEvents`), and a subscription receives them only when it names them with a literal first segment
 * (`subscription.*`, `delivery.abandoned`): `*.*` keeps matching business events only.
 */
export type OperationalEventType =
  | 'subscription.created'
  | 'subscription.updated'
  | 'subscription.deleted'
  | 'subscription.failing'
  | 'subscription.recovered'
  | 'subscription.disabled'
  | 'delivery.abandoned';

/** The service name operational event types are declared under in the catalogue. */
export const OPERATIONAL_SERVICE = 'webhooks';

const OPERATIONAL_PREFIXES = ['subscription', 'delivery'];

/** Whether `eventType` is an operational event type (its first segment is reserved to the service). */
export function isOperationalEventType(eventType: string): boolean {
  const dot = eventType.indexOf('.');
  return OPERATIONAL_PREFIXES.includes(dot < 0 ? eventType : eventType.slice(0, dot));
}

/** Whether a delivery's attempts may raise operational events: not a test's, not an operational event's own. */
export function raisesOperationalEvents(delivery: { eventType: string; test?: boolean }): boolean {
  return delivery.test !== true && !isOperationalEventType(delivery.eventType);
}

/** An operational event as raised: the fields of an IntegrationEvent (schemas/integration-event.avsc). */
export interface OperationalEvent {
  eventId: string;
  eventType: OperationalEventType;
  occurredAt: string;
  tenantId: string;
  entityId: string;
  reference: null;
  resourceUrl: string;
  payload: Buffer;
  testSubscriptionId: null;
}

const WEBHOOKS_PATH = '/CoreWebhook/REST/Webhooks';

/** A subscription as operational events describe it: no secret, no authentication detail. */
export interface SubscriptionSummary {
  id: string;
  url: string;
  eventTypes: string[];
  status: 'enabled' | 'disabled';
  description: string | null;
}

export function subscriptionSummary(subscription: Subscription): SubscriptionSummary {
  return {
    id: subscription.id,
    url: subscription.url,
    eventTypes: subscription.eventTypes,
    status: subscription.status,
    description: subscription.description,
  };
}

/** A failed attempt, as `subscription.failing` reports its first. */
export interface FailedAttempt {
  deliveryId: string;
  eventId: string;
  eventType: string;
  attempt: number;
  statusCode: number | null;
  error: string | null;
}

/** A delivery's last attempt, as `delivery.abandoned` reports it. */
export interface LastAttempt {
  at: string;
  statusCode: number | null;
  error: string | null;
  durationMs: number;
}

/** A delivery series that was abandoned. */
export interface AbandonedDelivery {
  deliveryId: string;
  subscriptionId: string;
  eventId: string;
  eventType: string;
  entityId: string;
  attempts: number;
}

function event(
  eventType: OperationalEventType,
  idParts: string[],
  tenantId: string,
  entityId: string,
  resourceUrl: string,
  at: Date,
  payload: object,
): OperationalEvent {
  return {
    eventId: stableIdFor(eventType, ...idParts),
    eventType,
    occurredAt: at.toISOString(),
    tenantId,
    entityId,
    reference: null,
    resourceUrl,
    payload: Buffer.from(JSON.stringify(payload), 'utf8'),
    testSubscriptionId: null,
  };
}

const subscriptionPath = (id: string) => `${WEBHOOKS_PATH}/Subscriptions/${id}`;

/**
 * `subscription.created`, `.updated` (with the names of the fields that changed, and how many updates the rate limit
 * kept quiet before it) and `.deleted`, raised by the API once the change is stored. Ids: one creation and one deletion
 * per subscription, one update per stored version.
 */
export function subscriptionChanged(
  kind: 'created' | 'updated' | 'deleted',
  subscription: Subscription,
  at: Date,
  update?: { changes: string[]; suppressed: number },
): OperationalEvent {
  const eventType = `subscription.${kind}` as const;
  const idParts = kind === 'updated' ? [subscription.id, String(at.getTime())] : [subscription.id];
  const payload = { subscription: subscriptionSummary(subscription), ...(update ?? {}) };
  return event(
    eventType,
    idParts,
    subscription.tenantId,
    subscription.id,
    subscriptionPath(subscription.id),
    at,
    payload,
  );
}

/**
 * `subscription.failing`: the first failed attempt after a success (or since the subscription was created); or, when
 * that one was kept quiet (within an hour of the last announced), the first failed attempt an hour after it.
 */
export function subscriptionFailing(subscription: Subscription, since: Date, failure: FailedAttempt): OperationalEvent {
  const { deliveryId, eventId, eventType, attempt, statusCode, error } = failure;
  const payload = {
    subscription: subscriptionSummary(subscription),
    failingSince: since.toISOString(),
    failure: { deliveryId, eventId, eventType, attempt, statusCode, error },
  };
  return event(
    'subscription.failing',
    [subscription.id, String(since.getTime())],
    subscription.tenantId,
    subscription.id,
    subscriptionPath(subscription.id),
    since,
    payload,
  );
}

/** `subscription.recovered`: the first successful attempt after `subscription.failing`. */
export function subscriptionRecovered(
  subscription: Subscription,
  failingSince: Date,
  at: Date,
  deliveryId: string,
): OperationalEvent {
  const payload = {
    subscription: subscriptionSummary(subscription),
    failingSince: failingSince.toISOString(),
    recoveredAt: at.toISOString(),
    deliveryId,
  };
  return event(
    'subscription.recovered',
    [subscription.id, String(failingSince.getTime())],
    subscription.tenantId,
    subscription.id,
    subscriptionPath(subscription.id),
    at,
    payload,
  );
}

/** `subscription.disabled`: disabled by the service after `failureDays` consecutive failure days (one per window). */
export function subscriptionDisabled(
  subscription: Subscription,
  at: Date,
  failureDays: number,
  window: number,
): OperationalEvent {
  const payload = {
    subscription: { ...subscriptionSummary(subscription), status: 'disabled' },
    disabledAt: at.toISOString(),
    failureDays,
    reason: `${failureDays} consecutive failure days (days with at least one abandoned delivery)`,
  };
  return event(
    'subscription.disabled',
    [subscription.id, String(window)],
    subscription.tenantId,
    subscription.id,
    subscriptionPath(subscription.id),
    at,
    payload,
  );
}

/** `delivery.abandoned`: with its reason, its last answer, and how many the rate limit kept quiet before it. */
export function deliveryAbandoned(
  tenantId: string,
  delivery: AbandonedDelivery,
  reason: string,
  lastAttempt: LastAttempt | null,
  at: Date,
  suppressed: number,
): OperationalEvent {
  const payload = { ...delivery, reason, abandonedAt: at.toISOString(), lastAttempt, suppressed };
  return event(
    'delivery.abandoned',
    [delivery.deliveryId],
    tenantId,
    delivery.deliveryId,
    `${WEBHOOKS_PATH}/Deliveries/${delivery.deliveryId}`,
    at,
    payload,
  );
}

/** The fields a subscription's owner sets, compared to name what an update changed. */
const COMPARED: (keyof Subscription)[] = [
  'url',
  'eventTypes',
  'authenticationMode',
  'signatureHeaderName',
  'apiKeyHeaderName',
  'oauth2',
  'supersedePendingDeliveries',
  'ordering',
  'description',
  'maxDeliveriesPerSecond',
  'filter',
  'status',
];

/** The fields that differ between two versions of a subscription (`secrets` names a new secret or key). */
export function changedFields(before: Subscription, after: Subscription): string[] {
  const changes = COMPARED.filter((field) => JSON.stringify(before[field]) !== JSON.stringify(after[field]));
  if (JSON.stringify(before.secrets) !== JSON.stringify(after.secrets)) changes.push('secrets');
  return changes;
}
