// Contract of the entity-order rows on real Cassandra: the pending deliveries of an entity in their events' order, the
// waiting mark, and a deletion that no routing of the same event revives, whatever the router's clock.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import type { DeliveryRecord } from '../../core/deliveries/delivery-record.ts';
import { DeliveryStore } from '../../core/deliveries/delivery-store.ts';
import { EntityOrderStore, orderKeyOf } from '../../core/deliveries/entity-order.ts';
import { testEnv } from '../support/harness.ts';

describe('EntityOrderStore', () => {
  let db: CassandraClient;
  let deliveries: DeliveryStore;
  let order: EntityOrderStore;

  beforeAll(async () => {
    const config = loadConfig(testEnv());
    db = await connectCassandra(config);
    deliveries = new DeliveryStore(db, config.webhook.historyRetentionMs);
    order = new EntityOrderStore(db);
  });
  afterAll(() => db?.shutdown());

  const entity = () => ({
    tenantId: `tenant-${randomUUID().slice(0, 8)}`,
    subscriptionId: randomUUID(),
    entityId: randomUUID(),
  });
  const record = (key: ReturnType<typeof entity>, seq: number, queuedAt = Date.now()) =>
    ({
      ...key,
      deliveryId: randomUUID(),
      eventId: randomUUID(),
      eventType: 'purchaseOrder.validated',
      occurredAt: new Date(queuedAt).toISOString(),
      queuedAt,
      attempt: 1,
      dueAt: 0,
      envelope: Buffer.from('{"payload":{"total":"12.50"}}'),
      signature: 'c2ln',
      replayOf: null,
      routedAt: queuedAt + 3,
      subscriptionVersion: 1_700_000_000_000,
      orderSeq: seq,
    }) satisfies DeliveryRecord & { orderSeq: number };

  const rowOf = (delivery: ReturnType<typeof record>) => ({
    seq: delivery.orderSeq,
    deliveryId: delivery.deliveryId,
    queuedAt: delivery.queuedAt,
  });

  it("lists an entity's pending deliveries by their events' offsets, with the records as routed", async () => {
    const key = entity();
    const [late, early, middle] = [record(key, 300), record(key, 7), record(key, 42)];
    await deliveries.enqueueOrdered([late], late.queuedAt);
    await deliveries.enqueueOrdered([early, middle], early.queuedAt);
    const rows = await order.first(key, 10);
    expect(rows.map((row) => row.seq)).toEqual([7, 42, 300]);
    expect(rows[0]).toMatchObject({ seq: 7, deliveryId: early.deliveryId, waiting: false });
    expect(rows[0]!.record).toEqual(early);
    // Without the records (a first look): the places and marks only.
    const bare = await order.first(key, 2, false);
    expect(bare.map((row) => [row.seq, row.record])).toEqual([
      [7, undefined],
      [42, undefined],
    ]);
    // One row's record alone (an end that finds the next delivery waiting), none once the row is gone.
    expect(await order.record(key, { seq: 42, deliveryId: middle.deliveryId })).toEqual(middle);
    expect(await order.record(key, { seq: 43, deliveryId: middle.deliveryId })).toBeUndefined();
    // Another entity of the same subscription is another partition.
    expect(await order.first({ ...key, entityId: randomUUID() }, 10)).toEqual([]);
  });

  it('marks a delivery waiting, and deletes it for good: routing its event again does not bring it back', async () => {
    const key = entity();
    const first = record(key, 1);
    const second = record(key, 2);
    await deliveries.enqueueOrdered([first, second], first.queuedAt);
    await order.markWaiting(key, rowOf(second));
    expect((await order.first(key, 2)).map((row) => row.waiting)).toEqual([false, true]);
    await order.remove(key, rowOf(first));
    await deliveries.enqueueOrdered([first], first.queuedAt);
    expect((await order.first(key, 5)).map((row) => row.deliveryId)).toEqual([second.deliveryId]);
  });

  it('lists no row for a waiting mark written after its delivery ended (a copy handled elsewhere, or in the same ms)', async () => {
    // The mark is an UPDATE: stamped after the row's deletion, its one cell alone would make the row visible again, a
    // pending delivery without a record that the next one of its entity waits for, and that no end ever releases.
    const key = entity();
    const [ended, next] = [record(key, 1), record(key, 2)];
    await deliveries.enqueueOrdered([ended, next], ended.queuedAt);
    await order.remove(key, rowOf(ended));
    await order.markWaiting(key, rowOf(ended));
    await order.markWaiting(key, rowOf(next));
    // The first look (the head alone, as the end of a delivery reads it) finds the waiting delivery after it.
    expect((await order.first(key, 1, false)).map((row) => [row.deliveryId, row.waiting])).toEqual([
      [next.deliveryId, true],
    ]);
    expect((await order.first(key, 4)).map((row) => row.deliveryId)).toEqual([next.deliveryId]);
    expect(await order.record(key, rowOf(ended))).toBeUndefined();
  });

  it("deletes a row stamped by a router whose clock runs ahead of the dispatcher's", async () => {
    const key = entity();
    const ahead = record(key, 5, Date.now() + 60_000);
    await deliveries.enqueueOrdered([ahead], ahead.queuedAt);
    await order.remove(orderKeyOf(ahead), rowOf(ahead));
    expect(await order.first(key, 5)).toEqual([]);
  });

  it("tells a series' next retry time with its state (the gate supersedes only between attempts)", async () => {
    const key = entity();
    const delivery = record(key, 1);
    const series = { tenantId: key.tenantId, deliveryId: delivery.deliveryId, queuedAt: delivery.queuedAt };
    const nextRetryAt = new Date(Date.now() + 120_000);
    await deliveries.recordAttempt(
      series,
      { attempt: 1, at: new Date(), statusCode: 503, errorMessage: 'HTTP 503', durationMs: 12 },
      { status: 'retrying', nextRetryAt },
    );
    expect(await deliveries.state(key.tenantId, delivery.deliveryId)).toEqual({
      status: 'retrying',
      attemptCount: 1,
      nextRetryAt,
    });
  });
});
