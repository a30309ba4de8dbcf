import { Ajv2020 } from 'ajv/dist/2020.js';
import formats from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import { matchesAny, matchesEventType } from './event-types.ts';
import { operationalEventTypes } from './operational-event-types.ts';
import {
  changedFields,
  deliveryAbandoned,
  isOperationalEventType,
  OPERATIONAL_SERVICE,
  raisesOperationalEvents,
  subscriptionChanged,
  subscriptionDisabled,
  subscriptionFailing,
  subscriptionRecovered,
  type AbandonedDelivery,
  type FailedAttempt,
  type OperationalEvent,
} from './operational-events.ts';
import { blankSubscription, type Subscription } from './subscriptions/subscription.ts';

const WEBHOOKS = '/CoreWebhook/REST/Webhooks';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const HMAC_SECRET = 'hmac-secret-do-not-leak-4f1a';
const API_KEY = 'api-key-do-not-leak-93bc';
const PREVIOUS_SECRET = 'previous-secret-do-not-leak-77de';
const OAUTH_SECRET = 'oauth-secret-do-not-leak-5a0e';

const CREATED = new Date('2026-01-05T08:00:00.000Z');
const AT = new Date('2026-01-06T10:15:00.000Z');
const LATER = new Date('2026-01-06T11:15:00.000Z');

function subscription(overrides: Partial<Subscription> = {}): Subscription {
  return {
    ...blankSubscription('tenant-a', 'sub-1', CREATED),
    url: 'https://erp.example.com/hooks',
    eventTypes: ['purchaseOrder.*', 'subscription.*'],
    authenticationMode: 'Hmac',
    apiKeyHeaderName: 'X-Api-Key',
    secrets: {
      hmacSecret: HMAC_SECRET,
      apiKey: API_KEY,
      previousHmacSecret: PREVIOUS_SECRET,
      previousHmacSecretUntil: 1_900_000_000_000,
      oauth2ClientSecret: OAUTH_SECRET,
    },
    description: 'ERP integration',
    updatedAt: AT,
    ...overrides,
  };
}

const failure = (overrides: Partial<FailedAttempt> = {}): FailedAttempt => ({
  deliveryId: 'del-1',
  eventId: 'evt-1',
  eventType: 'purchaseOrder.validated',
  attempt: 1,
  statusCode: 503,
  error: 'HTTP 503',
  ...overrides,
});

const abandoned = (overrides: Partial<AbandonedDelivery> = {}): AbandonedDelivery => ({
  deliveryId: 'del-1',
  subscriptionId: 'sub-1',
  eventId: 'evt-1',
  eventType: 'purchaseOrder.validated',
  entityId: 'po-1',
  attempts: 10,
  ...overrides,
});

const lastAttempt = { at: AT.toISOString(), statusCode: 500, error: 'HTTP 500', durationMs: 112 };

const payloadOf = (event: OperationalEvent): Record<string, unknown> =>
  JSON.parse(event.payload.toString('utf8')) as Record<string, unknown>;

/** One event of each builder, from the subscription with every secret set. */
function everyKind(sub = subscription()): OperationalEvent[] {
  return [
    subscriptionChanged('created', sub, AT),
    subscriptionChanged('updated', sub, AT, { changes: ['url', 'secrets'], suppressed: 0 }),
    subscriptionChanged('deleted', sub, AT),
    subscriptionFailing(sub, AT, failure()),
    subscriptionRecovered(sub, AT, LATER, 'del-2'),
    subscriptionDisabled(sub, AT, 10, AT.getTime()),
    deliveryAbandoned(sub.tenantId, abandoned(), 'retries exhausted', lastAttempt, AT, 0),
  ];
}

describe('operational event ids', () => {
  it('are v8 UUIDs, one per event type even for the same subscription and instant', () => {
    const ids = everyKind().map((event) => event.eventId);
    for (const id of ids) expect(id).toMatch(UUID);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('give one creation and one deletion per subscription, whenever they are built', () => {
    const sub = subscription();
    expect(subscriptionChanged('created', sub, AT).eventId).toBe(subscriptionChanged('created', sub, LATER).eventId);
    expect(subscriptionChanged('deleted', sub, AT).eventId).toBe(subscriptionChanged('deleted', sub, LATER).eventId);
    const other = subscription({ id: 'sub-2' });
    expect(subscriptionChanged('created', other, AT).eventId).not.toBe(subscriptionChanged('created', sub, AT).eventId);
    expect(subscriptionChanged('deleted', other, AT).eventId).not.toBe(subscriptionChanged('deleted', sub, AT).eventId);
  });

  it('give one update per stored version (its updatedAt)', () => {
    const sub = subscription();
    const update = { changes: ['url'], suppressed: 0 };
    const first = subscriptionChanged('updated', sub, sub.updatedAt, update);
    // The same version built again (another change list, another count) is the same event.
    expect(
      subscriptionChanged('updated', sub, sub.updatedAt, { changes: ['description'], suppressed: 4 }).eventId,
    ).toBe(first.eventId);
    const next = subscription({ updatedAt: LATER });
    expect(subscriptionChanged('updated', next, next.updatedAt, update).eventId).not.toBe(first.eventId);
    expect(subscriptionChanged('updated', subscription({ id: 'sub-2' }), sub.updatedAt, update).eventId).not.toBe(
      first.eventId,
    );
  });

  it('give one failing per failing period (its since), whatever the failure', () => {
    const sub = subscription();
    const first = subscriptionFailing(sub, AT, failure());
    expect(subscriptionFailing(sub, AT, failure({ deliveryId: 'del-9', statusCode: null })).eventId).toBe(
      first.eventId,
    );
    expect(subscriptionFailing(sub, LATER, failure()).eventId).not.toBe(first.eventId);
    expect(subscriptionFailing(subscription({ id: 'sub-2' }), AT, failure()).eventId).not.toBe(first.eventId);
  });

  it('give one recovery per failing period (its failingSince), not per recovery instant', () => {
    const sub = subscription();
    const first = subscriptionRecovered(sub, AT, LATER, 'del-2');
    expect(subscriptionRecovered(sub, AT, new Date(LATER.getTime() + 1000), 'del-3').eventId).toBe(first.eventId);
    expect(subscriptionRecovered(sub, LATER, LATER, 'del-2').eventId).not.toBe(first.eventId);
    // Not the id of the failing it ends.
    expect(subscriptionFailing(sub, AT, failure()).eventId).not.toBe(first.eventId);
  });

  it('give one disabling per failure-day window', () => {
    const sub = subscription();
    const first = subscriptionDisabled(sub, AT, 10, 1000);
    expect(subscriptionDisabled(sub, LATER, 11, 1000).eventId).toBe(first.eventId);
    expect(subscriptionDisabled(sub, AT, 10, 2000).eventId).not.toBe(first.eventId);
  });

  it('give one abandonment per delivery id', () => {
    const first = deliveryAbandoned('tenant-a', abandoned(), 'retries exhausted', lastAttempt, AT, 0);
    expect(deliveryAbandoned('tenant-a', abandoned({ attempts: 3 }), 'lifetime ran out', null, LATER, 5).eventId).toBe(
      first.eventId,
    );
    expect(
      deliveryAbandoned('tenant-a', abandoned({ deliveryId: 'del-2' }), 'retries exhausted', lastAttempt, AT, 0)
        .eventId,
    ).not.toBe(first.eventId);
  });
});

describe('operational event envelopes', () => {
  it('name the tenant, the subscription as entity and its resource, and their instant in ISO form', () => {
    const sub = subscription();
    const resourceUrl = `${WEBHOOKS}/Subscriptions/sub-1`;
    const cases: [OperationalEvent, string, Date][] = [
      [subscriptionChanged('created', sub, AT), 'subscription.created', AT],
      [subscriptionChanged('updated', sub, AT, { changes: [], suppressed: 0 }), 'subscription.updated', AT],
      [subscriptionChanged('deleted', sub, AT), 'subscription.deleted', AT],
      [subscriptionFailing(sub, AT, failure()), 'subscription.failing', AT],
      [subscriptionRecovered(sub, AT, LATER, 'del-2'), 'subscription.recovered', LATER],
      [subscriptionDisabled(sub, LATER, 10, 0), 'subscription.disabled', LATER],
    ];
    for (const [event, eventType, at] of cases) {
      expect(event).toMatchObject({
        eventType,
        tenantId: 'tenant-a',
        entityId: 'sub-1',
        resourceUrl,
        occurredAt: at.toISOString(),
        reference: null,
        testSubscriptionId: null,
      });
      expect(Buffer.isBuffer(event.payload)).toBe(true);
    }
  });

  it('name the delivery as entity and resource of delivery.abandoned', () => {
    const event = deliveryAbandoned('tenant-b', abandoned({ deliveryId: 'del-7' }), 'retries exhausted', null, AT, 2);
    expect(event).toMatchObject({
      eventType: 'delivery.abandoned',
      tenantId: 'tenant-b',
      entityId: 'del-7',
      resourceUrl: `${WEBHOOKS}/Deliveries/del-7`,
      occurredAt: '2026-01-06T10:15:00.000Z',
      reference: null,
      testSubscriptionId: null,
    });
    expect(payloadOf(event)).toEqual({
      deliveryId: 'del-7',
      subscriptionId: 'sub-1',
      eventId: 'evt-1',
      eventType: 'purchaseOrder.validated',
      entityId: 'po-1',
      attempts: 10,
      reason: 'retries exhausted',
      abandonedAt: '2026-01-06T10:15:00.000Z',
      lastAttempt: null,
      suppressed: 2,
    });
  });

  it('carry payloads with what each type reports', () => {
    const sub = subscription();
    const summary = {
      id: 'sub-1',
      url: 'https://erp.example.com/hooks',
      eventTypes: ['purchaseOrder.*', 'subscription.*'],
      status: 'enabled',
      description: 'ERP integration',
    };
    expect(payloadOf(subscriptionChanged('created', sub, AT))).toEqual({ subscription: summary });
    expect(payloadOf(subscriptionChanged('updated', sub, AT, { changes: ['url'], suppressed: 3 }))).toEqual({
      subscription: summary,
      changes: ['url'],
      suppressed: 3,
    });
    expect(payloadOf(subscriptionFailing(sub, AT, failure()))).toEqual({
      subscription: summary,
      failingSince: AT.toISOString(),
      failure: failure(),
    });
    expect(payloadOf(subscriptionRecovered(sub, AT, LATER, 'del-2'))).toEqual({
      subscription: summary,
      failingSince: AT.toISOString(),
      recoveredAt: LATER.toISOString(),
      deliveryId: 'del-2',
    });
    // Disabled: the summary says so even when built from the subscription as it was before.
    const disabled = payloadOf(subscriptionDisabled(sub, AT, 10, 0));
    expect(disabled).toMatchObject({ subscription: { ...summary, status: 'disabled' }, failureDays: 10 });
    expect(disabled.disabledAt).toBe(AT.toISOString());
    expect(disabled.reason).toMatch(/^10 consecutive failure days/);
  });

  it('never carry a secret, a key or an authentication detail', () => {
    const sub = subscription({
      authenticationMode: 'OAuth2',
      oauth2: { tokenUrl: 'https://idp.example.com/token', clientId: 'client-1', audience: null, scope: null },
    });
    for (const event of everyKind(sub)) {
      const json = event.payload.toString('utf8');
      for (const secret of [HMAC_SECRET, API_KEY, PREVIOUS_SECRET, OAUTH_SECRET]) expect(json).not.toContain(secret);
      // 'secrets' may be named among an update's changes, never as a field.
      expect(json).not.toContain('"secrets":');
      expect(json).not.toContain('client-1');
      expect(json).not.toContain('X-Api-Key');
    }
  });
});

describe('changedFields', () => {
  it('is empty when nothing changed, even for copies of the arrays and objects', () => {
    const before = subscription();
    const after = subscription({ eventTypes: [...before.eventTypes], secrets: { ...before.secrets } });
    expect(changedFields(before, after)).toEqual([]);
  });

  it('names each changed field, and secrets (never their values) for a new or rotated secret', () => {
    const before = subscription();
    expect(changedFields(before, subscription({ url: 'https://other.example.com/hooks' }))).toEqual(['url']);
    expect(
      changedFields(
        before,
        subscription({ eventTypes: ['purchaseOrder.validated'], description: null, status: 'disabled' }),
      ),
    ).toEqual(['eventTypes', 'description', 'status']);
    expect(changedFields(before, subscription({ secrets: { ...before.secrets, hmacSecret: 'rotated' } }))).toEqual([
      'secrets',
    ]);
    expect(changedFields(before, subscription({ secrets: { ...before.secrets, apiKey: undefined } }))).toEqual([
      'secrets',
    ]);
    expect(changedFields(before, subscription({ maxDeliveriesPerSecond: 5, ordering: 'entity', secrets: {} }))).toEqual(
      ['ordering', 'maxDeliveriesPerSecond', 'secrets'],
    );
  });

  it('ignores what the owner does not set (health, failure days, timestamps)', () => {
    const before = subscription();
    const after = subscription({
      failureDays: 3,
      lastFailureWindow: 1000,
      failingSince: AT,
      failingAnnounced: true,
      failingAnnouncedAt: AT,
      updatedAt: LATER,
    });
    expect(changedFields(before, after)).toEqual([]);
  });
});

describe('operational event types', () => {
  it.each([
    ['subscription.created', true],
    ['subscription.failing', true],
    ['delivery.abandoned', true],
    ['subscription.anythingElse', true],
    ['subscription', true],
    ['delivery', true],
    ['purchaseOrder.validated', false],
    ['subscriptions.created', false],
    ['deliveryNote.created', false],
    ['invoice.delivery', false],
  ])('isOperationalEventType(%s) is %s', (eventType, expected) => {
    expect(isOperationalEventType(eventType)).toBe(expected);
  });

  it("are raised by a business event's real deliveries only", () => {
    expect(raisesOperationalEvents({ eventType: 'purchaseOrder.validated' })).toBe(true);
    expect(raisesOperationalEvents({ eventType: 'purchaseOrder.validated', test: false })).toBe(true);
    expect(raisesOperationalEvents({ eventType: 'purchaseOrder.validated', test: true })).toBe(false);
    expect(raisesOperationalEvents({ eventType: 'subscription.failing' })).toBe(false);
    expect(raisesOperationalEvents({ eventType: 'delivery.abandoned' })).toBe(false);
    expect(raisesOperationalEvents({ eventType: 'subscription.created', test: true })).toBe(false);
  });
});

describe('matchesEventType and operational event types', () => {
  it.each([
    ['*.*', 'subscription.failing', false],
    ['*.*', 'delivery.abandoned', false],
    ['*.abandoned', 'delivery.abandoned', false],
    ['*.failing', 'subscription.failing', false],
    ['*', 'subscription', false],
    ['subscription.*', 'subscription.failing', true],
    ['subscription.*', 'subscription.created', true],
    ['subscription.*', 'delivery.abandoned', false],
    ['delivery.*', 'delivery.abandoned', true],
    ['delivery.abandoned', 'delivery.abandoned', true],
    ['subscription.failing', 'subscription.failing', true],
    ['*.*', 'purchaseOrder.validated', true],
    ['*.validated', 'purchaseOrder.validated', true],
  ])('%s matches %s: %s', (pattern, eventType, expected) => {
    expect(matchesEventType(pattern, eventType)).toBe(expected);
  });

  it('keeps a catch-all subscription to business events only', () => {
    expect(matchesAny(['*.*'], 'subscription.recovered')).toBe(false);
    expect(matchesAny(['*.*', 'subscription.recovered'], 'subscription.recovered')).toBe(true);
    expect(matchesAny(['*.*'], 'purchaseOrder.cancelled')).toBe(true);
  });
});

describe('operational event catalogue', () => {
  // ajv-formats is CommonJS: its plugin is the default export's `default` (as test/e2e/test-events.test.ts).
  const addFormats = formats.default;
  const ajv = addFormats(new Ajv2020({ strict: false, allErrors: true }));
  const entries = operationalEventTypes();
  const validators = new Map(
    entries.map((entry) => [entry.eventType, ajv.compile(JSON.parse(entry.payloadSchema!) as object)]),
  );
  const validate = (event: OperationalEvent) => {
    const check = validators.get(event.eventType)!;
    const valid = check(payloadOf(event));
    return { valid, errors: check.errors };
  };

  it('declares every operational event type once, under the service, with a 2020-12 schema and a description', () => {
    expect(entries.map((entry) => entry.eventType).sort()).toEqual([
      'delivery.abandoned',
      'subscription.created',
      'subscription.deleted',
      'subscription.disabled',
      'subscription.failing',
      'subscription.recovered',
      'subscription.updated',
    ]);
    for (const entry of entries) {
      expect(entry.service).toBe(OPERATIONAL_SERVICE);
      expect(entry.description).toBeTruthy();
      const schema = JSON.parse(entry.payloadSchema!) as Record<string, unknown>;
      expect(schema.$schema).toBe('https://json-schema.org/draft/2020-12/schema');
      expect(schema.additionalProperties).toBe(false);
    }
  });

  it.each(entries.map((entry) => [entry.eventType, entry] as const))(
    'has an example of %s that its schema accepts',
    (_eventType, entry) => {
      const check = validators.get(entry.eventType)!;
      const example = JSON.parse(entry.example!) as unknown;
      expect(check(example), JSON.stringify(check.errors)).toBe(true);
    },
  );

  it('accepts the payloads of events built from other inputs', () => {
    const sub = subscription({ description: null, status: 'disabled', eventTypes: [] });
    const events = [
      ...everyKind(sub),
      subscriptionChanged('updated', sub, AT, { changes: [], suppressed: 3 }),
      subscriptionFailing(sub, AT, failure({ statusCode: null, error: 'no answer within 30000 ms', attempt: 4 })),
      subscriptionFailing(sub, AT, failure({ statusCode: 410, error: null })),
      deliveryAbandoned('tenant-a', abandoned({ attempts: 0 }), 'lifetime ran out', null, AT, 7),
      deliveryAbandoned('tenant-a', abandoned(), 'retries exhausted', { ...lastAttempt, statusCode: null }, AT, 0),
    ];
    for (const event of events) {
      const { valid, errors } = validate(event);
      expect(valid, `${event.eventType}: ${JSON.stringify(errors)}`).toBe(true);
    }
  });

  it('rejects a payload with a property its schema does not declare, at the top or nested', () => {
    // From built payloads (each accepted as built: the previous test), so only the added property is wrong.
    for (const event of everyKind()) {
      const check = validators.get(event.eventType)!;
      const payload = payloadOf(event);
      expect(check(payload), event.eventType).toBe(true);
      expect(check({ ...payload, extra: 1 }), event.eventType).toBe(false);
      if (payload.subscription) {
        const leaky = { ...payload, subscription: { ...(payload.subscription as object), secrets: {} } };
        expect(check(leaky), event.eventType).toBe(false);
      }
    }
    const failing = validators.get('subscription.failing')!;
    const example = payloadOf(subscriptionFailing(subscription(), AT, failure()));
    expect(failing({ ...example, failure: { ...failure(), body: 'x' } })).toBe(false);
    const abandonedCheck = validators.get('delivery.abandoned')!;
    const withAttempt = payloadOf(deliveryAbandoned('tenant-a', abandoned(), 'r', lastAttempt, AT, 0));
    expect(abandonedCheck({ ...withAttempt, lastAttempt: { ...lastAttempt, headers: {} } })).toBe(false);
  });

  it('rejects payloads missing a required field or with a wrong format', () => {
    const failing = validators.get('subscription.failing')!;
    const example = payloadOf(subscriptionFailing(subscription(), AT, failure()));
    expect(failing({ ...example, failingSince: 'yesterday' })).toBe(false);
    const { failure: _failure, ...withoutFailure } = example;
    expect(failing(withoutFailure)).toBe(false);
    const updated = validators.get('subscription.updated')!;
    expect(
      updated(payloadOf(subscriptionChanged('updated', subscription(), AT, { changes: [], suppressed: -1 }))),
    ).toBe(false);
  });
});
