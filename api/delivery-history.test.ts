// The history listing's round trips to Cassandra: a sparse history (a few deliveries over 30 days, most hours empty)
// must not cost one sequential read per empty hour, and a busy one must not read hours it does not use. The store is
// an in-memory fake whose reads answer on the next turn of the event loop; a "round" is a moment where the listing
// waits with reads in flight and none started since the previous one.
import { describe, expect, it } from 'vitest';
import type { Delivery } from '../core/deliveries/delivery.ts';
import { HOUR, type ListingEntry } from '../core/deliveries/delivery-store.ts';
import { listDeliveries, type HistoryReader } from './delivery-history.ts';

const NOW = Date.UTC(2026, 10, 26, 12, 30);
const RETENTION = 30 * 24 * HOUR;
const TENANT = 'tenant-a';

class FakeHistory implements HistoryReader {
  readonly deliveries = new Map<string, Delivery>();
  /** Index partitions read, by hour, in the order the reads were started. */
  readonly hoursRead: number[] = [];
  rounds = 0;
  private inFlight = 0;

  add(queuedAt: number, status: Delivery['status'] = 'acknowledged'): Delivery {
    const id = `d-${String(queuedAt).padStart(15, '0')}`;
    const delivery: Delivery = {
      tenantId: TENANT,
      id,
      eventId: `e-${id}`,
      eventType: 'purchaseOrder.validated',
      subscriptionId: 'sub-1',
      entityId: 'po-1',
      status,
      attemptCount: 1,
      lastStatusCode: 204,
      lastErrorMessage: null,
      nextRetryAt: null,
      queuedAt: new Date(queuedAt),
      occurredAt: new Date(queuedAt).toISOString(),
      replayOf: null,
      signature: null,
    };
    this.deliveries.set(id, delivery);
    return delivery;
  }

  indexPage: HistoryReader['indexPage'] = (_index, hour, before, limit) => {
    this.hoursRead.push(hour);
    const rows = [...this.deliveries.values()]
      .filter((delivery) => Math.floor(delivery.queuedAt.getTime() / HOUR) === hour)
      .map((delivery) => ({ queuedAt: delivery.queuedAt, id: delivery.id }))
      .sort((a, b) => b.queuedAt.getTime() - a.queuedAt.getTime() || (a.id < b.id ? 1 : -1))
      .filter((entry) => before === undefined || newer(before, entry))
      .slice(0, limit);
    return this.answer(rows);
  };

  eventIndex: HistoryReader['eventIndex'] = () => this.answer([]);

  // Like the real store, no read for no ids.
  getMany: HistoryReader['getMany'] = (_tenantId, ids) =>
    ids.length === 0 ? Promise.resolve([]) : this.answer(ids.map((id) => this.deliveries.get(id)));

  private answer<T>(value: T): Promise<T> {
    if (this.inFlight === 0) this.rounds += 1;
    this.inFlight += 1;
    return new Promise((resolve) =>
      setImmediate(() => {
        this.inFlight -= 1;
        resolve(value);
      }),
    );
  }
}

/** Whether `before` sorts before `entry` newest first (the entry is strictly older). */
function newer(before: ListingEntry, entry: ListingEntry): boolean {
  const delta = before.queuedAt.getTime() - entry.queuedAt.getTime();
  return delta > 0 || (delta === 0 && entry.id < before.id);
}

/** Follows every cursor; answers the ids listed and the requests made. */
async function walk(store: FakeHistory, limit: number, status?: Delivery['status']) {
  const ids: string[] = [];
  let requests = 0;
  for (let cursor: string | undefined; ;) {
    const page = await listDeliveries(store, { tenantId: TENANT, limit, cursor, status }, RETENTION, NOW);
    requests += 1;
    ids.push(...page.items.map((item) => item.id));
    if (page.nextCursor === null) return { ids, requests };
    cursor = page.nextCursor;
  }
}

const newestFirst = (deliveries: Delivery[]) =>
  [...deliveries].sort((a, b) => b.queuedAt.getTime() - a.queuedAt.getTime()).map((delivery) => delivery.id);

describe('delivery history listing: reads per request', () => {
  it('walks an empty 30-day history in a few rounds per request, not one per hour', async () => {
    const store = new FakeHistory();
    const { ids, requests } = await walk(store, 50);
    expect(ids).toEqual([]);
    // 721 hour partitions, each read once, in 11 requests of at most 72 hours.
    expect(store.hoursRead).toHaveLength(721);
    expect(new Set(store.hoursRead).size).toBe(721);
    expect(requests).toBe(11);
    // Before: 721 rounds (one read after another). A request's empty hours are read 1, 2, 4, 8, 16, 16 … at once.
    expect(store.rounds).toBeLessThanOrEqual(requests * 8);
  });

  it('lists a sparse history once each, newest first, in few rounds', async () => {
    const store = new FakeHistory();
    const seeded = Array.from({ length: 110 }, (_, index) =>
      store.add(NOW - HOUR - index * 5 * HOUR - (index % 7) * 60_000),
    );
    // Two deliveries in one millisecond: the id orders them.
    seeded.push(store.add(NOW - 3 * HOUR + 17));
    const { ids, requests } = await walk(store, 50);
    expect(ids).toEqual(newestFirst(seeded));
    // Before: 832 rounds (721 hours read one after another, and the deliveries of each hour with rows). Now each hour
    // with rows costs at most its own read and its deliveries' read, and each request's empty hours a few rounds.
    const hoursWithRows = new Set(seeded.map((delivery) => Math.floor(delivery.queuedAt.getTime() / HOUR))).size;
    expect(store.rounds).toBeLessThanOrEqual(hoursWithRows * 2 + requests * 8);
  });

  it('reads only the current hour when it fills the page', async () => {
    const store = new FakeHistory();
    const hour = Math.floor(NOW / HOUR) * HOUR;
    const seeded = Array.from({ length: 120 }, (_, index) => store.add(hour + index * 1_000));
    const page = await listDeliveries(store, { tenantId: TENANT, limit: 50 }, RETENTION, NOW);
    expect(page.items.map((item) => item.id)).toEqual(newestFirst(seeded).slice(0, 50));
    expect(store.hoursRead).toEqual([Math.floor(NOW / HOUR)]);
    const { ids } = await walk(store, 50);
    expect(ids).toEqual(newestFirst(seeded));
  });

  it('a filtered walk finds each match once, whatever the read-ahead', async () => {
    const store = new FakeHistory();
    const seeded = Array.from({ length: 400 }, (_, index) =>
      store.add(NOW - index * 37 * 60_000, index % 9 === 0 ? 'abandoned' : 'acknowledged'),
    );
    const { ids } = await walk(store, 20, 'abandoned');
    expect(ids).toEqual(newestFirst(seeded.filter((delivery) => delivery.status === 'abandoned')));
  });
});
