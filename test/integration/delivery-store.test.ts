// Contract of the Cassandra delivery store: a delivery's row moves only forward, whatever the clocks of the hosts
// that write it, and a finished delivery stays finished.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra, statementSender, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import type { Delivery, StoredEvent } from '../../core/deliveries/delivery.ts';
import { DeliveryStore } from '../../core/deliveries/delivery-store.ts';
import { WriteBatcher } from '../../core/write-batcher.ts';
import { testEnv } from '../support/harness.ts';

describe('DeliveryStore', () => {
  let db: CassandraClient;
  let store: DeliveryStore;

  beforeAll(async () => {
    const config = loadConfig(testEnv());
    db = await connectCassandra(config);
    store = new DeliveryStore(db, config.webhook.historyRetentionMs);
  });
  afterAll(() => db?.shutdown());

  const queued = (queuedAt: number): Delivery => ({
    tenantId: `tenant-${randomUUID().slice(0, 8)}`,
    id: randomUUID(),
    eventId: randomUUID(),
    eventType: 'purchaseOrder.validated',
    subscriptionId: randomUUID(),
    entityId: randomUUID(),
    status: 'queued',
    attemptCount: 0,
    lastStatusCode: null,
    lastErrorMessage: null,
    nextRetryAt: null,
    queuedAt: new Date(queuedAt),
    occurredAt: new Date(queuedAt).toISOString(),
    replayOf: null,
    signature: null,
    abandonReason: null,
  });

  const seriesOf = (delivery: Delivery) => ({
    tenantId: delivery.tenantId,
    deliveryId: delivery.id,
    queuedAt: delivery.queuedAt.getTime(),
  });

  /** The event a delivery was routed from, as the router stores it. */
  const eventOf = (delivery: Delivery): StoredEvent => ({
    tenantId: delivery.tenantId,
    eventId: delivery.eventId,
    eventType: delivery.eventType,
    occurredAt: delivery.occurredAt,
    entityId: delivery.entityId,
    reference: null,
    resourceUrl: `/CorePurchase/REST/PurchaseOrders/${delivery.entityId}`,
    payload: Buffer.from('{}'),
  });

  /** What the router writes for a new delivery, stamped as the router stamps it. */
  const route = (delivery: Delivery) =>
    store.createDeliveries(eventOf(delivery), [delivery], delivery.queuedAt.getTime());

  it('clock skew: an attempt recorded by a dispatcher whose clock is an hour behind the router still lands', async () => {
    // The router's clock is an hour ahead of this (the dispatcher's) host.
    const delivery = queued(Date.now() + 3_600_000);
    await route(delivery);
    await store.recordAttempt(
      seriesOf(delivery),
      { attempt: 1, at: new Date(), statusCode: 204, errorMessage: null, durationMs: 3 },
      { status: 'acknowledged', nextRetryAt: null },
    );
    expect(await store.get(delivery.tenantId, delivery.id)).toMatchObject({ status: 'acknowledged', attemptCount: 1 });
  });

  it("published beside its row: an attempt recorded before the router's row lands keeps its state, listed whole", async () => {
    const delivery = queued(Date.now() - 1_000);
    const other = sibling(delivery, delivery.queuedAt.getTime());
    // The router's event row and one delivery's row are stored; the other delivery was acknowledged before its own.
    await store.createDeliveries(eventOf(delivery), [other], delivery.queuedAt.getTime());
    await store.recordAttempt(
      seriesOf(delivery),
      { attempt: 1, at: new Date(), statusCode: 204, errorMessage: null, durationMs: 3 },
      { status: 'acknowledged', nextRetryAt: null },
    );
    // Routed again (its router crashed before the row was written): a row with only the attempt is not routed yet.
    expect(await store.routedBefore(delivery.tenantId, delivery.eventId, [delivery.id, other.id])).toEqual(
      new Map([[other.id, 'queued']]),
    );
    await route(delivery);
    expect(await store.routedBefore(delivery.tenantId, delivery.eventId, [delivery.id])).toEqual(
      new Map([[delivery.id, 'acknowledged']]),
    );
    expect(await store.get(delivery.tenantId, delivery.id)).toMatchObject({
      status: 'acknowledged',
      attemptCount: 1,
      lastStatusCode: 204,
      subscriptionId: delivery.subscriptionId,
      eventId: delivery.eventId,
      queuedAt: delivery.queuedAt,
    });
    const listed = (await store.eventIndex(delivery.tenantId, delivery.eventId, undefined, 10)).map(
      (entry) => entry.id,
    );
    expect(listed.sort()).toEqual([delivery.id, other.id].sort());
  });

  it('a finished delivery stays finished: a later duplicate of an attempt that fails cannot reopen it', async () => {
    const delivery = queued(Date.now() - 1_000);
    await route(delivery);
    await store.recordAttempt(
      seriesOf(delivery),
      { attempt: 1, at: new Date(), statusCode: 204, errorMessage: null, durationMs: 3 },
      { status: 'acknowledged', nextRetryAt: null },
    );
    // The router routes the event again after a restart, and the duplicate attempt fails.
    await route(delivery);
    await new Promise((resolve) => setTimeout(resolve, 5));
    await store.recordAttempt(
      seriesOf(delivery),
      { attempt: 1, at: new Date(), statusCode: 500, errorMessage: 'HTTP 500', durationMs: 3 },
      { status: 'retrying', nextRetryAt: new Date(Date.now() + 60_000) },
    );
    expect(await store.get(delivery.tenantId, delivery.id)).toMatchObject({ status: 'acknowledged', attemptCount: 1 });
  });

  it('abandonment hides the cause no more: the last attempt keeps its status code and error, the reason has its own field', async () => {
    const delivery = queued(Date.now() - 1_000);
    await route(delivery);
    await store.recordAttempt(
      seriesOf(delivery),
      { attempt: 1, at: new Date(), statusCode: 500, errorMessage: 'HTTP 500', durationMs: 3 },
      { status: 'retrying', nextRetryAt: null },
    );
    await store.finish(seriesOf(delivery), 'abandoned', 'delivery lifetime exceeded', 1);
    expect(await store.get(delivery.tenantId, delivery.id)).toMatchObject({
      status: 'abandoned',
      attemptCount: 1,
      lastStatusCode: 500,
      lastErrorMessage: 'HTTP 500',
      abandonReason: 'delivery lifetime exceeded',
      nextRetryAt: null,
    });
  });

  it('upgrade: a state written by the previous version at its host clock does not outrank a later attempt', async () => {
    const delivery = queued(Date.now() - 120_000);
    await route(delivery);
    // How the previous version recorded attempt 1: at the dispatcher's clock, a minute after the queue time.
    await db.execute(
      'UPDATE deliveries SET status = ?, attempt_count = ? WHERE tenant_id = ? AND id = ?',
      ['retrying', 1, delivery.tenantId, delivery.id],
      { prepare: true, timestamp: (Date.now() - 60_000) * 1000 },
    );
    await store.recordAttempt(
      seriesOf(delivery),
      { attempt: 2, at: new Date(), statusCode: 204, errorMessage: null, durationMs: 3 },
      { status: 'acknowledged', nextRetryAt: null },
    );
    expect(await store.get(delivery.tenantId, delivery.id)).toMatchObject({ status: 'acknowledged', attemptCount: 2 });
  });

  it('upgrade: attempts the previous version wrote to delivery_attempts are listed with those written since', async () => {
    const delivery = queued(Date.now() - 120_000);
    await route(delivery);
    const first = new Date(Date.now() - 60_000);
    // How the previous version recorded attempt 1: a row of its own beside the delivery row's update.
    await db.execute(
      `INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, at, status_code, error_message, duration_ms)
       VALUES (?, ?, ?, ?, ?, ?, ?)`,
      [delivery.tenantId, delivery.id, 1, first, 503, 'HTTP 503', 12],
      { prepare: true },
    );
    await store.recordAttempt(
      seriesOf(delivery),
      { attempt: 2, at: new Date(), statusCode: null, errorMessage: 'ECONNRESET: socket hang up', durationMs: 40 },
      { status: 'retrying', nextRetryAt: new Date(Date.now() + 60_000) },
    );
    await store.recordAttempt(
      seriesOf(delivery),
      { attempt: 3, at: new Date(), statusCode: 204, errorMessage: null, durationMs: 3 },
      { status: 'acknowledged', nextRetryAt: null },
    );
    const attempts = await store.attempts(delivery.tenantId, delivery.id);
    expect(attempts).toEqual([
      { attempt: 1, at: first, statusCode: 503, errorMessage: 'HTTP 503', durationMs: 12 },
      {
        attempt: 2,
        at: expect.any(Date),
        statusCode: null,
        errorMessage: 'ECONNRESET: socket hang up',
        durationMs: 40,
      },
      { attempt: 3, at: expect.any(Date), statusCode: 204, errorMessage: null, durationMs: 3 },
    ]);
    expect(await store.get(delivery.tenantId, delivery.id)).toMatchObject({
      status: 'acknowledged',
      attemptCount: 3,
      lastStatusCode: 204,
      lastErrorMessage: null,
    });
  });

  it('an attempt recorded twice (a duplicate record) is listed once', async () => {
    const delivery = queued(Date.now() - 1_000);
    await route(delivery);
    for (const statusCode of [500, 502]) {
      await store.recordAttempt(
        seriesOf(delivery),
        { attempt: 1, at: new Date(), statusCode, errorMessage: `HTTP ${statusCode}`, durationMs: 3 },
        { status: 'retrying', nextRetryAt: new Date(Date.now() + 60_000) },
      );
    }
    const attempts = await store.attempts(delivery.tenantId, delivery.id);
    // Both writes carry the same write time (write-time.ts): Cassandra keeps one of them, whichever value is greater.
    expect(attempts).toHaveLength(1);
    expect(attempts[0]).toMatchObject({ attempt: 1, statusCode: 502, errorMessage: 'HTTP 502' });
  });

  /** Another delivery series of the same event (another subscription, or a replay), queued at `queuedAt`. */
  const sibling = (delivery: Delivery, queuedAt: number, replayOf: string | null = null): Delivery => ({
    ...delivery,
    id: randomUUID(),
    subscriptionId: randomUUID(),
    queuedAt: new Date(queuedAt),
    replayOf,
  });

  it("upgrade: an event's deliveries the previous version listed in deliveries_by_event are listed with those since, newest first", async () => {
    const now = Date.now();
    const old = queued(now - 300_000);
    // How the previous version listed a delivery by event: a row of deliveries_by_event.
    await db.execute(
      'INSERT INTO deliveries_by_event (tenant_id, event_id, queued_at, delivery_id) VALUES (?, ?, ?, ?)',
      [old.tenantId, old.eventId, old.queuedAt, old.id],
      { prepare: true },
    );
    const routed = sibling(old, now - 200_000);
    await route(routed);
    const replayed = sibling(old, now - 100_000, routed.id);
    await store.insertDelivery(replayed);
    const ids = (entries: { id: string }[]) => entries.map((entry) => entry.id);

    expect(ids(await store.eventIndex(old.tenantId, old.eventId, undefined, 10))).toEqual([
      replayed.id,
      routed.id,
      old.id,
    ]);
    // Cursor paging over both sources: strictly older than the position, at most the limit.
    const first = await store.eventIndex(old.tenantId, old.eventId, undefined, 1);
    expect(ids(first)).toEqual([replayed.id]);
    expect(ids(await store.eventIndex(old.tenantId, old.eventId, first[0], 1))).toEqual([routed.id]);
    expect(
      ids(await store.eventIndex(old.tenantId, old.eventId, { queuedAt: routed.queuedAt, id: routed.id }, 5)),
    ).toEqual([old.id]);
    expect(await store.eventIndex(old.tenantId, old.eventId, { queuedAt: old.queuedAt, id: old.id }, 5)).toEqual([]);
  });

  it('routing an event again keeps the deliveries its first routing and its replays listed', async () => {
    const now = Date.now();
    const first = queued(now - 60_000);
    const second = sibling(first, now - 60_000);
    const event = eventOf(first);
    await store.createDeliveries(event, [first, second], now - 60_000);
    const replayed = sibling(first, now - 30_000, first.id);
    await store.insertDelivery(replayed);
    // Routed again after a crash: only a series not stored yet is new, and the event row is written again.
    const late = sibling(first, now - 60_000);
    await store.createDeliveries(event, [late], now - 60_000);
    const listed = (await store.eventIndex(first.tenantId, first.eventId, undefined, 10)).map((entry) => entry.id);
    expect(listed.sort()).toEqual([first.id, second.id, replayed.id, late.id].sort());
    expect(await store.getEvent(first.tenantId, first.eventId)).toMatchObject({ eventType: first.eventType });
  });

  it('an event published again later (a new source record) keeps the deliveries its first routing listed', async () => {
    const now = Date.now();
    const first = queued(now - 60_000);
    const event = eventOf(first);
    await store.createDeliveries(event, [first], now - 60_000);
    // The producer published the event again: a new record, a later write time, and one series not stored before.
    const late = sibling(first, now);
    await store.createDeliveries(event, [late], now);
    const listed = (await store.eventIndex(first.tenantId, first.eventId, undefined, 10)).map((entry) => entry.id);
    expect(listed.sort()).toEqual([first.id, late.id].sort());
  });

  it("an event row holding only a replay's delivery cell (the event's own cells expired) is no event", async () => {
    const delivery = queued(Date.now());
    await db.execute(
      'UPDATE events SET deliveries[?] = ? WHERE tenant_id = ? AND event_id = ?',
      [delivery.id, delivery.queuedAt, delivery.tenantId, delivery.eventId],
      { prepare: true },
    );
    expect(await store.getEvent(delivery.tenantId, delivery.eventId)).toBeUndefined();
    expect(await store.routedBefore(delivery.tenantId, delivery.eventId, [delivery.id])).toEqual(new Map());
    expect(
      (await store.eventIndex(delivery.tenantId, delivery.eventId, undefined, 5)).map((entry) => entry.id),
    ).toEqual([delivery.id]);
  });

  it("a subscription's and an event type's listings: only theirs, newest first, paged within the hour", async () => {
    const hourStart = Math.floor(Date.now() / 3_600_000) * 3_600_000;
    const base = queued(hourStart);
    const otherSubscription = randomUUID();
    // 30 deliveries of the subscription and 30 of another one in the same tenant and hour, routed out of order.
    const mine = Array.from({ length: 30 }, (_, index) => ({
      ...sibling(base, hourStart + index),
      subscriptionId: base.subscriptionId,
    }));
    const theirs = Array.from({ length: 30 }, (_, index) => ({
      ...sibling(base, hourStart + index),
      subscriptionId: otherSubscription,
      eventType: 'purchaseOrder.cancelled',
    }));
    for (const delivery of [...mine, ...theirs].sort(() => Math.random() - 0.5)) await route(delivery);
    const hour = hourStart / 3_600_000;
    const newest = [...mine].sort((a, b) => b.queuedAt.getTime() - a.queuedAt.getTime()).map((delivery) => delivery.id);
    const bySubscription = { table: 'subscription' as const, tenantId: base.tenantId, key: base.subscriptionId };

    const first = await store.indexPage(bySubscription, hour, undefined, 5);
    expect(first.map((entry) => entry.id)).toEqual(newest.slice(0, 5));
    const next = await store.indexPage(bySubscription, hour, first[4], 10);
    expect(next.map((entry) => entry.id)).toEqual(newest.slice(5, 15));
    const all = await store.indexPage(bySubscription, hour, undefined, 100);
    expect(all.map((entry) => entry.id)).toEqual(newest);

    const byType = { table: 'eventType' as const, tenantId: base.tenantId, key: 'purchaseOrder.cancelled' };
    expect((await store.indexPage(byType, hour, undefined, 100)).map((entry) => entry.id).sort()).toEqual(
      theirs.map((delivery) => delivery.id).sort(),
    );
    const byTenant = { table: 'tenant' as const, tenantId: base.tenantId };
    expect(await store.indexPage(byTenant, hour, undefined, 100)).toHaveLength(60);
  });

  it('upgrade: deliveries the previous version listed in deliveries_by_subscription and _by_event_type are listed with those since', async () => {
    const hourStart = Math.floor(Date.now() / 3_600_000) * 3_600_000;
    const old = queued(hourStart + 1_000);
    const hour = hourStart / 3_600_000;
    // How the previous version listed a delivery: a row in each filter's own table, none naming it in the tenant's.
    await db.execute(
      'INSERT INTO deliveries_by_subscription (tenant_id, subscription_id, hour, queued_at, delivery_id) VALUES (?, ?, ?, ?, ?)',
      [old.tenantId, old.subscriptionId, hour, old.queuedAt, old.id],
      { prepare: true },
    );
    await db.execute(
      'INSERT INTO deliveries_by_event_type (tenant_id, event_type, hour, queued_at, delivery_id) VALUES (?, ?, ?, ?, ?)',
      [old.tenantId, old.eventType, hour, old.queuedAt, old.id],
      { prepare: true },
    );
    const since = { ...sibling(old, hourStart + 2_000), subscriptionId: old.subscriptionId };
    await route(since);
    const bySubscription = { table: 'subscription' as const, tenantId: old.tenantId, key: old.subscriptionId };
    const byType = { table: 'eventType' as const, tenantId: old.tenantId, key: old.eventType };
    for (const index of [bySubscription, byType]) {
      expect((await store.indexPage(index, hour, undefined, 10)).map((entry) => entry.id)).toEqual([since.id, old.id]);
      const first = await store.indexPage(index, hour, undefined, 1);
      expect(first.map((entry) => entry.id)).toEqual([since.id]);
      expect((await store.indexPage(index, hour, first[0], 1)).map((entry) => entry.id)).toEqual([old.id]);
    }
  });

  it('a duplicate of the event queued again ten minutes later rolls nothing back', async () => {
    const delivery = queued(Date.now() - 600_000);
    await route(delivery);
    await store.recordAttempt(
      seriesOf(delivery),
      { attempt: 1, at: new Date(), statusCode: 204, errorMessage: null, durationMs: 3 },
      { status: 'acknowledged', nextRetryAt: null },
    );
    const again = { ...delivery, queuedAt: new Date() };
    await route(again);
    await store.recordAttempt(
      seriesOf(again),
      { attempt: 1, at: new Date(), statusCode: 500, errorMessage: 'HTTP 500', durationMs: 3 },
      { status: 'retrying', nextRetryAt: new Date(Date.now() + 60_000) },
    );
    expect(await store.get(delivery.tenantId, delivery.id)).toMatchObject({
      status: 'acknowledged',
      lastStatusCode: 204,
    });
  });

  it('writes that share one batched request keep their own write times: routing, attempts and the end of 40 deliveries', async () => {
    const deliveries = Array.from({ length: 40 }, (_, index) => queued(Date.now() - 60_000 + index));
    // All made in one turn: they ride together, the later states in the same requests as the queued rows they follow.
    await Promise.all(
      deliveries.flatMap((delivery, index) => [
        route(delivery),
        store.recordAttempt(
          seriesOf(delivery),
          { attempt: 1, at: new Date(), statusCode: 500, errorMessage: 'HTTP 500', durationMs: 3 },
          { status: 'retrying', nextRetryAt: new Date(Date.now() + 60_000) },
        ),
        index % 2 === 0
          ? store.finish(seriesOf(delivery), 'abandoned', 'delivery lifetime exceeded', 1)
          : store.recordAttempt(
              seriesOf(delivery),
              { attempt: 2, at: new Date(), statusCode: 204, errorMessage: null, durationMs: 3 },
              { status: 'acknowledged', nextRetryAt: null },
            ),
      ]),
    );
    const stored = await Promise.all(deliveries.map((delivery) => store.get(delivery.tenantId, delivery.id)));
    stored.forEach((delivery, index) =>
      expect(delivery).toMatchObject(
        index % 2 === 0
          ? { status: 'abandoned', attemptCount: 1, lastStatusCode: 500, eventId: deliveries[index]!.eventId }
          : { status: 'acknowledged', attemptCount: 2, lastStatusCode: 204, eventId: deliveries[index]!.eventId },
      ),
    );
    const attempts = await store.attempts(deliveries[1]!.tenantId, deliveries[1]!.id);
    expect(attempts.map((attempt) => attempt.statusCode)).toEqual([500, 204]);
  });

  it('a batch Cassandra refuses is sent again write by write: the good writes beside a bad one land', async () => {
    const batched = new WriteBatcher(statementSender(db));
    const tenantId = `tenant-${randomUUID().slice(0, 8)}`;
    const ids = [randomUUID(), randomUUID()];
    const insert = (id: string | null) => ({
      query: 'INSERT INTO deliveries (tenant_id, id, status) VALUES (?, ?, ?) USING TIMESTAMP ?',
      params: [tenantId, id, 'queued', Date.now() * 1000],
    });
    const outcomes = await Promise.allSettled([
      batched.write([insert(ids[0]!)]),
      batched.write([insert(null)]), // a null key: Cassandra refuses the whole batch
      batched.write([insert(ids[1]!)]),
    ]);
    expect(outcomes.map((outcome) => outcome.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(String((outcomes[1] as PromiseRejectedResult).reason)).toMatch(/null/i);
    for (const id of ids) expect(await store.get(tenantId, id)).toMatchObject({ status: 'queued' });
  });
});
