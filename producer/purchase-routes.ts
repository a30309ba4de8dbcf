import type {} from '@fastify/swagger';
import type { FastifyPluginAsync } from 'fastify';
import { InvalidInputError, NotFoundError } from '../core/errors.ts';
import { newId } from '../core/ids.ts';
import { isDecimal, isPositive } from './money.ts';
import {
  cancelled,
  draftPurchaseOrder,
  IllegalTransitionError,
  validated,
  type PurchaseOrderDTO,
} from './purchase-order.ts';
import type { PurchaseStore } from './purchase-store.ts';

const CURRENCIES = new Set(Intl.supportedValuesOf('currency'));
const MAX_ROWS = 5000;

const idParams = {
  type: 'object',
  required: ['id'],
  properties: { id: { type: 'string', minLength: 1, maxLength: 64 } },
} as const;

interface OrderBody {
  supplierName: string;
  currency: string;
  rows: { itemId: string; quantity: string | number; description?: string | null }[];
}

/** The purchase API under /CorePurchase/REST (register inside a context that has the auth plugin). */
export const purchaseRoutes: FastifyPluginAsync<{ store: PurchaseStore }> = async (app, { store }) => {
  app.post<{ Body: { code: string; name: string; unitPrice: string } }>(
    '/Items',
    {
      schema: {
        tags: ['Items'],
        body: {
          type: 'object',
          required: ['code', 'name', 'unitPrice'],
          additionalProperties: false,
          properties: {
            code: { type: 'string', minLength: 1, maxLength: 64 },
            name: { type: 'string', minLength: 1, maxLength: 200 },
            unitPrice: { type: 'string', description: 'decimal string, e.g. "12.50"' },
          },
        },
      },
    },
    async (request, reply) => {
      const { code, name, unitPrice } = request.body;
      if (!isDecimal(unitPrice) || !isPositive(unitPrice)) {
        throw new InvalidInputError([
          { path: 'unitPrice', message: 'must be a positive decimal string such as "12.50"' },
        ]);
      }
      const item = { id: newId(), code, name, unitPrice, createdAt: new Date().toISOString() };
      await store.createItem(request.principal.tenantId, item);
      return reply.code(201).send(item);
    },
  );

  app.get('/Items', { schema: { tags: ['Items'] } }, async (request) => ({
    items: await store.listItems(request.principal.tenantId),
    nextCursor: null,
  }));

  app.post<{ Body: OrderBody }>(
    '/PurchaseOrders',
    {
      bodyLimit: 64 * 1024 * 1024,
      schema: {
        tags: ['PurchaseOrders'],
        body: {
          type: 'object',
          required: ['supplierName', 'currency', 'rows'],
          additionalProperties: false,
          properties: {
            supplierName: { type: 'string', minLength: 1, maxLength: 200 },
            currency: { type: 'string', pattern: '^[A-Z]{3}$' },
            rows: {
              type: 'array',
              minItems: 1,
              maxItems: MAX_ROWS,
              items: {
                type: 'object',
                required: ['itemId', 'quantity'],
                additionalProperties: false,
                properties: {
                  itemId: { type: 'string', minLength: 1, maxLength: 64 },
                  quantity: { type: ['string', 'number'] },
                  description: { type: ['string', 'null'], maxLength: 2000 },
                },
              },
            },
          },
        },
      },
    },
    async (request, reply) => {
      const tenantId = request.principal.tenantId;
      const body = request.body;
      const items = new Map((await store.listItems(tenantId)).map((item) => [item.id, item]));
      const errors: { path: string; message: string }[] = [];
      if (!CURRENCIES.has(body.currency))
        errors.push({ path: 'currency', message: 'is not an ISO 4217 currency code' });
      const rows = body.rows.map((row, index) => {
        const quantity = String(row.quantity);
        const item = items.get(row.itemId);
        if (!item) errors.push({ path: `rows.${index}.itemId`, message: 'is not an item of this tenant' });
        if (!isDecimal(quantity) || !isPositive(quantity)) {
          errors.push({ path: `rows.${index}.quantity`, message: 'must be a positive decimal number' });
        }
        return { item: item!, quantity, description: row.description ?? null };
      });
      if (errors.length > 0) throw new InvalidInputError(errors);
      const dto = draftPurchaseOrder({
        id: newId(),
        supplierName: body.supplierName,
        currency: body.currency,
        rows,
        amends: null,
        now: new Date().toISOString(),
      });
      const text = await store.createOrder(tenantId, dto);
      return reply.code(201).type('application/json').header('location', `./PurchaseOrders/${dto.id}`).send(text);
    },
  );

  const load = async (tenantId: string, id: string) => {
    const order = await store.getOrder(tenantId, id);
    if (!order) throw new NotFoundError('purchase order', id);
    return { ...order, dto: JSON.parse(order.body) as PurchaseOrderDTO };
  };

  app.get<{ Params: { id: string } }>(
    '/PurchaseOrders/:id',
    { schema: { tags: ['PurchaseOrders'], params: idParams } },
    async (request, reply) => {
      const order = await load(request.principal.tenantId, request.params.id);
      // The stored text is the serializer's output: send it as is, so GET and event payload are the same bytes.
      return reply.type('application/json').send(order.body);
    },
  );

  const transition = (action: 'validate' | 'cancel') =>
    app.post<{ Params: { id: string } }>(
      `/PurchaseOrders/:id/${action}`,
      { schema: { tags: ['PurchaseOrders'], params: idParams } },
      async (request, reply) => {
        const tenantId = request.principal.tenantId;
        const order = await load(tenantId, request.params.id);
        const now = new Date().toISOString();
        let next: PurchaseOrderDTO;
        if (action === 'validate') {
          if (order.dto.status !== 'Draft') throw new IllegalTransitionError(order.dto.status, 'validated');
          next = validated(order.dto, await store.nextReference(tenantId), now);
        } else {
          next = cancelled(order.dto, now);
        }
        const eventType = action === 'validate' ? 'purchaseOrder.validated' : 'purchaseOrder.cancelled';
        const body = await store.transition(tenantId, next, order.version, eventType, now);
        if (body === undefined) {
          // Another request changed the order first: answer from its current state.
          const current = await load(tenantId, request.params.id);
          throw new IllegalTransitionError(current.dto.status, action === 'validate' ? 'validated' : 'cancelled');
        }
        return reply.type('application/json').send(body);
      },
    );
  transition('validate');
  transition('cancel');

  app.post<{ Params: { id: string } }>(
    '/PurchaseOrders/:id/amend',
    { schema: { tags: ['PurchaseOrders'], params: idParams } },
    async (request, reply) => {
      const tenantId = request.principal.tenantId;
      const original = await load(tenantId, request.params.id);
      if (original.dto.status !== 'Validated') throw new IllegalTransitionError(original.dto.status, 'amended');
      const draft: PurchaseOrderDTO = {
        ...original.dto,
        id: newId(),
        reference: null,
        status: 'Draft',
        amends: original.dto.id,
        createdAt: new Date().toISOString(),
        validatedAt: null,
        cancelledAt: null,
      };
      const text = await store.createOrder(tenantId, draft);
      return reply.code(201).type('application/json').header('location', `./${draft.id}`).send(text);
    },
  );
};
