import { traceparentOf } from '../core/http/request-spans.ts';
import type {} from '@fastify/swagger';
import type { FastifyPluginAsync } from 'fastify';
import { ConflictError, InvalidInputError, NotFoundError } from '../core/errors.ts';
import type { PageQuery } from '../core/http/paging.ts';
import { newId } from '../core/ids.ts';
import { isDecimal, isPositive } from './money.ts';
import {
  AmendmentOpenError,
  amendmentDraft,
  cancelled,
  draftPurchaseOrder,
  IllegalTransitionError,
  serializePurchaseOrder,
  validated,
  type Item,
  type PurchaseOrderDTO,
} from './purchase-order.ts';
import { CURRENCIES, NUMBER_QUANTITY, purchaseLinks, purchaseOperations } from './purchase-schemas.ts';
import type { PurchaseStore } from './purchase-store.ts';
import type { PurchaseMetrics, PurchaseStage } from '../core/metrics.ts';

const CURRENCY_CODES = new Set(CURRENCIES);
/**
 * Largest order body, in bytes of JSON. Large bodies are stored in chunks, so the bound comes from the event: it must
 * fit in one Kafka record of the purchase events topic (max.message.bytes 64 MiB). 5,000 rows of 2,000 four-byte
 * characters (about 41 MB) fit.
 */
const MAX_ORDER_BYTES = 56 * 1024 * 1024;

interface OrderBody {
  supplierName: string;
  currency: string;
  rows: { itemId: string; quantity: string | number; description?: string | null }[];
}

/**
 * Reading an order and applying a transition to it: the purchase API's routes, and the servers' warm-up, which runs
 * validations through the same statements (infra/servers/warm-up-pipeline.ts).
 */
export function orderTransitions(store: PurchaseStore, metrics?: PurchaseMetrics) {
  const load = async (tenantId: string, id: string, options?: { serial: boolean }) => {
    const order = await store.getOrder(tenantId, id, options);
    if (!order) throw new NotFoundError('purchase order', id);
    // Fields named, not spread: a spread object given a property gets a V8 hidden class of its own each time (README).
    return {
      body: order.body,
      version: order.version,
      openAmendment: order.openAmendment,
      dto: JSON.parse(order.body) as PurchaseOrderDTO,
    };
  };

  /**
   * Applies the action with a compare-and-set on the order's version. A lost compare-and-set means another request
   * (perhaps in another process) changed the order first: decide again from the order's new state, which may still
   * allow the action (a cancel that raced a validation) or answer 409.
   */
  const applyTransition = async (
    tenantId: string,
    id: string,
    action: 'validate' | 'cancel',
    traceparent: string | undefined,
  ): Promise<string> => {
    const eventType = action === 'validate' ? 'purchaseOrder.validated' : 'purchaseOrder.cancelled';
    for (let attempt = 1; ; attempt += 1) {
      // The relay's pointer goes out with the first read of the order (one round trip for both, not two); it leads to
      // nothing if the transition is then refused. A lost race writes it again, before its next batch.
      const pointer = attempt === 1 ? store.writePointer(tenantId, id) : undefined;
      pointer?.written.catch(noop); // awaited by the transition; a read that fails first leaves it unawaited
      // Released `true` unless a batch may have applied unseen (the transition failed): a commit holds the pointer
      // itself until its row is published; one that may have applied leaves it to the sweep.
      let unseen = false;
      let body: string | undefined;
      let next: PurchaseOrderDTO;
      try {
        // After a lost race, a serial read sees the state the winner committed.
        let started = performance.now();
        const order = await load(tenantId, id, { serial: attempt > 1 });
        started = lap(metrics, 'transition_read', started);
        const now = new Date().toISOString();
        if (action === 'validate') {
          // Checked before a reference is taken, so a refused validation does not use one up.
          if (order.dto.status !== 'Draft') throw new IllegalTransitionError(order.dto.status, 'validated');
          next = validated(order.dto, await store.nextReference(tenantId), now);
          started = lap(metrics, 'transition_reference', started);
        } else {
          next = cancelled(order.dto, now);
        }
        unseen = true;
        body = await store.transition(tenantId, next, order.version, eventType, now, traceparent, { pointer });
        unseen = false;
        lap(metrics, 'transition_commit', started);
      } finally {
        pointer?.release(!unseen);
      }
      if (body !== undefined) return body;
      // Not applied, for certain: no committed state carries the reference, so the next validation takes it.
      if (action === 'validate') store.returnReference(tenantId, next.reference!);
      // An order changes state at most twice, so a third lost race means something is wrong: let the client retry.
      if (attempt >= 3) throw new ConflictError(`purchase order ${id} changed concurrently; try again`);
    }
  };

  return { load, applyTransition };
}

/** The purchase API under /CorePurchase/REST (register inside a context that has the auth plugin). */
export const purchaseRoutes: FastifyPluginAsync<{ store: PurchaseStore; metrics?: PurchaseMetrics }> = async (
  app,
  { store, metrics },
) => {
  /** Checks the currency and rows of a create or amend body against the tenant's items; the rows with their items. */
  const checkedInput = async (tenantId: string, body: Partial<OrderBody>) => {
    const items = body.rows
      ? await store.itemsById(
          tenantId,
          body.rows.map((row) => row.itemId),
        )
      : new Map<string, Item>();
    const errors: { path: string; message: string }[] = [];
    if (body.currency !== undefined && !CURRENCY_CODES.has(body.currency))
      errors.push({ path: 'currency', message: 'is not an ISO 4217 currency code' });
    const rows = body.rows?.map((row, index) => {
      const quantity = decimalQuantity(row.quantity);
      const item = items.get(row.itemId);
      if (!item) errors.push({ path: `rows.${index}.itemId`, message: 'is not an item of this tenant' });
      if (quantity === undefined || !isDecimal(quantity) || !isPositive(quantity)) {
        errors.push({ path: `rows.${index}.quantity`, message: 'must be a positive decimal number' });
      }
      return { item: item!, quantity: quantity!, description: row.description ?? null };
    });
    if (errors.length > 0) throw new InvalidInputError(errors);
    return { rows };
  };

  app.post<{ Body: { code: string; name: string; unitPrice: string } }>(
    '/Items',
    { schema: purchaseOperations.createItem },
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

  app.get<{ Querystring: PageQuery }>('/Items', { schema: purchaseOperations.listItems }, async (request) =>
    store.pageItems(request.principal.tenantId, request.query.limit, request.query.cursor),
  );

  app.post<{ Body: OrderBody }>(
    '/PurchaseOrders',
    {
      bodyLimit: 64 * 1024 * 1024,
      schema: purchaseOperations.createPurchaseOrder,
      links: purchaseLinks.createPurchaseOrder,
    },
    async (request, reply) => {
      const tenantId = request.principal.tenantId;
      const body = request.body;
      const { rows } = await checkedInput(tenantId, body);
      const dto = draftPurchaseOrder({
        id: newId(),
        supplierName: body.supplierName,
        currency: body.currency,
        rows: rows!,
        amends: null,
        now: new Date().toISOString(),
      });
      checkSize(dto);
      const text = await store.createOrder(tenantId, dto);
      return reply.code(201).type('application/json').header('location', `./PurchaseOrders/${dto.id}`).send(text);
    },
  );

  const { load, applyTransition } = orderTransitions(store, metrics);

  app.get<{ Params: { id: string } }>(
    '/PurchaseOrders/:id',
    { schema: purchaseOperations.getPurchaseOrder, links: purchaseLinks.getPurchaseOrder },
    async (request, reply) => {
      const order = await load(request.principal.tenantId, request.params.id);
      // The stored text is the serializer's output: send it as is, so GET and event payload are the same bytes.
      return reply.type('application/json').send(order.body);
    },
  );

  // One transition at a time per order in this process: concurrent requests for one order (a double click, a retry
  // storm) wait for the first and are then answered from the order's new state, without taking a reference each.
  const oneAtATime = keyedQueue();
  const transition = (action: 'validate' | 'cancel') =>
    app.post<{ Params: { id: string } }>(
      `/PurchaseOrders/:id/${action}`,
      { schema: purchaseOperations[`${action}PurchaseOrder`], links: purchaseLinks[`${action}PurchaseOrder`] },
      async (request, reply) => {
        const tenantId = request.principal.tenantId;
        const id = request.params.id;
        // The event's trace starts with this request (its outbox row keeps the request span's traceparent).
        const traceparent = traceparentOf(request);
        const body = await oneAtATime(`${tenantId}\u0000${id}`, () =>
          applyTransition(tenantId, id, action, traceparent),
        );
        return reply.type('application/json').send(body);
      },
    );
  transition('validate');
  transition('cancel');

  /** 409 if an amendment draft of the order is still a Draft (a claim whose draft moved on no longer counts). */
  const refuseOpenAmendment = async (
    tenantId: string,
    order: { dto: PurchaseOrderDTO; openAmendment: string | null },
  ) => {
    if (order.openAmendment === null) return;
    const open = await store.getOrder(tenantId, order.openAmendment, { serial: true });
    if (open && (JSON.parse(open.body) as PurchaseOrderDTO).status === 'Draft') {
      throw new AmendmentOpenError(order.dto.id, order.openAmendment);
    }
  };

  app.post<{ Params: { id: string }; Body: Partial<OrderBody> | undefined }>(
    '/PurchaseOrders/:id/amend',
    {
      bodyLimit: 64 * 1024 * 1024,
      schema: purchaseOperations.amendPurchaseOrder,
      links: purchaseLinks.amendPurchaseOrder,
    },
    async (request, reply) => {
      const tenantId = request.principal.tenantId;
      const changes = request.body ?? {};
      let order = await load(tenantId, request.params.id);
      if (order.dto.status !== 'Validated') throw new IllegalTransitionError(order.dto.status, 'amended');
      await refuseOpenAmendment(tenantId, order);
      const { rows } = await checkedInput(tenantId, changes);
      const draft = amendmentDraft(order.dto, {
        id: newId(),
        supplierName: changes.supplierName,
        currency: changes.currency,
        rows,
        now: new Date().toISOString(),
      });
      checkSize(draft);
      // The draft is written first under a new id nobody knows, then claimed as the order's open amendment by
      // compare-and-set: a request that loses the claim deletes its draft, so no second open amendment is ever seen.
      const text = await store.createOrder(tenantId, draft);
      try {
        for (let attempt = 1; ; attempt += 1) {
          if (await store.claimAmendment(tenantId, order.dto.id, order.version, order.openAmendment, draft.id)) break;
          // Lost: another amend claimed the order, or the order changed (cancelled). Decide again from what won.
          order = await load(tenantId, order.dto.id, { serial: true });
          if (order.dto.status !== 'Validated') throw new IllegalTransitionError(order.dto.status, 'amended');
          await refuseOpenAmendment(tenantId, order);
          if (attempt >= 3) throw new ConflictError(`purchase order ${order.dto.id} changed concurrently; try again`);
        }
      } catch (error) {
        await store.discardOrder(tenantId, draft.id).catch((discardError: unknown) => {
          request.log.warn({ err: discardError, orderId: draft.id }, 'could not delete an unclaimed amendment draft');
        });
        throw error;
      }
      // Relative to /PurchaseOrders/{id}/amend: the new draft is /PurchaseOrders/{newId}.
      return reply.code(201).type('application/json').header('location', `../${draft.id}`).send(text);
    },
  );
};

/**
 * A row's quantity as a decimal string: a string as sent; a JSON number from 0.000001 to below 1e21 (the range where
 * JavaScript writes it without an exponent) in its shortest decimal form, rounded half-up to the 18 fraction digits a
 * quantity has at most (a float's last digits are noise anyway). Undefined for other numbers.
 */
export function decimalQuantity(quantity: string | number): string | undefined {
  if (typeof quantity === 'string') return quantity;
  if (!(quantity >= NUMBER_QUANTITY.minimum && quantity < NUMBER_QUANTITY.below)) return undefined;
  const [whole, fraction = ''] = String(quantity).split('.') as [string, string?];
  if (fraction.length <= 18) return String(quantity);
  const units = BigInt(whole + fraction.slice(0, 18)) + (fraction[18]! >= '5' ? 1n : 0n);
  const digits = units.toString().padStart(19, '0');
  return `${digits.slice(0, -18)}.${digits.slice(-18)}`;
}

/** Refuses an order whose body would not fit in one event (see MAX_ORDER_BYTES). */
function checkSize(dto: PurchaseOrderDTO): void {
  const size = Buffer.byteLength(serializePurchaseOrder(dto));
  if (size > MAX_ORDER_BYTES) {
    throw new InvalidInputError([
      { path: 'rows', message: `make an order of ${size} bytes of JSON; at most ${MAX_ORDER_BYTES} are accepted` },
    ]);
  }
}

/** Runs each task after the previous task of the same key has settled. */
function keyedQueue() {
  const tails = new Map<string, Promise<unknown>>();
  return <T>(key: string, task: () => Promise<T>): Promise<T> => {
    const run = (tails.get(key) ?? Promise.resolve()).catch(() => undefined).then(task);
    tails.set(key, run);
    void run
      .catch(() => undefined)
      .then(() => {
        if (tails.get(key) === run) tails.delete(key);
      });
    return run;
  };
}

const noop = () => undefined;

/** Records the time since `started` as `stage` (when there are metrics); returns now, where the next stage starts. */
function lap(metrics: PurchaseMetrics | undefined, stage: PurchaseStage, started: number): number {
  const now = performance.now();
  metrics?.stage(stage, now - started);
  return now;
}
