import { isOperationalEventType } from '../core/operational-events.ts';
// The webhook API's shapes (DESIGN §7) as JSON Schema: named components (validators of requests, serializers of
// answers, and `components.schemas` of /CoreWebhook/openapi.json), and the rules the document states beyond the
// validators. The operations using them are in webhook-operations.ts.
import { pageSchema, type ComponentOverrides, type JsonSchema } from '../core/http/openapi.ts';
import { AUTHENTICATION_MODES } from '../core/subscriptions/subscription.ts';
import { subscriptionFields, webhookUrlPattern } from './subscription-input.ts';

export const ID_EXAMPLE = '5f0c6a8e-3b1d-4c2a-9e7f-1a2b3c4d5e6f';
const TIME_EXAMPLE = '2026-03-02T09:17:03.112Z';
export const DELIVERY_STATUSES = ['queued', 'retrying', 'acknowledged', 'abandoned', 'superseded'] as const;

const subscriptionExample = {
  url: 'https://93.184.216.34/hooks',
  eventTypes: ['purchaseOrder.*'],
  authenticationMode: 'Hmac',
  signatureHeaderName: 'X-Webhook-Signature',
  supersedePendingDeliveries: false,
  description: 'orders to the ERP',
};

/** Shown in the document as the validator checks it; the document's form is `documentedUrl` (see the overrides). */
const webhookUrl = {
  $id: 'WebhookUrl',
  type: 'string',
  minLength: 1,
  maxLength: 2048,
  examples: ['https://93.184.216.34/hooks'],
} as const;

const eventTypePattern = {
  $id: 'EventTypePattern',
  type: 'string',
  minLength: 1,
  maxLength: 200,
  examples: ['purchaseOrder.*'],
} as const;

const subscriptionCreate = {
  $id: 'SubscriptionCreate',
  type: 'object',
  description: 'A new subscription. Secrets (hmacSecret, apiKey.value, oauth2.clientSecret) are write-only.',
  additionalProperties: false,
  required: ['url', 'eventTypes'],
  properties: subscriptionFields,
  examples: [subscriptionExample],
} as const;

const subscriptionUpdate = {
  $id: 'SubscriptionUpdate',
  type: 'object',
  description:
    'Any request field of a subscription, to change it. Switching authenticationMode to ApiKey or OAuth2 needs ' +
    'apiKey or oauth2, in this request or set earlier: otherwise 409.',
  additionalProperties: false,
  properties: subscriptionFields,
  examples: [
    {
      description: 'orders and cancellations to the ERP',
      supersedePendingDeliveries: true,
      maxDeliveriesPerSecond: 50,
    },
    { ordering: 'entity' },
    {
      filter: {
        eventType: 'purchaseOrder.validated',
        'payload.totalAmount': { $gte: '10000' },
        'payload.supplierName': { $in: ['Acme Supplies', 'Globex'] },
      },
    },
  ],
} as const;

const nullableString = { type: ['string', 'null'] } as const;

const FILTER_DESCRIPTION =
  'Only the events that satisfy this filter are delivered; null (the default) for every event of the types. Keys ' +
  'are field paths (the envelope fields, or payload.<path> into the payload: a name meeting an array applies to each ' +
  'element, a number selects one) or $and, $or (arrays of filters) and $not (a filter); every key must hold. A path ' +
  'maps to a value (equality) or to operators among $eq, $neq, $gt, $gte, $lt, $lte, $in, $nin, $exist, ' +
  '$startsWith, $endsWith (an object there is always operators: compare with an object through $eq). Numbers and ' +
  'decimal strings compare as exact decimals. At most 4,096 bytes as JSON; every payload path must be in the JSON ' +
  'Schema of one of the subscribed event types (400 naming it otherwise); $and, $or and $not nest at most 3 deep.';

/** A subscription's filter (the request field and the answer's): checked by code (core/subscriptions/filter.ts). */
const subscriptionFilter = {
  $id: 'SubscriptionFilter',
  type: ['object', 'null'],
  // Every member kept when an answer is serialized. The grammar is stated in prose: as a schema (every payload path
  // of the catalogue, each level of $and/$or/$not spelt out) it made schemathesis' generation run for minutes.
  additionalProperties: true,
  description: FILTER_DESCRIPTION,
  examples: [
    {
      eventType: 'purchaseOrder.validated',
      'payload.totalAmount': { $gte: '10000' },
      $or: [{ 'payload.supplierName': 'Acme Supplies' }, { 'payload.rows.itemCode': { $startsWith: 'TONER-' } }],
    },
  ],
} as const;

const subscription = {
  $id: 'Subscription',
  type: 'object',
  description: 'A subscription as the API answers it: secrets are never returned, but for hmacSecret where noted.',
  additionalProperties: false,
  required: [
    'id',
    'url',
    'eventTypes',
    'authenticationMode',
    'signatureHeaderName',
    'apiKey',
    'oauth2',
    'supersedePendingDeliveries',
    'ordering',
    'description',
    'maxDeliveriesPerSecond',
    'filter',
    'status',
    'failureDays',
    'createdAt',
    'updatedAt',
  ],
  properties: {
    id: { type: 'string' },
    url: { type: 'string' },
    eventTypes: { type: 'array', items: { type: 'string' } },
    authenticationMode: { type: 'string', enum: [...AUTHENTICATION_MODES] },
    signatureHeaderName: { type: 'string' },
    hmacSecret: {
      type: 'string',
      description:
        'only in the creation answer, a rotation, and a change to Hmac or StandardWebhooks that generated it ' +
        '(StandardWebhooks: whsec_ and base64)',
    },
    apiKey: {
      type: ['object', 'null'],
      additionalProperties: false,
      required: ['headerName'],
      properties: { headerName: { type: 'string' } },
    },
    oauth2: {
      type: ['object', 'null'],
      additionalProperties: false,
      required: ['tokenUrl', 'clientId', 'audience', 'scope'],
      properties: {
        tokenUrl: { type: 'string' },
        clientId: { type: 'string' },
        audience: nullableString,
        scope: nullableString,
      },
    },
    supersedePendingDeliveries: { type: 'boolean' },
    ordering: {
      type: 'string',
      enum: ['none', 'entity'],
      description: "'entity': each entity's deliveries arrive one at a time, in the order their events were raised",
    },
    description: nullableString,
    maxDeliveriesPerSecond: {
      type: ['integer', 'null'],
      minimum: 1,
      maximum: 10_000,
      description: 'attempts per second at most, across all dispatchers; null for unlimited',
    },
    filter: { $ref: 'SubscriptionFilter#' },
    status: { type: 'string', enum: ['enabled', 'disabled'] },
    failureDays: { type: 'integer', minimum: 0, description: 'failure days since the last success or re-enable' },
    createdAt: { type: 'string', format: 'date-time' },
    updatedAt: { type: 'string', format: 'date-time' },
  },
  examples: [
    {
      id: ID_EXAMPLE,
      ...subscriptionExample,
      hmacSecret: 'q4m1c0y3JdXf0m7rL8b2m9r6c1h0e5e2o4x7Z2r8d1s=',
      apiKey: null,
      oauth2: null,
      maxDeliveriesPerSecond: null,
      filter: null,
      status: 'enabled',
      failureDays: 0,
      createdAt: TIME_EXAMPLE,
      updatedAt: TIME_EXAMPLE,
    },
  ],
} as const;

const subscriptionStatusChange = {
  $id: 'SubscriptionStatusChange',
  type: 'object',
  required: ['status'],
  additionalProperties: false,
  properties: { status: { type: 'string', enum: ['enabled', 'disabled'] } },
  examples: [{ status: 'disabled' }],
} as const;

const hmacSecret = {
  $id: 'HmacSecret',
  type: 'object',
  required: ['hmacSecret'],
  additionalProperties: false,
  properties: {
    hmacSecret: {
      type: 'string',
      description:
        'the new secret: 32 random bytes, base64 (Hmac), or whsec_ and 32 random bytes in base64 (StandardWebhooks, ' +
        'whose deliveries carry a signature with the previous secret too for 24 hours)',
    },
  },
  examples: [{ hmacSecret: 'q4m1c0y3JdXf0m7rL8b2m9r6c1h0e5e2o4x7Z2r8d1s=' }],
} as const;

const testEventRequest = {
  $id: 'TestEventRequest',
  type: 'object',
  required: ['eventType'],
  additionalProperties: false,
  properties: { eventType: { $ref: 'TestableEventType#' } },
  examples: [{ eventType: 'purchaseOrder.validated' }],
} as const;

/** Documented as the catalogue's event types (see the overrides); validated as any name, answered 400 if unknown. */
const testableEventType = {
  $id: 'TestableEventType',
  type: 'string',
  minLength: 1,
  maxLength: 200,
  description: 'an event type of the catalogue (GET /EventTypes)',
  examples: ['purchaseOrder.validated'],
} as const;

const testEventAccepted = {
  $id: 'TestEventAccepted',
  type: 'object',
  required: ['eventId', 'eventType', 'subscriptionId', 'deliveryId'],
  additionalProperties: false,
  properties: {
    eventId: { type: 'string' },
    eventType: { type: 'string' },
    subscriptionId: { type: 'string' },
    deliveryId: { type: 'string', description: 'the test delivery, in the history once the router has routed it' },
  },
  examples: [
    { eventId: ID_EXAMPLE, eventType: 'purchaseOrder.validated', subscriptionId: ID_EXAMPLE, deliveryId: ID_EXAMPLE },
  ],
} as const;

const eventType = {
  $id: 'EventType',
  type: 'object',
  required: ['eventType', 'service', 'description', 'payloadSchema', 'example'],
  additionalProperties: false,
  properties: {
    eventType: { type: 'string' },
    service: { type: 'string' },
    description: { type: 'string' },
    payloadSchema: {
      type: ['object', 'null'],
      additionalProperties: true,
      description: 'JSON Schema (2020-12) of the payload; null when the producer declared none',
    },
    example: { description: 'an example payload; null when the producer declared none' },
  },
  examples: [
    {
      eventType: 'purchaseOrder.validated',
      service: 'purchase',
      description: 'a purchase order was validated',
      payloadSchema: { type: 'object' },
      example: { id: ID_EXAMPLE, status: 'Validated' },
    },
  ],
} as const;

const deliveryProperties = {
  id: { type: 'string' },
  eventId: { type: 'string' },
  eventType: { type: 'string' },
  subscriptionId: { type: 'string' },
  entityId: { type: 'string' },
  status: { type: 'string', enum: DELIVERY_STATUSES },
  attemptCount: { type: 'integer', minimum: 0 },
  lastStatusCode: { type: ['integer', 'null'], description: "the last attempt's HTTP status; null when no answer" },
  lastErrorMessage: {
    type: ['string', 'null'],
    description: "the last attempt's error (the receiver's answer or transport)",
  },
  nextRetryAt: { type: ['string', 'null'], format: 'date-time' },
  queuedAt: { type: 'string', format: 'date-time' },
  occurredAt: { type: 'string' },
  replayOf: { type: ['string', 'null'], description: 'the delivery this one replays' },
  test: { type: 'boolean', description: 'a test delivery (POST /Subscriptions/{id}/test), not raised by an event' },
  abandonReason: {
    type: ['string', 'null'],
    description: 'why the delivery ended without success (lifetime exceeded, subscription disabled or deleted…)',
  },
} as const;

const deliveryExample = {
  id: ID_EXAMPLE,
  eventId: ID_EXAMPLE,
  eventType: 'purchaseOrder.validated',
  subscriptionId: ID_EXAMPLE,
  entityId: ID_EXAMPLE,
  status: 'acknowledged',
  attemptCount: 1,
  lastStatusCode: 204,
  lastErrorMessage: null,
  nextRetryAt: null,
  queuedAt: TIME_EXAMPLE,
  occurredAt: TIME_EXAMPLE,
  replayOf: null,
  test: false,
  abandonReason: null,
};

const delivery = {
  $id: 'Delivery',
  type: 'object',
  description: 'A delivery series: one event to one subscription, with its retries.',
  additionalProperties: false,
  required: Object.keys(deliveryProperties),
  properties: deliveryProperties,
  examples: [deliveryExample],
} as const;

const attempt = {
  $id: 'Attempt',
  type: 'object',
  additionalProperties: false,
  required: ['attempt', 'at', 'statusCode', 'errorMessage', 'durationMs'],
  properties: {
    attempt: { type: 'integer', minimum: 1 },
    at: { type: 'string', format: 'date-time' },
    statusCode: { type: ['integer', 'null'] },
    errorMessage: { type: ['string', 'null'] },
    durationMs: { type: 'integer', minimum: 0 },
  },
  examples: [{ attempt: 1, at: TIME_EXAMPLE, statusCode: 204, errorMessage: null, durationMs: 38 }],
} as const;

const deliveryDetail = {
  $id: 'DeliveryDetail',
  type: 'object',
  description: 'A delivery series with its attempts and the body it sends.',
  additionalProperties: false,
  required: [...Object.keys(deliveryProperties), 'attempts', 'envelope'],
  properties: {
    ...deliveryProperties,
    attempts: { type: 'array', items: { $ref: 'Attempt#' } },
    envelope: {
      type: ['string', 'null'],
      description:
        'The request body every attempt of this series sends (the WebhookEventEnvelope), exactly as sent: the ' +
        'bytes the signature covers, as UTF-8 text. Null once the event is past its retention.',
    },
  },
  examples: [
    {
      ...deliveryExample,
      attempts: [attempt.examples[0]],
      envelope:
        '{"eventId":"0e9b7c1a-4f2d-4b8e-a1c3-5d6e7f8a9b0c","eventType":"purchaseOrder.validated",' +
        '"occurredAt":"2026-03-02T09:17:03.000Z","entityId":"' +
        ID_EXAMPLE +
        '","reference":"PO-2026-000042","resourceUrl":"/CorePurchase/REST/PurchaseOrders/' +
        ID_EXAMPLE +
        '","subscriptionId":"' +
        ID_EXAMPLE +
        '","payload":{"id":"' +
        ID_EXAMPLE +
        '","status":"Validated"},"payloadOmitted":false}',
    },
  ],
} as const;

/** The components of the webhook API, registered with fastify's addSchema (referenced as `Name#`). */
export const webhookComponents: JsonSchema[] = [
  webhookUrl,
  eventTypePattern,
  subscriptionFilter,
  subscriptionCreate,
  subscriptionUpdate,
  subscription,
  subscriptionStatusChange,
  hmacSecret,
  testableEventType,
  testEventRequest,
  testEventAccepted,
  eventType,
  delivery,
  attempt,
  deliveryDetail,
  pageSchema('SubscriptionPage', 'Subscription', 'A page of the tenant subscriptions.', subscription.examples[0]),
  pageSchema(
    'EventTypePage',
    'EventType',
    'The event-type catalogue, in one page (nextCursor is always null).',
    eventType.examples[0],
    null,
  ),
  pageSchema('DeliveryPage', 'Delivery', 'A page of the delivery history, newest first.', deliveryExample),
];

/** A documented schema of the OpenAPI 3.0 document (overrides are applied after the conversion). */
type Documented = JsonSchema;

/**
 * The rules the document states beyond the validators, from the running server: the subscriber URL grammar (https
 * only unless WEBHOOK_ALLOW_HTTP), event-type patterns matching the catalogue, and the settings each authentication
 * mode needs at creation. Code (subscription-input.ts, the test route) refuses exactly what these exclude, with 400.
 */
export function webhookOverrides(allowHttp: boolean, catalogue: { eventType: string }[]): ComponentOverrides {
  const names = catalogue.map((entry) => entry.eventType);
  return {
    WebhookUrl: (documented): Documented => ({
      ...documented,
      format: 'uri',
      pattern: webhookUrlPattern(allowHttp),
      description:
        `An absolute ${allowHttp ? 'http or https' : 'https'} URL without user-info; an IPv6 host a valid address. ` +
        'Its host must be public: ' +
        'not, or for a name not resolving to, a loopback, private, link-local, CGNAT, multicast, unspecified or ' +
        'metadata address (unless the operator allowed its network). The name is resolved when the subscription ' +
        'is written: a name that does not resolve, or resolves to such an address, is answered 400.',
    }),
    EventTypePattern: (documented): Documented => ({
      ...documented,
      pattern: catalogueRegExp(names),
      description:
        'Dotted segments, each a name or `*` (exactly one whole segment), matching at least one event type of the ' +
        'catalogue (GET /EventTypes); the pattern lists the catalogue as it is now.',
    }),
    TestableEventType: (documented): Documented => ({ ...documented, enum: names.length > 0 ? names : [''] }),
    SubscriptionCreate: (documented): Documented => ({
      ...documented,
      anyOf: [
        { properties: { authenticationMode: { enum: ['None', 'Hmac'] } } },
        STANDARD_WEBHOOKS_SECRET,
        { required: ['authenticationMode', 'apiKey'], properties: { authenticationMode: { enum: ['ApiKey'] } } },
        { required: ['authenticationMode', 'oauth2'], properties: { authenticationMode: { enum: ['OAuth2'] } } },
      ],
    }),
    SubscriptionUpdate: (documented): Documented => ({
      ...documented,
      anyOf: [
        { properties: { authenticationMode: { enum: ['None', 'ApiKey', 'Hmac', 'OAuth2'] } } },
        STANDARD_WEBHOOKS_SECRET,
      ],
    }),
  };
}

/**
 * A request choosing StandardWebhooks with a secret: `whsec_` and canonical base64 of 24 to 64 bytes
 * (core/standard-webhooks.ts).
 */
const STANDARD_WEBHOOKS_SECRET = {
  required: ['authenticationMode'],
  properties: {
    authenticationMode: { enum: ['StandardWebhooks'] },
    hmacSecret: {
      pattern:
        '^whsec_(?:(?:[A-Za-z0-9+/]{4}){8,21}(?:[A-Za-z0-9+/]{2}==)?|(?:[A-Za-z0-9+/]{4}){8,20}[A-Za-z0-9+/]{3}=)$',
    },
  },
};

/**
 * A regular expression of the patterns matching at least one of `names`: each segment itself or `*`, except the first
 * segment of an operational event type (core/event-types.ts: only a pattern naming it matches one).
 */
function catalogueRegExp(names: string[]): string {
  // An empty catalogue matches nothing: every subscription is refused until it has loaded.
  if (names.length === 0) return '^[^\\s\\S]$';
  const escape = (segment: string) => segment.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&');
  const forms = [...new Set(names)].sort().map((name) =>
    name
      .split('.')
      .map((segment, index) =>
        index === 0 && isOperationalEventType(name) ? escape(segment) : `(?:${escape(segment)}|\\*)`,
      )
      .join('\\.'),
  );
  return `^(?:${forms.join('|')})$`;
}
