/**
 * `npm run bench -- --filters [--events 20000] [--subs 20] [--rounds 3]`
 * The routing cost of subscription filters (issue 31): the router's own work per event (routeEvent: matching the
 * tenant's subscriptions, evaluating their filters, building and signing each envelope), in this process with an
 * in-memory store and publisher, so that Cassandra's and Kafka's time, which filters do not change, does not drown the
 * difference. Per tenant, --subs Hmac subscriptions to purchaseOrder.*, in three shapes:
 *   none       no filter;
 *   pass       each with a 5-clause filter that every event satisfies (the same deliveries as `none`: the pure cost of
 *              evaluating);
 *   half       each with a 5-clause filter that half the events satisfy (fewer deliveries: what filtering saves).
 * Events are purchase orders of 1 to 20 rows, their payload bytes as the purchase service writes them. Prints, per
 * shape, the CPU µs per event (median of --rounds rounds, alternated) and the ratio to `none`.
 */
import { parseArgs } from 'node:util';
import type { StoredEvent } from '../../core/deliveries/delivery.ts';
import { blankSubscription, type Subscription } from '../../core/subscriptions/subscription.ts';
import type { Filter } from '../../core/subscriptions/filter.ts';
import { validatedPurchaseOrderExample } from '../../producer/purchase-order-schema.ts';
import { routeEvent, type RouterDeps } from '../../router/event-router.ts';

const { values } = parseArgs({
  options: {
    filters: { type: 'boolean', default: true },
    events: { type: 'string', default: '20000' },
    subs: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '3' },
  },
});
const eventCount = Number(values.events);
const subsPerTenant = Number(values.subs);
const rounds = Number(values.rounds);
const TENANTS = 10;

/** Five clauses: the event type, an amount range (decimal strings), a supplier list, a row's code, the currency. */
function filterFor(shape: 'pass' | 'half', index: number): Filter {
  return {
    eventType: { $in: ['purchaseOrder.validated', 'purchaseOrder.cancelled'] },
    'payload.totalAmount': shape === 'pass' ? { $gte: '0' } : { $gte: '5000' },
    'payload.supplierName': { $in: ['Acme Supplies', 'Globex', `Supplier ${index}`] },
    'payload.rows.itemCode': { $startsWith: 'ITEM-' },
    'payload.currency': 'EUR',
  };
}

function subscriptionsFor(shape: 'none' | 'pass' | 'half', tenantId: string): Subscription[] {
  return Array.from({ length: subsPerTenant }, (_, index) => ({
    ...blankSubscription(tenantId, `${tenantId}-sub-${index}`, new Date(0)),
    url: `https://receiver.example.com/${index}`,
    eventTypes: ['purchaseOrder.*'],
    authenticationMode: 'Hmac' as const,
    secrets: { hmacSecret: `secret-${tenantId}-${index}-0123456789abcdef` },
    filter: shape === 'none' ? null : filterFor(shape, index),
  }));
}

/** Orders of 1 to 20 rows whose totals spread evenly over 0–10,000 (so `half` refuses about half). */
function events(): StoredEvent[] {
  return Array.from({ length: eventCount }, (_, n) => {
    const rows = Array.from({ length: 1 + (n % 20) }, (_, row) => ({
      ...validatedPurchaseOrderExample.rows[0]!,
      lineNumber: row + 1,
      itemCode: `ITEM-${row}`,
    }));
    const payload = {
      ...validatedPurchaseOrderExample,
      id: `po-${n}`,
      supplierName: n % 3 === 0 ? 'Globex' : 'Acme Supplies',
      rows,
      totalAmount: ((n * 7919) % 10_000).toFixed(2),
    };
    return {
      tenantId: `tenant-${n % TENANTS}`,
      eventId: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`,
      eventType: 'purchaseOrder.validated',
      occurredAt: '2026-03-02T09:17:03.112Z',
      entityId: `po-${n}`,
      reference: `PO-${String(n).padStart(6, '0')}`,
      resourceUrl: `/CorePurchase/REST/PurchaseOrders/po-${n}`,
      payload: Buffer.from(JSON.stringify(payload)),
    };
  });
}

async function round(shape: 'none' | 'pass' | 'half', all: StoredEvent[]) {
  const byTenant = new Map(
    Array.from({ length: TENANTS }, (_, t) => [`tenant-${t}`, subscriptionsFor(shape, `tenant-${t}`)]),
  );
  let deliveries = 0;
  const deps: RouterDeps = {
    subscriptionsOf: async (tenantId) => byTenant.get(tenantId) ?? [],
    store: {
      createDeliveries: async () => undefined,
      routedBefore: async () => new Map(),
      markLatestForEntity: async () => undefined,
      enqueueOrdered: async () => undefined,
    },
    publish: async (records) => {
      deliveries += records.length;
    },
    payloadLimitBytes: 204_800,
  };
  // Once over a slice first: the filters compile and the JIT settles before the measured pass.
  for (const event of all.slice(0, 2_000)) await routeEvent(event, 0, deps);
  deliveries = 0;
  const started = process.cpuUsage();
  for (const event of all) await routeEvent(event, 0, deps);
  const used = process.cpuUsage(started);
  return { usPerEvent: (used.user + used.system) / all.length, deliveries };
}

const all = events();
const shapes = ['none', 'pass', 'half'] as const;
const results = new Map<string, { usPerEvent: number; deliveries: number }[]>(shapes.map((shape) => [shape, []]));
for (let r = 0; r < rounds; r += 1) {
  // Alternated, so that a drift of the machine weighs on every shape alike.
  for (const shape of r % 2 === 0 ? shapes : [...shapes].reverse()) results.get(shape)!.push(await round(shape, all));
}
const median = (list: number[]) => list.slice().sort((a, b) => a - b)[Math.floor(list.length / 2)]!;
const base = median(results.get('none')!.map((result) => result.usPerEvent));
console.log(
  `routing ${eventCount} events over ${TENANTS} tenants × ${subsPerTenant} Hmac subscriptions, ${rounds} rounds ` +
    '(CPU per event, median):',
);
for (const shape of shapes) {
  const list = results.get(shape)!;
  const us = median(list.map((result) => result.usPerEvent));
  console.log(
    `  ${shape.padEnd(5)} ${us.toFixed(1).padStart(7)} µs/event  ${(us / base).toFixed(2)}× none  ` +
      `${list[0]!.deliveries} deliveries  (rounds: ${list.map((result) => result.usPerEvent.toFixed(1)).join(', ')})`,
  );
}
