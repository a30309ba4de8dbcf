import type { EventTypeEntry } from './catalogue.ts';
import {
  deliveryAbandoned,
  OPERATIONAL_SERVICE,
  subscriptionChanged,
  subscriptionDisabled,
  subscriptionFailing,
  subscriptionRecovered,
  type OperationalEvent,
  type OperationalEventType,
} from './operational-events.ts';
import { blankSubscription } from './subscriptions/subscription.ts';

const instant = { type: 'string', format: 'date-time' } as const;
const nullableText = { type: ['string', 'null'] } as const;
const statusCode = { type: ['integer', 'null'], description: 'the HTTP status answered; null when none came' } as const;

const summary = {
  type: 'object',
  additionalProperties: false,
  required: ['id', 'url', 'eventTypes', 'status', 'description'],
  properties: {
    id: { type: 'string' },
    url: { type: 'string' },
    eventTypes: { type: 'array', items: { type: 'string' } },
    status: { enum: ['enabled', 'disabled'] },
    description: nullableText,
  },
} as const;

function schema(title: string, required: string[], properties: Record<string, object>) {
  return {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    title,
    type: 'object',
    additionalProperties: false,
    required,
    properties,
  };
}

const SCHEMAS: Record<OperationalEventType, object> = {
  'subscription.created': schema('SubscriptionCreated', ['subscription'], { subscription: summary }),
  'subscription.updated': schema('SubscriptionUpdated', ['subscription', 'changes', 'suppressed'], {
    subscription: summary,
    changes: {
      type: 'array',
      items: { type: 'string' },
      description: 'the fields the update changed (secrets: a secret or key was set or rotated, never shown)',
    },
    suppressed: {
      type: 'integer',
      minimum: 0,
      description: "updates of this subscription before this one that the rate limit kept quiet (this process's)",
    },
  }),
  'subscription.deleted': schema('SubscriptionDeleted', ['subscription'], { subscription: summary }),
  'subscription.failing': schema('SubscriptionFailing', ['subscription', 'failingSince', 'failure'], {
    subscription: summary,
    failingSince: instant,
    failure: {
      type: 'object',
      additionalProperties: false,
      required: ['deliveryId', 'eventId', 'eventType', 'attempt', 'statusCode', 'error'],
      properties: {
        deliveryId: { type: 'string' },
        eventId: { type: 'string' },
        eventType: { type: 'string' },
        attempt: { type: 'integer', minimum: 1 },
        statusCode,
        error: nullableText,
      },
    },
  }),
  'subscription.recovered': schema(
    'SubscriptionRecovered',
    ['subscription', 'failingSince', 'recoveredAt', 'deliveryId'],
    { subscription: summary, failingSince: instant, recoveredAt: instant, deliveryId: { type: 'string' } },
  ),
  'subscription.disabled': schema('SubscriptionDisabled', ['subscription', 'disabledAt', 'failureDays', 'reason'], {
    subscription: summary,
    disabledAt: instant,
    failureDays: { type: 'integer', minimum: 1 },
    reason: { type: 'string' },
  }),
  'delivery.abandoned': schema(
    'DeliveryAbandoned',
    [
      'deliveryId',
      'subscriptionId',
      'eventId',
      'eventType',
      'entityId',
      'attempts',
      'reason',
      'abandonedAt',
      'lastAttempt',
      'suppressed',
    ],
    {
      deliveryId: { type: 'string' },
      subscriptionId: { type: 'string' },
      eventId: { type: 'string' },
      eventType: { type: 'string' },
      entityId: { type: 'string' },
      attempts: { type: 'integer', minimum: 0, description: 'attempts made' },
      reason: { type: 'string' },
      abandonedAt: instant,
      lastAttempt: {
        oneOf: [
          { type: 'null' },
          {
            type: 'object',
            additionalProperties: false,
            required: ['at', 'statusCode', 'error', 'durationMs'],
            properties: { at: instant, statusCode, error: nullableText, durationMs: { type: 'integer', minimum: 0 } },
          },
        ],
      },
      suppressed: {
        type: 'integer',
        minimum: 0,
        description: 'abandoned deliveries of this subscription before this one that the rate limit kept quiet',
      },
    },
  ),
};

const DESCRIPTIONS: Record<OperationalEventType, string> = {
  'subscription.created': 'A subscription of the tenant was created.',
  'subscription.updated': 'A subscription of the tenant was changed (fields, status, secret).',
  'subscription.deleted': 'A subscription of the tenant was deleted.',
  'subscription.failing':
    "A subscription's endpoint failed an attempt after a success (at most one an hour per subscription).",
  'subscription.recovered': 'A failing subscription answered an attempt with success again.',
  'subscription.disabled': 'The service disabled a subscription after consecutive failure days.',
  'delivery.abandoned': 'A delivery was abandoned: its attempts or its lifetime ran out.',
};

/** The example of each type: built by the functions that build the real ones, from a sample subscription. */
function examples(): Record<OperationalEventType, OperationalEvent> {
  const at = new Date('2026-11-27T10:15:00.000Z');
  const failingSince = new Date('2026-11-27T09:00:00.000Z');
  const subscription = {
    ...blankSubscription('tenant-1', '6f1c1f2e-8d4b-4a51-9d1e-2b7d8e9a0c11', failingSince),
    url: 'https://erp.example.com/webhooks',
    eventTypes: ['purchaseOrder.validated', 'subscription.*'],
    description: 'ERP integration',
  };
  const delivery = {
    deliveryId: '0b8f6a3c-5d2e-8f41-9a7b-3c4d5e6f7a8b',
    subscriptionId: subscription.id,
    eventId: '9e2d4c6b-1a3f-4e5d-8c7b-6a5f4e3d2c1b',
    eventType: 'purchaseOrder.validated',
    entityId: 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d',
  };
  return {
    'subscription.created': subscriptionChanged('created', subscription, at),
    'subscription.updated': subscriptionChanged('updated', subscription, at, { changes: ['url'], suppressed: 0 }),
    'subscription.deleted': subscriptionChanged('deleted', subscription, at),
    'subscription.failing': subscriptionFailing(subscription, failingSince, {
      deliveryId: delivery.deliveryId,
      eventId: delivery.eventId,
      eventType: delivery.eventType,
      attempt: 1,
      statusCode: 503,
      error: 'HTTP 503',
    }),
    'subscription.recovered': subscriptionRecovered(subscription, failingSince, at, delivery.deliveryId),
    'subscription.disabled': subscriptionDisabled(subscription, at, 10, at.getTime()),
    'delivery.abandoned': deliveryAbandoned(
      subscription.tenantId,
      { ...delivery, attempts: 10 },
      'retries exhausted',
      { at: at.toISOString(), statusCode: 500, error: 'HTTP 500', durationMs: 112 },
      at,
      0,
    ),
  };
}

/** The operational event types as the catalogue declares them: schema and example payload each. */
export function operationalEventTypes(): EventTypeEntry[] {
  const sample = examples();
  return (Object.keys(SCHEMAS) as OperationalEventType[]).map((eventType) => ({
    eventType,
    service: OPERATIONAL_SERVICE,
    description: DESCRIPTIONS[eventType],
    payloadSchema: JSON.stringify(SCHEMAS[eventType]),
    example: sample[eventType].payload.toString('utf8'),
  }));
}
