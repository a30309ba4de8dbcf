import type { PurchaseOrderDTO } from './purchase-order.ts';

/** A decimal amount or quantity as the service writes it: a string, never a JSON number (money is exact). */
const decimal = { type: 'string', pattern: '^-?\\d+(\\.\\d+)?$', examples: ['123.45'] } as const;
const instant = { type: 'string', format: 'date-time' } as const;

/**
 * JSON Schema (2020-12) of PurchaseOrderDTO: the body of every purchase API answer and the payload of every
 * purchaseOrder.* event. Declared with each event type in the catalogue, so integrators can validate and generate
 * types; test/integration/event-catalogue.test.ts validates real payloads against it.
 */
export const purchaseOrderJsonSchema = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  title: 'PurchaseOrder',
  type: 'object',
  additionalProperties: false,
  required: [
    'id',
    'reference',
    'status',
    'supplierName',
    'currency',
    'rows',
    'totalAmount',
    'amends',
    'createdAt',
    'validatedAt',
    'cancelledAt',
  ],
  properties: {
    id: { type: 'string', description: 'the order id; an amendment has its own' },
    reference: {
      type: ['string', 'null'],
      pattern: '^PO-\\d{6,}$',
      description: 'business reference, set when validated (contiguous per tenant); null while a draft',
    },
    status: { enum: ['Draft', 'Validated', 'Cancelled'] },
    supplierName: { type: 'string', minLength: 1, maxLength: 200 },
    currency: { type: 'string', pattern: '^[A-Z]{3}$', description: 'ISO 4217 code' },
    rows: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['lineNumber', 'itemId', 'itemCode', 'itemName', 'description', 'quantity', 'unitPrice', 'amount'],
        properties: {
          lineNumber: { type: 'integer', minimum: 1 },
          itemId: { type: 'string' },
          itemCode: { type: 'string' },
          itemName: { type: 'string' },
          description: { type: ['string', 'null'], maxLength: 2000 },
          quantity: decimal,
          unitPrice: decimal,
          amount: { ...decimal, description: 'quantity × unitPrice, exact' },
        },
      },
    },
    totalAmount: { ...decimal, description: 'sum of the rows’ amounts, exact' },
    amends: { type: ['string', 'null'], description: 'the id of the order this one amends, if any' },
    createdAt: instant,
    validatedAt: { type: ['string', 'null'], format: 'date-time' },
    cancelledAt: { type: ['string', 'null'], format: 'date-time' },
  },
} as const;

/** A validated order as a purchaseOrder.validated event carries it (the catalogue's example). */
export const validatedPurchaseOrderExample: PurchaseOrderDTO = {
  id: '0b7c2f4e-5f0a-4d8e-9a53-2f1d8c6b7a10',
  reference: 'PO-000042',
  status: 'Validated',
  supplierName: 'Acme Supplies',
  currency: 'EUR',
  rows: [
    {
      lineNumber: 1,
      itemId: '6a1e3b52-8c4d-4f7e-b1a2-9d0c5e3f7b21',
      itemCode: 'PAPER-A4',
      itemName: 'A4 paper, 500 sheets',
      description: 'white, 80 g/m²',
      quantity: '10',
      unitPrice: '4.50',
      amount: '45.00',
    },
    {
      lineNumber: 2,
      itemId: '1f9d7c3a-2b4e-4a6d-8c0f-5e7a9b1d3c42',
      itemCode: 'TONER-K',
      itemName: 'Black toner cartridge',
      description: null,
      quantity: '2',
      unitPrice: '39.90',
      amount: '79.80',
    },
  ],
  totalAmount: '124.80',
  amends: null,
  createdAt: '2026-03-02T09:15:27.481Z',
  validatedAt: '2026-03-02T09:17:03.112Z',
  cancelledAt: null,
};

/** The same order cancelled after its validation (the catalogue's purchaseOrder.cancelled example). */
export const cancelledPurchaseOrderExample: PurchaseOrderDTO = {
  ...validatedPurchaseOrderExample,
  status: 'Cancelled',
  cancelledAt: '2026-03-02T10:02:44.905Z',
};
