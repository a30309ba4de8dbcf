import { describe, expect, it } from 'vitest';
import { HOUR } from '../core/deliveries/delivery-store.ts';
import type { Delivery, DeliveryStatus } from '../core/deliveries/delivery.ts';
import type { ReplayFilters } from '../core/replay-jobs/replay-job.ts';
import { FakeHistory } from '../test/support/replay-fakes.ts';
import { scanPage, type ScanLimits } from './replay-scan.ts';

const NOW = Date.UTC(2026, 2, 2, 12, 30);
const LIMITS: ScanLimits = { matches: 100, rows: 1_000, hours: 72 };

let serial = 0;
function delivery(fields: Partial<Delivery> & { ageMs: number }): Delivery {
  serial += 1;
  const { ageMs, ...rest } = fields;
  return {
    tenantId: 'tenant-a',
    id: `d-${String(serial).padStart(4, '0')}`,
    eventId: `e-${serial}`,
    eventType: 'purchaseOrder.validated',
    subscriptionId: 'sub-1',
    entityId: 'po-1',
    status: 'abandoned',
    attemptCount: 3,
    lastStatusCode: 500,
    lastErrorMessage: 'HTTP 500',
    nextRetryAt: null,
    queuedAt: new Date(NOW - ageMs),
    occurredAt: new Date(NOW - ageMs).toISOString(),
    replayOf: null,
    signature: null,
    ...rest,
  };
}

/** Every match of a scan, page after page, and the pages it took. */
async function scanAll(
  history: FakeHistory,
  filters: ReplayFilters,
  bounds: { lower: number; upper: number },
  limits: ScanLimits = LIMITS,
  keep: (delivery: Delivery) => boolean = () => true,
) {
  const found: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const page: { matches: Delivery[]; cursor: string | null } = await scanPage(
      history,
      'tenant-a',
      filters,
      bounds,
      cursor,
      limits,
      keep,
    );
    found.push(...page.matches.map((match) => match.id));
    cursor = page.cursor;
    pages += 1;
    expect(pages).toBeLessThan(1_000);
  } while (cursor !== null);
  return { found, pages };
}

const newestFirst = (deliveries: Delivery[]) =>
  [...deliveries]
    .sort((a, b) => b.queuedAt.getTime() - a.queuedAt.getTime() || (a.id < b.id ? 1 : -1))
    .map((entry) => entry.id);

describe('replay scan', () => {
  const history = new FakeHistory();
  const statuses: DeliveryStatus[] = ['abandoned', 'acknowledged', 'retrying', 'superseded'];
  const all = [0, 1, 2, 5, 1_000, 30 * 60_000, 2 * HOUR, 2 * HOUR, 5 * HOUR, 30 * HOUR, 100 * HOUR, 800 * HOUR].map(
    (ageMs, index) =>
      delivery({
        ageMs: ageMs + 1,
        status: statuses[index % statuses.length]!,
        subscriptionId: index % 3 === 0 ? 'sub-2' : 'sub-1',
        eventType: index % 2 === 0 ? 'purchaseOrder.cancelled' : 'purchaseOrder.validated',
      }),
  );
  history.add(...all);
  // Another tenant's history is never read, whatever its filters' values.
  history.add(delivery({ ageMs: 10, tenantId: 'tenant-b' }), delivery({ ageMs: 2 * HOUR, tenantId: 'tenant-b' }));
  const everything = { lower: NOW - 1_000 * HOUR, upper: NOW };

  it('visits every delivery of the range once, newest first, whatever the page size', async () => {
    for (const matches of [1, 2, 3, 100]) {
      const { found } = await scanAll(history, {}, everything, { ...LIMITS, matches });
      expect(found).toEqual(newestFirst(all));
    }
  });

  it.each([
    ['subscriptionId', { subscriptionId: 'sub-2' }, (d: Delivery) => d.subscriptionId === 'sub-2'],
    ['status', { status: 'abandoned' as const }, (d: Delivery) => d.status === 'abandoned'],
    [
      'one event type',
      { eventTypes: ['purchaseOrder.validated'] },
      (d: Delivery) => d.eventType === 'purchaseOrder.validated',
    ],
    ['a wildcard', { eventTypes: ['purchaseOrder.*'] }, () => true],
    ['other segments', { eventTypes: ['*.validated', 'nope.x'] }, (d: Delivery) => d.eventType.endsWith('.validated')],
    [
      'several at once',
      { subscriptionId: 'sub-1', status: 'acknowledged' as const, eventTypes: ['purchaseOrder.validated'] },
      (d: Delivery) =>
        d.subscriptionId === 'sub-1' && d.status === 'acknowledged' && d.eventType === 'purchaseOrder.validated',
    ],
  ])('matches only what %s selects', async (_name, filters: ReplayFilters, keep) => {
    const { found } = await scanAll(history, filters, everything, { ...LIMITS, matches: 2 });
    expect(found).toEqual(newestFirst(all.filter(keep)));
  });

  it('keeps to [lower, upper): upper exclusive, lower inclusive', async () => {
    const inside = all.filter((d) => d.queuedAt.getTime() >= NOW - 30 * HOUR - 1 && d.queuedAt.getTime() < NOW - 1);
    const { found } = await scanAll(history, {}, { lower: NOW - 30 * HOUR - 1, upper: NOW - 1 });
    expect(found).toEqual(newestFirst(inside));
    expect(found).not.toContain(all[0]!.id); // queued at NOW - 1: at upper itself
    expect(found).toContain(all[9]!.id); // queued at NOW - 30 h - 1: at lower itself
    expect((await scanAll(history, {}, { lower: NOW, upper: NOW - HOUR })).found).toEqual([]);
  });

  it('leaves out what `keep` refuses (a job its own replays)', async () => {
    const { found } = await scanAll(history, {}, everything, LIMITS, (d) => d.id !== all[3]!.id);
    expect(found).toEqual(newestFirst(all).filter((id) => id !== all[3]!.id));
  });

  it('spreads a sparse history over pages by its hour and row budgets, never reading a page past them', async () => {
    const { found, pages } = await scanAll(history, {}, everything, { matches: 100, rows: 3, hours: 24 });
    expect(found).toEqual(newestFirst(all));
    expect(pages).toBeGreaterThan(1_000 / 24);
    history.queries.length = 0;
    const page = await scanPage(
      history,
      'tenant-a',
      {},
      everything,
      null,
      { matches: 100, rows: 3, hours: 24 },
      () => true,
    );
    expect(page.matches.length).toBeLessThanOrEqual(3);
    expect(history.queries.reduce((sum, query) => sum + query.limit, 0)).toBeLessThanOrEqual(3);
    expect(new Set(history.queries.map((query) => query.hour)).size).toBeLessThanOrEqual(24);
  });

  it('reads the index of the subscription, or of a single exact event type, else the tenant', async () => {
    const tables = async (filters: ReplayFilters) => {
      history.queries.length = 0;
      await scanPage(history, 'tenant-a', filters, everything, null, LIMITS, () => true);
      return [...new Set(history.queries.map((query) => query.table))];
    };
    expect(await tables({ subscriptionId: 'sub-1', eventTypes: ['purchaseOrder.validated'] })).toEqual([
      'subscription',
    ]);
    expect(await tables({ eventTypes: ['purchaseOrder.validated'] })).toEqual(['eventType']);
    expect(await tables({ eventTypes: ['purchaseOrder.*'] })).toEqual(['tenant']);
    expect(await tables({ status: 'abandoned' })).toEqual(['tenant']);
  });

  it('refuses a cursor it did not make', async () => {
    await expect(
      scanPage(history, 'tenant-a', {}, everything, 'bm90LWEtY3Vyc29y', LIMITS, () => true),
    ).rejects.toThrow();
  });
});
