import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Logger } from './log.ts';
import { deliveryAbandoned, subscriptionChanged, type OperationalEvent } from './operational-events.ts';
import {
  OperationalOutbox,
  PENDING_SHARDS,
  type OperationalCheck,
  type PendingEvent,
  type PendingEvents,
} from './operational-outbox.ts';
import { blankSubscription } from './subscriptions/subscription.ts';

const NOW = Date.UTC(2026, 0, 6, 10, 0, 0);
const SETTLE_MS = 60_000;

const keyOf = (row: Pick<PendingEvent, 'shard' | 'writtenAt' | 'event'>) =>
  `${row.shard}|${row.writtenAt}|${row.event.eventId}`;

/** Pending events in a Map, with a log of what was done to it (shared with the fake publish). */
function fakePending(log: string[]) {
  const rows = new Map<string, PendingEvent>();
  const pending = {
    rows,
    put: vi.fn(async (row: PendingEvent) => {
      log.push(`put ${row.event.eventId}`);
      rows.set(keyOf(row), row);
    }),
    remove: vi.fn(async (row: Pick<PendingEvent, 'shard' | 'writtenAt' | 'event'>) => {
      log.push(`remove ${row.event.eventId}`);
      rows.delete(keyOf(row));
    }),
    olderThan: vi.fn(async (shard: number, before: number, limit: number) =>
      [...rows.values()]
        .filter((row) => row.shard === shard && row.writtenAt < before)
        .sort((a, b) => a.writtenAt - b.writtenAt)
        .slice(0, limit),
    ),
  } satisfies PendingEvents & { rows: Map<string, PendingEvent> };
  return pending;
}

function fakeLogger() {
  return { info: vi.fn(), warn: vi.fn(), error: vi.fn(), debug: vi.fn() };
}

function setup(options: { publishTimeoutMs?: number; verify?: (check: OperationalCheck) => Promise<boolean> } = {}) {
  const log: string[] = [];
  const clock = { now: NOW };
  const pending = fakePending(log);
  const published: { events: OperationalEvent[]; mayBeDuplicate: boolean }[] = [];
  const publish = vi.fn(async (events: OperationalEvent[], mayBeDuplicate: boolean) => {
    log.push(`publish ${events.map((event) => event.eventId).join(',')}`);
    published.push({ events, mayBeDuplicate });
  });
  const verify = vi.fn(options.verify ?? (async () => true));
  const logger = fakeLogger();
  const outbox = new OperationalOutbox({
    pending,
    publish,
    verify,
    logger: logger as unknown as Logger,
    publishTimeoutMs: options.publishTimeoutMs ?? 1_000,
    settleMs: SETTLE_MS,
    now: () => clock.now,
  });
  return { log, clock, pending, published, publish, verify, logger, outbox };
}

const subscription = blankSubscription('tenant-a', 'sub-1', new Date(NOW));
const created = subscriptionChanged('created', subscription, new Date(NOW));
const createdCheck: OperationalCheck = {
  kind: 'subscription-exists',
  tenantId: 'tenant-a',
  subscriptionId: 'sub-1',
  since: NOW,
};

const abandonedEvent = (deliveryId: string) =>
  deliveryAbandoned(
    'tenant-a',
    {
      deliveryId,
      subscriptionId: 'sub-1',
      eventId: 'evt-1',
      eventType: 'purchaseOrder.validated',
      entityId: 'po-1',
      attempts: 10,
    },
    'retries exhausted',
    null,
    new Date(NOW),
    0,
  );
const abandonedCheck = (deliveryId: string): OperationalCheck => ({
  kind: 'delivery-abandoned',
  tenantId: 'tenant-a',
  deliveryId,
});

/** An event whose id puts it in `shard` (the shard is its id's first byte, modulo PENDING_SHARDS). */
const inShard = (event: OperationalEvent, shard: number): OperationalEvent => ({
  ...event,
  eventId: `${(PENDING_SHARDS * 3 + shard).toString(16).padStart(2, '0')}${event.eventId.slice(2)}`,
});

afterEach(() => {
  vi.useRealTimers();
});

describe('OperationalOutbox.intend', () => {
  it('writes the event down as pending, in its shard, before anything is published', async () => {
    const t = setup();
    const intent = await t.outbox.intend(created, createdCheck);
    expect(t.publish).not.toHaveBeenCalled();
    expect([...t.pending.rows.values()]).toEqual([
      {
        shard: parseInt(created.eventId.slice(0, 2), 16) % PENDING_SHARDS,
        writtenAt: NOW,
        event: created,
        check: createdCheck,
      },
    ]);
    await intent.raise();
    expect(t.log).toEqual([`put ${created.eventId}`, `publish ${created.eventId}`, `remove ${created.eventId}`]);
  });

  it('spreads events over the shards by their id', async () => {
    const t = setup();
    for (let shard = 0; shard < PENDING_SHARDS; shard += 1)
      await t.outbox.intend(inShard(abandonedEvent(`del-${shard}`), shard), abandonedCheck(`del-${shard}`));
    expect([...t.pending.rows.values()].map((row) => row.shard)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('throws when the event could not be written down, and publishes nothing', async () => {
    const t = setup();
    t.pending.put.mockRejectedValueOnce(new Error('Cassandra unavailable'));
    await expect(t.outbox.intend(created, createdCheck)).rejects.toThrow('Cassandra unavailable');
    expect(t.publish).not.toHaveBeenCalled();
    expect(t.pending.rows.size).toBe(0);
  });
});

describe('Intent.raise', () => {
  it('publishes the event as no duplicate, then forgets it', async () => {
    const t = setup();
    const intent = await t.outbox.intend(created, createdCheck);
    await intent.raise();
    expect(t.published).toEqual([{ events: [created], mayBeDuplicate: false }]);
    expect(t.pending.rows.size).toBe(0);
    expect(t.pending.remove).toHaveBeenCalledWith(expect.objectContaining({ writtenAt: NOW, event: created }));
  });

  it('leaves the row to the sweep, without throwing, when publishing fails', async () => {
    const t = setup();
    t.publish.mockRejectedValueOnce(new Error('broker down'));
    const intent = await t.outbox.intend(created, createdCheck);
    await expect(intent.raise()).resolves.toBeUndefined();
    expect(t.pending.rows.size).toBe(1);
    expect(t.pending.remove).not.toHaveBeenCalled();
    expect(t.logger.warn).toHaveBeenCalledWith(
      expect.objectContaining({ eventId: created.eventId, eventType: 'subscription.created' }),
      expect.stringContaining('sweep'),
    );
  });

  it('gives up waiting for Kafka after publishTimeoutMs, leaving the row', async () => {
    vi.useFakeTimers();
    const t = setup({ publishTimeoutMs: 20 });
    t.publish.mockImplementationOnce(() => new Promise<void>(() => undefined));
    const intent = await t.outbox.intend(created, createdCheck);
    let settled = false;
    const raising = intent.raise().then(() => (settled = true));
    await vi.advanceTimersByTimeAsync(19);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(settled).toBe(true);
    await raising;
    expect(t.pending.rows.size).toBe(1);
    expect(t.pending.remove).not.toHaveBeenCalled();
    expect(t.logger.warn).toHaveBeenCalledWith(
      expect.objectContaining({ eventId: created.eventId, err: expect.any(Error) }),
      expect.any(String),
    );
  });

  it('gives up on a hanging publish with real timers too', async () => {
    const t = setup({ publishTimeoutMs: 20 });
    t.publish.mockImplementationOnce(() => new Promise<void>(() => undefined));
    const intent = await t.outbox.intend(created, createdCheck);
    await expect(intent.raise()).resolves.toBeUndefined();
    expect(t.pending.rows.size).toBe(1);
  });

  it('does not throw when the row cannot be removed after publishing (the sweep raises it again at worst)', async () => {
    const t = setup();
    t.pending.remove.mockRejectedValueOnce(new Error('write timeout'));
    const intent = await t.outbox.intend(created, createdCheck);
    await expect(intent.raise()).resolves.toBeUndefined();
    expect(t.published).toHaveLength(1);
    expect(t.logger.warn).toHaveBeenCalledWith(
      expect.objectContaining({ eventId: created.eventId }),
      expect.stringContaining('not removed'),
    );
  });
});

describe('Intent.cancel', () => {
  it('forgets the event without publishing it', async () => {
    const t = setup();
    const intent = await t.outbox.intend(created, createdCheck);
    await intent.cancel();
    expect(t.pending.rows.size).toBe(0);
    expect(t.publish).not.toHaveBeenCalled();
    // Swept later: nothing left to raise.
    t.clock.now += 2 * SETTLE_MS;
    expect(await t.outbox.sweep()).toBe(0);
    expect(t.publish).not.toHaveBeenCalled();
  });

  it('does not throw when the row cannot be removed', async () => {
    const t = setup();
    t.pending.remove.mockRejectedValueOnce(new Error('write timeout'));
    const intent = await t.outbox.intend(created, createdCheck);
    await expect(intent.cancel()).resolves.toBeUndefined();
    expect(t.publish).not.toHaveBeenCalled();
    expect(t.pending.rows.size).toBe(1);
  });
});

describe('OperationalOutbox.sweep', () => {
  it('takes only rows older than the settling time; raises the verified ones as possible duplicates, drops the others', async () => {
    const made = new Set(['del-old-made']);
    const t = setup({
      verify: async (check) => check.kind === 'delivery-abandoned' && made.has(check.deliveryId),
    });
    const events = {
      madeOld: abandonedEvent('del-old-made'),
      notMadeOld: abandonedEvent('del-old-not-made'),
      young: abandonedEvent('del-young'),
    };
    t.clock.now = NOW - SETTLE_MS - 10_000;
    await t.outbox.intend(events.madeOld, abandonedCheck('del-old-made'));
    await t.outbox.intend(events.notMadeOld, abandonedCheck('del-old-not-made'));
    t.clock.now = NOW - 10_000;
    await t.outbox.intend(events.young, abandonedCheck('del-young'));
    t.clock.now = NOW;

    expect(await t.outbox.sweep()).toBe(1);
    expect(t.published).toEqual([{ events: [events.madeOld], mayBeDuplicate: true }]);
    expect(t.verify).toHaveBeenCalledTimes(2);
    expect(t.verify).not.toHaveBeenCalledWith(abandonedCheck('del-young'));
    expect([...t.pending.rows.values()].map((row) => row.event)).toEqual([events.young]);
    for (let shard = 0; shard < PENDING_SHARDS; shard += 1)
      expect(t.pending.olderThan).toHaveBeenCalledWith(shard, NOW - SETTLE_MS, 200);
    // Published before it was removed.
    const madeId = events.madeOld.eventId;
    expect(t.log.indexOf(`publish ${madeId}`)).toBeLessThan(t.log.indexOf(`remove ${madeId}`));
    expect(t.log).toContain(`remove ${events.notMadeOld.eventId}`);

    // The young one once it has settled.
    t.clock.now = NOW + SETTLE_MS;
    made.add('del-young');
    expect(await t.outbox.sweep()).toBe(1);
    expect(t.published[1]).toEqual({ events: [events.young], mayBeDuplicate: true });
    expect(t.pending.rows.size).toBe(0);
  });

  it('takes a row written exactly settleMs ago only once it is older', async () => {
    const t = setup();
    t.clock.now = NOW - SETTLE_MS;
    await t.outbox.intend(created, createdCheck);
    t.clock.now = NOW;
    expect(await t.outbox.sweep()).toBe(0);
    expect(t.pending.rows.size).toBe(1);
    t.clock.now = NOW + 1;
    expect(await t.outbox.sweep()).toBe(1);
    expect(t.pending.rows.size).toBe(0);
  });

  it('pages through a shard of more than 200 rows, raising every one', async () => {
    const t = setup();
    t.clock.now = NOW - 2 * SETTLE_MS;
    const ids: string[] = [];
    for (let i = 0; i < 450; i += 1) {
      const event = inShard(abandonedEvent(`del-${i}`), 5);
      ids.push(event.eventId);
      t.clock.now += 1;
      await t.outbox.intend(event, abandonedCheck(`del-${i}`));
    }
    // And a few in another shard.
    for (let i = 0; i < 3; i += 1) await t.outbox.intend(inShard(abandonedEvent(`other-${i}`), 2), abandonedCheck('x'));
    t.clock.now = NOW;

    expect(await t.outbox.sweep()).toBe(453);
    const publishedIds = t.published.flatMap((call) => call.events.map((event) => event.eventId));
    expect(new Set(publishedIds).size).toBe(453);
    for (const id of ids) expect(publishedIds).toContain(id);
    expect(t.published.every((call) => call.mayBeDuplicate)).toBe(true);
    expect(t.pending.rows.size).toBe(0);
    // Shard 5 read in pages of 200 until one came back short: 200, 200, 50.
    const shard5 = t.pending.olderThan.mock.calls.filter(([shard]) => shard === 5);
    expect(shard5).toHaveLength(3);
    expect(shard5.every(([, before, limit]) => before === NOW - SETTLE_MS && limit === 200)).toBe(true);
  });

  it('stops and throws when a publish fails, leaving that row and the rest for the next sweep', async () => {
    const t = setup();
    t.clock.now = NOW - 2 * SETTLE_MS;
    const first = inShard(abandonedEvent('del-1'), 0);
    const second = inShard(abandonedEvent('del-2'), 0);
    await t.outbox.intend(first, abandonedCheck('del-1'));
    t.clock.now += 1;
    await t.outbox.intend(second, abandonedCheck('del-2'));
    t.clock.now = NOW;
    t.publish.mockRejectedValueOnce(new Error('broker down'));
    await expect(t.outbox.sweep()).rejects.toThrow('broker down');
    expect(t.pending.rows.size).toBe(2);
    expect(await t.outbox.sweep()).toBe(2);
    expect(t.pending.rows.size).toBe(0);
  });
});

describe('OperationalOutbox.run', () => {
  it('sweeps every interval until aborted, logging a failed sweep instead of stopping', async () => {
    vi.useFakeTimers();
    const t = setup();
    const stop = new AbortController();
    t.pending.olderThan.mockRejectedValueOnce(new Error('Cassandra unavailable'));
    const running = t.outbox.run(stop.signal, 1_000);
    await vi.advanceTimersByTimeAsync(999);
    expect(t.pending.olderThan).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(1);
    expect(t.logger.warn).toHaveBeenCalledWith(expect.objectContaining({ err: expect.any(Error) }), expect.any(String));
    await vi.advanceTimersByTimeAsync(1_000);
    // The second sweep read all eight shards.
    expect(t.pending.olderThan).toHaveBeenCalledTimes(1 + PENDING_SHARDS);
    stop.abort();
    await running;
    await vi.advanceTimersByTimeAsync(5_000);
    expect(t.pending.olderThan).toHaveBeenCalledTimes(1 + PENDING_SHARDS);
  });
});
