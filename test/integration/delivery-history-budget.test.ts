// A filtered history page reads a bounded number of index rows (DESIGN §7): a busy hour whose rows mostly fail the
// filter answers a short (even empty) page with a cursor instead of reading the whole hour, and following the cursors
// still visits every matching delivery exactly once. Real Cassandra; the store is wrapped to count the rows read.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listDeliveries, type HistoryQuery } from '../../api/delivery-history.ts';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import type { Delivery, DeliveryStatus } from '../../core/deliveries/delivery.ts';
import { DeliveryStore, HOUR } from '../../core/deliveries/delivery-store.ts';
import { newId } from '../../core/ids.ts';
import { testEnv } from '../support/harness.ts';
import { uniqueTenant } from '../support/webhook-api.ts';

/** Index rows one history request may read at most. */
const BUDGET = 2_000;
const BUSY = 3_000;
const RETENTION = 30 * 24 * HOUR;

/** Counts what each request reads: index rows, and deliveries loaded to apply the filters. */
class CountingStore extends DeliveryStore {
  indexRows = 0;
  loaded = 0;

  override async indexPage(...args: Parameters<DeliveryStore['indexPage']>) {
    const rows = await super.indexPage(...args);
    this.indexRows += rows.length;
    return rows;
  }

  override async eventIndex(...args: Parameters<DeliveryStore['eventIndex']>) {
    const rows = await super.eventIndex(...args);
    this.indexRows += rows.length;
    return rows;
  }

  override async getMany(tenantId: string, ids: string[]) {
    this.loaded += ids.length;
    return super.getMany(tenantId, ids);
  }
}

describe('delivery history: rows read per request', () => {
  let db: CassandraClient;
  let store: CountingStore;
  // Two hours ago, so that the whole busy hour is in the past and the scan reaches it from the present.
  const hour = Math.floor(Date.now() / HOUR) - 2;
  const subscriptionId = newId();

  beforeAll(async () => {
    db = await connectCassandra(loadConfig(testEnv()));
    store = new CountingStore(db, RETENTION);
  });
  afterAll(() => db?.shutdown());

  /** `count` deliveries one second apart in `hour`, oldest first; `matching(i)` ones are abandoned. */
  async function seedBusyHour(tenantId: string, count: number, matching: (index: number) => boolean, eventId?: string) {
    const deliveries: Delivery[] = Array.from({ length: count }, (_, index) => {
      const queuedAt = new Date(hour * HOUR + index * 1_000);
      const status: DeliveryStatus = matching(index) ? 'abandoned' : 'acknowledged';
      return {
        tenantId,
        id: newId(),
        eventId: eventId ?? newId(),
        eventType: 'purchaseOrder.validated',
        subscriptionId,
        entityId: `po-${index}`,
        status,
        attemptCount: 1,
        lastStatusCode: status === 'abandoned' ? 500 : 204,
        lastErrorMessage: null,
        nextRetryAt: null,
        queuedAt,
        occurredAt: queuedAt.toISOString(),
        replayOf: null,
        signature: null,
      };
    });
    for (let start = 0; start < deliveries.length; start += 100) {
      await Promise.all(deliveries.slice(start, start + 100).map((delivery) => store.insertDelivery(delivery)));
    }
    return deliveries;
  }

  /** Every page of a listing; each request is checked against the budget. */
  async function pages(query: HistoryQuery) {
    const visited: string[] = [];
    const reads: number[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 100; page += 1) {
      store.indexRows = 0;
      store.loaded = 0;
      const answer = await listDeliveries(store, { ...query, cursor }, RETENTION);
      reads.push(store.indexRows);
      expect(store.indexRows, `index rows read by request ${page + 1}`).toBeLessThanOrEqual(BUDGET);
      expect(store.loaded, `deliveries loaded by request ${page + 1}`).toBeLessThanOrEqual(BUDGET);
      expect(answer.items.length).toBeLessThanOrEqual(query.limit);
      visited.push(...answer.items.map((item) => item.id));
      if (answer.nextCursor === null) return { visited, reads };
      cursor = answer.nextCursor;
    }
    throw new Error('more than 100 pages');
  }

  it.each([
    ['status', { status: 'abandoned' as const }],
    ['subscriptionId + status', { subscriptionId, status: 'abandoned' as const }],
  ])(
    'a busy hour where only the oldest delivery matches (%s): each request reads at most the budget',
    async (_name, filter) => {
      const tenantId = uniqueTenant('history-budget');
      const seeded = await seedBusyHour(tenantId, BUSY, (index) => index === 0);
      for (const limit of [1, 50]) {
        store.indexRows = 0;
        const first = await listDeliveries(store, { tenantId, limit, ...filter }, RETENTION);
        expect(store.indexRows, 'index rows read by the first request').toBeLessThanOrEqual(BUDGET);
        expect(first.items).toEqual([]);
        expect(first.nextCursor).not.toBeNull();

        const { visited, reads } = await pages({ tenantId, limit, ...filter });
        expect(visited).toEqual([seeded[0]!.id]);
        // Every row of the hour was read once, over several requests.
        expect(reads.reduce((sum, rows) => sum + rows, 0)).toBeGreaterThanOrEqual(BUSY);
      }
    },
  );

  it('pages spread matches across budget-limited requests, each exactly once, newest first', async () => {
    const tenantId = uniqueTenant('history-budget');
    // Matches on both sides of chunk and budget boundaries, and two in a row.
    const at = new Set([0, 1, 99, 100, 101, 1_000, 1_999, 2_000, 2_001, 2_500, 2_998, 2_999]);
    const seeded = await seedBusyHour(tenantId, BUSY, (index) => at.has(index));
    const expected = seeded
      .filter((delivery) => delivery.status === 'abandoned')
      .reverse()
      .map((delivery) => delivery.id);
    for (const limit of [1, 2, 5, 500]) {
      const { visited } = await pages({ tenantId, limit, status: 'abandoned' });
      expect(visited, `limit ${limit}`).toEqual(expected);
    }
    // Unfiltered pages are full: the budget never shortens a page that has matches to give.
    store.indexRows = 0;
    const full = await listDeliveries(store, { tenantId, limit: 500 }, RETENTION);
    expect(full.items.map((item) => item.id)).toEqual(
      [...seeded]
        .reverse()
        .slice(0, 500)
        .map((delivery) => delivery.id),
    );
    expect(store.indexRows).toBe(500);
  });

  it('an event with thousands of deliveries is paged within the budget too (eventId + status)', async () => {
    const tenantId = uniqueTenant('history-budget');
    const eventId = newId();
    const at = new Set([0, 1_500, 2_999]);
    const seeded = await seedBusyHour(tenantId, BUSY, (index) => at.has(index), eventId);
    const expected = seeded
      .filter((delivery) => delivery.status === 'abandoned')
      .reverse()
      .map((delivery) => delivery.id);
    for (const limit of [1, 2, 50]) {
      const { visited } = await pages({ tenantId, limit, eventId, status: 'abandoned' });
      expect(visited, `limit ${limit}`).toEqual(expected);
    }
    const { visited } = await pages({ tenantId, limit: 500, eventId });
    expect(visited).toEqual([...seeded].reverse().map((delivery) => delivery.id));
  });
});
