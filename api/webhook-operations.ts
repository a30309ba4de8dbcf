// The webhook API's operations (DESIGN §7): each one's route schema, with every status it answers and its examples,
// and the OpenAPI links from an answer's ids to the operations they lead to. The shapes are in webhook-schemas.ts.
import {
  AUTH_ERRORS,
  BODY_ERRORS,
  cursorParameter,
  errorResponses,
  limitParameter,
  type ErrorStatus,
} from '../core/http/openapi.ts';
import { pageQuerySchema } from '../core/http/paging.ts';
import { DELIVERY_STATUSES, ID_EXAMPLE } from './webhook-schemas.ts';

const idParams = {
  type: 'object',
  required: ['id'],
  properties: { id: { type: 'string', minLength: 1, maxLength: 64, examples: [ID_EXAMPLE] } },
} as const;

const ok = (component: string, description: string) => ({ description, $ref: `${component}#` });
const created = (component: string, description: string) => ({
  description,
  headers: { location: { type: 'string', description: 'the new resource, relative to the request URL' } },
  content: { 'application/json': { schema: { $ref: `${component}#` } } },
});

/** The error answers of an operation: those every authenticated one has, and its own. */
const errors = (own: ErrorStatus[], details: Partial<Record<ErrorStatus, string>> = {}) =>
  errorResponses([...new Set<ErrorStatus>([...own, ...AUTH_ERRORS])].sort(), details);

const NOT_FOUND = { 404: 'No such subscription for the caller tenant.' };
const DELIVERY_NOT_FOUND = { 404: 'No such delivery for the caller tenant.' };

/** Each webhook operation's route schema: what it accepts and every status it answers (DESIGN §7). */
export const webhookOperations = {
  createSubscription: {
    operationId: 'createSubscription',
    summary: 'Create a subscription',
    description:
      'The answer carries hmacSecret when authenticationMode is Hmac or StandardWebhooks. With an Idempotency-Key, a ' +
      'repeat of the same ' +
      'request answers the subscription it created (Idempotent-Replayed: true); another body with that key is a 409.',
    tags: ['Subscriptions'],
    headers: {
      type: 'object',
      properties: {
        'idempotency-key': {
          type: 'string',
          minLength: 1,
          maxLength: 255,
          description: 'makes a retried creation answer the subscription the first request created',
          examples: ['b3c1f9e0-order-sync'],
        },
      },
    },
    body: { $ref: 'SubscriptionCreate#' },
    response: {
      201: {
        ...created('Subscription', 'Created (or, for a repeated Idempotency-Key, created earlier).'),
        headers: {
          ...created('Subscription', '').headers,
          'idempotent-replayed': {
            type: 'string',
            enum: ['true'],
            description: 'present when the answer is the subscription an earlier request with this key created',
          },
        },
      },
      ...errors([...BODY_ERRORS, 409], {
        409: 'The Idempotency-Key was used with another body, or its first request has not finished.',
        503: 'The event-type catalogue is still loading, or a dependency cannot answer: retry after Retry-After.',
      }),
    },
  },
  listSubscriptions: {
    operationId: 'listSubscriptions',
    summary: 'List the subscriptions',
    tags: ['Subscriptions'],
    querystring: pageQuerySchema,
    response: { 200: ok('SubscriptionPage', 'A page of subscriptions.'), ...errors([400]) },
  },
  getSubscription: {
    operationId: 'getSubscription',
    summary: 'Read a subscription',
    tags: ['Subscriptions'],
    params: idParams,
    response: { 200: ok('Subscription', 'The subscription.'), ...errors([400, 404], NOT_FOUND) },
  },
  updateSubscription: {
    operationId: 'updateSubscription',
    summary: 'Change a subscription',
    description:
      'Switching to Hmac without hmacSecret generates one, answered once in hmacSecret; so does switching to ' +
      'StandardWebhooks without a whsec_ secret (sent or stored).',
    tags: ['Subscriptions'],
    params: idParams,
    body: { $ref: 'SubscriptionUpdate#' },
    response: {
      200: ok('Subscription', 'The changed subscription.'),
      ...errors([...BODY_ERRORS, 404, 409], {
        ...NOT_FOUND,
        409:
          'authenticationMode ApiKey or OAuth2 without apiKey or oauth2, and the subscription has none; or an ' +
          'hmacSecret that is no whsec_ secret for a subscription using StandardWebhooks.',
        503: 'The event-type catalogue is still loading, or a dependency cannot answer: retry after Retry-After.',
      }),
    },
  },
  deleteSubscription: {
    operationId: 'deleteSubscription',
    summary: 'Delete a subscription',
    tags: ['Subscriptions'],
    params: idParams,
    response: { 204: { type: 'null', description: 'Deleted.' }, ...errors([...BODY_ERRORS, 404], NOT_FOUND) },
  },
  setSubscriptionStatus: {
    operationId: 'setSubscriptionStatus',
    summary: 'Enable or disable a subscription',
    description: 'Enabling resets failureDays to 0.',
    tags: ['Subscriptions'],
    params: idParams,
    body: { $ref: 'SubscriptionStatusChange#' },
    response: { 200: ok('Subscription', 'The subscription.'), ...errors([...BODY_ERRORS, 404], NOT_FOUND) },
  },
  rotateSubscriptionSecret: {
    operationId: 'rotateSubscriptionSecret',
    summary: 'Rotate the signing secret',
    description:
      'Hmac: deliveries already queued keep the signature they were queued with. StandardWebhooks (each attempt ' +
      'signed when sent): for 24 hours, webhook-signature carries a signature with the previous secret beside the ' +
      'new one, so receivers can switch without losing a delivery.',
    tags: ['Subscriptions'],
    params: idParams,
    response: {
      200: ok('HmacSecret', 'The new secret.'),
      ...errors([...BODY_ERRORS, 404, 409], {
        ...NOT_FOUND,
        409: 'The subscription uses neither Hmac nor StandardWebhooks.',
      }),
    },
  },
  sendTestEvent: {
    operationId: 'sendTestEvent',
    summary: 'Send a test event to a subscription',
    description:
      "Raises the event type's example payload as an event for this subscription only; its delivery is marked test.",
    tags: ['Subscriptions'],
    params: idParams,
    body: { $ref: 'TestEventRequest#' },
    response: {
      202: {
        description: 'Raised.',
        headers: { location: { type: 'string', description: 'the test delivery, relative to the request URL' } },
        content: { 'application/json': { schema: { $ref: 'TestEventAccepted#' } } },
      },
      ...errors([...BODY_ERRORS, 404, 409], {
        ...NOT_FOUND,
        409: 'The subscription is disabled, or the event type has no example payload.',
      }),
    },
  },
  listEventTypes: {
    operationId: 'listEventTypes',
    summary: 'List the event-type catalogue',
    tags: ['EventTypes'],
    response: { 200: ok('EventTypePage', 'Every event type.'), ...errors([]) },
  },
  getEventType: {
    operationId: 'getEventType',
    summary: 'Read one event type, with its payload schema and example',
    tags: ['EventTypes'],
    params: {
      type: 'object',
      required: ['name'],
      properties: { name: { type: 'string', minLength: 1, maxLength: 200, examples: ['purchaseOrder.validated'] } },
    },
    response: { 200: ok('EventType', 'The event type.'), ...errors([400, 404], { 404: 'No such event type.' }) },
  },
  listDeliveries: {
    operationId: 'listDeliveries',
    summary: 'List the delivery history, newest first',
    tags: ['Deliveries'],
    querystring: {
      type: 'object',
      additionalProperties: false,
      properties: {
        subscriptionId: { type: 'string', minLength: 1, maxLength: 64 },
        eventId: { type: 'string', minLength: 1, maxLength: 64 },
        eventType: { type: 'string', minLength: 1, maxLength: 200 },
        status: { type: 'string', enum: DELIVERY_STATUSES },
        from: {
          type: 'string',
          format: 'date-time',
          description: 'only deliveries queued at or after this time',
          examples: ['2026-03-02T00:00:00.000Z'],
        },
        to: {
          type: 'string',
          format: 'date-time',
          description: 'only deliveries queued before this time; after `from` when both are given (400 otherwise)',
          examples: ['2026-03-03T00:00:00.000Z'],
        },
        limit: limitParameter,
        cursor: { ...cursorParameter, maxLength: 500 },
      },
    },
    response: {
      200: ok('DeliveryPage', 'A page of deliveries (possibly short: follow nextCursor).'),
      ...errors([400], { 400: 'A query parameter is invalid (named in errors), or `to` is not after `from`.' }),
    },
  },
  getDelivery: {
    operationId: 'getDelivery',
    summary: 'Read a delivery with its attempts',
    tags: ['Deliveries'],
    params: idParams,
    response: { 200: ok('DeliveryDetail', 'The delivery.'), ...errors([400, 404], DELIVERY_NOT_FOUND) },
  },
  replayDelivery: {
    operationId: 'replayDelivery',
    summary: 'Replay an ended delivery as a new series',
    tags: ['Deliveries'],
    params: idParams,
    response: {
      202: {
        description: 'The new delivery (replayOf = id), queued.',
        headers: { location: { type: 'string', description: 'the new delivery, relative to the request URL' } },
        content: { 'application/json': { schema: { $ref: 'Delivery#' } } },
      },
      ...errors([...BODY_ERRORS, 404, 409], {
        ...DELIVERY_NOT_FOUND,
        409: 'The delivery is still queued or retrying, its event is past retention, or its subscription was deleted.',
      }),
    },
  },
} as const;

const bySubscriptionId = (expression: string) => ({
  getSubscription: { operationId: 'getSubscription', parameters: { id: expression } },
  updateSubscription: { operationId: 'updateSubscription', parameters: { id: expression } },
  deleteSubscription: { operationId: 'deleteSubscription', parameters: { id: expression } },
  setSubscriptionStatus: { operationId: 'setSubscriptionStatus', parameters: { id: expression } },
  rotateSubscriptionSecret: { operationId: 'rotateSubscriptionSecret', parameters: { id: expression } },
  sendTestEvent: { operationId: 'sendTestEvent', parameters: { id: expression } },
  listDeliveriesOfSubscription: { operationId: 'listDeliveries', parameters: { subscriptionId: expression } },
});

const byDeliveryId = (expression: string) => ({
  getDelivery: { operationId: 'getDelivery', parameters: { id: expression } },
  replayDelivery: { operationId: 'replayDelivery', parameters: { id: expression } },
});

/** OpenAPI links by operation and status: where an answer's ids lead (the stateful phase of a contract test). */
export const webhookLinks = {
  createSubscription: { 201: bySubscriptionId('$response.body#/id') },
  listSubscriptions: { 200: bySubscriptionId('$response.body#/items/0/id') },
  listEventTypes: {
    200: { getEventType: { operationId: 'getEventType', parameters: { name: '$response.body#/items/0/eventType' } } },
  },
  listDeliveries: { 200: byDeliveryId('$response.body#/items/0/id') },
  getDelivery: { 200: byDeliveryId('$response.body#/id') },
  replayDelivery: { 202: byDeliveryId('$response.body#/id') },
} as const;
