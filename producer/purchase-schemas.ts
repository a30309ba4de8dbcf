// The purchase API's contract (DESIGN §8) as JSON Schema: named components (validators of requests, and
// `components.schemas` of /CorePurchase/openapi.json) and each operation's schema with every status it answers, and
// the links from an order to what can be done with it.
import {
  AUTH_ERRORS,
  BODY_ERRORS,
  errorResponses,
  pageSchema,
  type ComponentOverrides,
  type ErrorStatus,
  type JsonSchema,
} from '../core/http/openapi.ts';
import { pageQuerySchema } from '../core/http/paging.ts';
import { purchaseOrderJsonSchema, validatedPurchaseOrderExample } from './purchase-order-schema.ts';

/** Most rows of one order (DESIGN §8). */
export const MAX_ROWS = 5000;
/** The ISO 4217 codes this runtime knows: the currencies an order may be in. */
export const CURRENCIES: readonly string[] = Intl.supportedValuesOf('currency');
/** A positive decimal string (money.ts: up to 30 integer and 18 fraction digits), not all zeros. */
export const POSITIVE_DECIMAL = '^(?=[0-9.]*[1-9])[0-9]{1,30}(?:\\.[0-9]{1,18})?$';
/** The range of a quantity sent as a JSON number: written without exponent, so it converts exactly to a decimal. */
export const NUMBER_QUANTITY = { minimum: 0.000001, below: 1e21 } as const;

const ID_EXAMPLE = '6a1e3b52-8c4d-4f7e-b1a2-9d0c5e3f7b21';

const item = {
  $id: 'Item',
  type: 'object',
  additionalProperties: false,
  required: ['id', 'code', 'name', 'unitPrice', 'createdAt'],
  properties: {
    id: { type: 'string' },
    code: { type: 'string' },
    name: { type: 'string' },
    unitPrice: { type: 'string', description: 'decimal string' },
    createdAt: { type: 'string', format: 'date-time' },
  },
  examples: [
    {
      id: ID_EXAMPLE,
      code: 'PAPER-A4',
      name: 'A4 paper, 500 sheets',
      unitPrice: '4.50',
      createdAt: '2026-03-02T09:15:27.481Z',
    },
  ],
} as const;

const itemCreate = {
  $id: 'ItemCreate',
  type: 'object',
  required: ['code', 'name', 'unitPrice'],
  additionalProperties: false,
  properties: {
    code: { type: 'string', minLength: 1, maxLength: 64 },
    name: { type: 'string', minLength: 1, maxLength: 200 },
    unitPrice: {
      type: 'string',
      pattern: POSITIVE_DECIMAL,
      description: 'a positive decimal string, e.g. "12.50" (up to 30 integer and 18 fraction digits)',
    },
  },
  examples: [{ code: 'PAPER-A4', name: 'A4 paper, 500 sheets', unitPrice: '4.50' }],
} as const;

/** PurchaseOrderDTO: every answer of the purchase order operations (the same schema the catalogue declares). */
const purchaseOrder = (() => {
  // OpenAPI 3.0 schemas carry no $schema; the title is the component's name.
  const { $schema: _dialect, title: _title, ...schema } = purchaseOrderJsonSchema;
  return { $id: 'PurchaseOrder', ...schema, examples: [validatedPurchaseOrderExample] };
})();

const orderRow = {
  $id: 'PurchaseOrderRowInput',
  type: 'object',
  required: ['itemId', 'quantity'],
  additionalProperties: false,
  properties: {
    itemId: { type: 'string', minLength: 1, maxLength: 64, description: 'an item of the tenant (POST /Items)' },
    quantity: { $ref: 'Quantity#' },
    description: { type: ['string', 'null'], maxLength: 2000 },
  },
  examples: [{ itemId: ID_EXAMPLE, quantity: '10', description: 'white, 80 g/m²' }],
} as const;

/** Validated as a string or a number; the document states the rules code checks (purchaseOverrides). */
const quantity = {
  $id: 'Quantity',
  type: ['string', 'number'],
  description: 'how many: a positive decimal string (exact), or a JSON number converted to one',
  examples: ['10'],
} as const;

const orderProperties = {
  supplierName: { type: 'string', minLength: 1, maxLength: 200 },
  currency: { $ref: 'Currency#' },
  rows: { type: 'array', minItems: 1, maxItems: MAX_ROWS, items: { $ref: 'PurchaseOrderRowInput#' } },
} as const;

const currency = {
  $id: 'Currency',
  type: 'string',
  pattern: '^[A-Z]{3}$',
  description: 'an ISO 4217 currency code',
  examples: ['EUR'],
} as const;

const orderExample = { supplierName: 'Acme Supplies', currency: 'EUR', rows: [orderRow.examples[0]] };

const purchaseOrderCreate = {
  $id: 'PurchaseOrderCreate',
  type: 'object',
  required: ['supplierName', 'currency', 'rows'],
  additionalProperties: false,
  properties: orderProperties,
  examples: [orderExample],
} as const;

const purchaseOrderAmend = {
  $id: 'PurchaseOrderAmend',
  // Optional: fastify validates an absent body as null. (The generated OpenAPI marks a requestBody with a schema as
  // required; the description says otherwise.)
  type: ['object', 'null'],
  description: 'Optional: the fields to change; without a body the draft is a copy of the order. New rows replace all.',
  additionalProperties: false,
  properties: orderProperties,
  examples: [{ supplierName: 'Acme Supplies Ltd', rows: [{ itemId: ID_EXAMPLE, quantity: '12' }] }],
} as const;

/** The components of the purchase API, registered with fastify's addSchema (referenced as `Name#`). */
export const purchaseComponents: JsonSchema[] = [
  item,
  itemCreate,
  pageSchema('ItemPage', 'Item', 'A page of the tenant items.', item.examples[0]),
  purchaseOrder,
  quantity,
  currency,
  orderRow,
  purchaseOrderCreate,
  purchaseOrderAmend,
];

const idParams = {
  type: 'object',
  required: ['id'],
  properties: { id: { type: 'string', minLength: 1, maxLength: 64, examples: [validatedPurchaseOrderExample.id] } },
} as const;

const errors = (own: ErrorStatus[], details: Partial<Record<ErrorStatus, string>> = {}) =>
  errorResponses([...new Set<ErrorStatus>([...own, ...AUTH_ERRORS])].sort(), details);

const NOT_FOUND = { 404: 'No such purchase order for the caller tenant.' };
const ORDER_BODY_400 =
  'Invalid request, or a row names no item of the tenant (the schema cannot know the tenant items).';

const order = (status: 200 | 201, description: string) => ({
  description,
  ...(status === 201
    ? { headers: { location: { type: 'string', description: 'the order, relative to the request URL' } } }
    : {}),
  content: { 'application/json': { schema: { $ref: 'PurchaseOrder#' } } },
});

const transition = (action: 'validate' | 'cancel') => ({
  operationId: `${action}PurchaseOrder`,
  summary: action === 'validate' ? 'Validate a draft order' : 'Cancel an order',
  description:
    action === 'validate'
      ? 'Gives the draft its reference and raises purchaseOrder.validated with the answer as payload.'
      : 'Raises purchaseOrder.cancelled with the answer as payload.',
  tags: ['PurchaseOrders'],
  params: idParams,
  response: {
    200: order(200, action === 'validate' ? 'The validated order.' : 'The cancelled order.'),
    ...errors([...BODY_ERRORS, 404, 409], {
      ...NOT_FOUND,
      409:
        action === 'validate'
          ? 'The order is not a draft, or it changed concurrently.'
          : 'The order is already cancelled, or it changed concurrently.',
    }),
  },
});

/** Each purchase operation's route schema: what it accepts and every status it answers (DESIGN §8). */
export const purchaseOperations = {
  createItem: {
    operationId: 'createItem',
    summary: 'Create an item',
    tags: ['Items'],
    body: { $ref: 'ItemCreate#' },
    response: {
      201: { description: 'Created.', content: { 'application/json': { schema: { $ref: 'Item#' } } } },
      ...errors([...BODY_ERRORS]),
    },
  },
  listItems: {
    operationId: 'listItems',
    summary: 'List the items',
    tags: ['Items'],
    querystring: pageQuerySchema,
    response: { 200: { description: 'A page of items.', $ref: 'ItemPage#' }, ...errors([400]) },
  },
  createPurchaseOrder: {
    operationId: 'createPurchaseOrder',
    summary: 'Create a draft purchase order',
    tags: ['PurchaseOrders'],
    body: { $ref: 'PurchaseOrderCreate#' },
    response: { 201: order(201, 'The draft.'), ...errors([...BODY_ERRORS], { 400: ORDER_BODY_400 }) },
  },
  getPurchaseOrder: {
    operationId: 'getPurchaseOrder',
    summary: 'Read a purchase order',
    description: 'The body is, byte for byte, the payload of the events the order raised in this state.',
    tags: ['PurchaseOrders'],
    params: idParams,
    response: { 200: order(200, 'The order.'), ...errors([400, 404], NOT_FOUND) },
  },
  validatePurchaseOrder: transition('validate'),
  cancelPurchaseOrder: transition('cancel'),
  amendPurchaseOrder: {
    operationId: 'amendPurchaseOrder',
    summary: 'Amend a validated order into a new draft',
    description:
      'Creates a draft amending the validated order (`amends` = its id), with the fields of the optional body ' +
      'changed; new `rows` replace all rows. An order has at most one open amendment: amending it again while ' +
      'that draft is still a Draft answers 409. Validating the draft raises purchaseOrder.validated under its id.',
    tags: ['PurchaseOrders'],
    params: idParams,
    body: { $ref: 'PurchaseOrderAmend#' },
    response: {
      201: order(201, 'The amendment draft.'),
      ...errors([...BODY_ERRORS, 404, 409], {
        ...NOT_FOUND,
        400: ORDER_BODY_400,
        409: 'The order is not validated, or it already has an open amendment.',
      }),
    },
  },
} as const;

const byOrderId = (expression: string) => ({
  getPurchaseOrder: { operationId: 'getPurchaseOrder', parameters: { id: expression } },
  validatePurchaseOrder: { operationId: 'validatePurchaseOrder', parameters: { id: expression } },
  cancelPurchaseOrder: { operationId: 'cancelPurchaseOrder', parameters: { id: expression } },
  amendPurchaseOrder: { operationId: 'amendPurchaseOrder', parameters: { id: expression } },
});

/** OpenAPI links by operation and status: from an order to what can be done with it. */
export const purchaseLinks = {
  createPurchaseOrder: { 201: byOrderId('$response.body#/id') },
  getPurchaseOrder: { 200: byOrderId('$response.body#/id') },
  validatePurchaseOrder: { 200: byOrderId('$response.body#/id') },
  cancelPurchaseOrder: { 200: byOrderId('$response.body#/id') },
  amendPurchaseOrder: { 201: byOrderId('$response.body#/id') },
} as const;

/**
 * The rules the document states beyond the validators (code checks them, with messages naming the rule): the
 * currencies, and a quantity's form. Written in OpenAPI 3.0 form.
 */
export function purchaseOverrides(): ComponentOverrides {
  return {
    Currency: (documented) => ({ ...documented, enum: [...CURRENCIES] }),
    Quantity: (documented) => ({
      description: documented.description,
      example: documented.example,
      anyOf: [
        {
          type: 'string',
          pattern: POSITIVE_DECIMAL,
          description: 'exact: up to 30 integer and 18 fraction digits',
          example: '10',
        },
        {
          type: 'number',
          minimum: NUMBER_QUANTITY.minimum,
          maximum: NUMBER_QUANTITY.below,
          exclusiveMaximum: true,
          description: 'converted to its shortest decimal form, rounded to 18 fraction digits',
          example: 2.5,
        },
      ],
    }),
  };
}
