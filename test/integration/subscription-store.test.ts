// Contract of the Cassandra subscription store: secrets round-trip sealed, updates never roll back the dispatcher's
// fields and never bring a deleted subscription back, failure days count once per window.
import { blankSubscription } from '../../core/subscriptions/subscription.ts';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig, requireSecrets } from '../../core/config.ts';
import { SubscriptionStore } from '../../core/subscriptions/subscription-store.ts';
import { testEnv } from '../support/harness.ts';

describe('SubscriptionStore', () => {
  let db: CassandraClient;
  let store: SubscriptionStore;

  beforeAll(async () => {
    const config = loadConfig(testEnv());
    db = await connectCassandra(config);
    store = new SubscriptionStore(db, requireSecrets(config));
  });
  afterAll(() => db?.shutdown());

  const created = async () => {
    const subscription = {
      ...blankSubscription(`tenant-${randomUUID().slice(0, 8)}`, randomUUID(), new Date()),
      url: 'https://93.184.216.34/hooks',
      eventTypes: ['purchaseOrder.*'],
      authenticationMode: 'Hmac' as const,
      secrets: { hmacSecret: 'secret-0123456789abcdef' },
    };
    await store.save(subscription);
    return subscription;
  };

  it('round-trips every field, secrets included', async () => {
    const subscription = await created();
    expect(await store.get(subscription.tenantId, subscription.id)).toEqual(subscription);
    expect(await store.listByTenant(subscription.tenantId)).toEqual([subscription]);
  });

  it('stores a filter as its JSON document, and null for none', async () => {
    const filter = { 'payload.totalAmount': { $gte: '10000' }, $or: [{ entityId: 'po-1' }, { reference: null }] };
    const subscription = { ...(await created()), filter };
    expect(await store.update(subscription)).toBe(true);
    expect((await store.get(subscription.tenantId, subscription.id))?.filter).toEqual(filter);
    expect(await store.update({ ...subscription, filter: null })).toBe(true);
    expect((await store.get(subscription.tenantId, subscription.id))?.filter).toBeNull();
  });

  it('stores maxDeliveriesPerSecond; a row written without the column reads as null (unlimited)', async () => {
    const subscription = { ...(await created()), maxDeliveriesPerSecond: 25 };
    expect(await store.update(subscription)).toBe(true);
    expect((await store.get(subscription.tenantId, subscription.id))?.maxDeliveriesPerSecond).toBe(25);
    expect(await store.update({ ...subscription, maxDeliveriesPerSecond: null })).toBe(true);
    expect((await store.get(subscription.tenantId, subscription.id))?.maxDeliveriesPerSecond).toBeNull();

    // As a row from before migration 007: the column never written.
    const old = blankSubscription(`tenant-${randomUUID().slice(0, 8)}`, randomUUID(), new Date());
    await db.execute(
      `INSERT INTO subscriptions (tenant_id, id, url, event_types, authentication_mode, signature_header_name, status,
        failure_days, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      [
        old.tenantId,
        old.id,
        'https://93.184.216.34/hooks',
        ['purchaseOrder.*'],
        'None',
        'X-Webhook-Signature',
        'enabled',
        0,
        old.createdAt,
        old.updatedAt,
      ],
      { prepare: true },
    );
    expect((await store.get(old.tenantId, old.id))?.maxDeliveriesPerSecond).toBeNull();
  });

  it('an update made from a stale copy keeps the status and failure days set meanwhile', async () => {
    const stale = await created();
    expect(await store.recordFailureDay(stale.tenantId, stale.id, 86_400_000, 1)).toEqual({
      failureDays: 1,
      disabled: true,
      disabledNow: true,
    });
    expect(await store.update({ ...stale, url: 'https://93.184.216.34/new', updatedAt: new Date() })).toBe(true);
    expect(await store.get(stale.tenantId, stale.id)).toMatchObject({
      url: 'https://93.184.216.34/new',
      status: 'disabled',
      failureDays: 1,
    });
  });

  it('never brings a deleted subscription back', async () => {
    const subscription = await created();
    await store.delete(subscription.tenantId, subscription.id);
    expect(await store.update({ ...subscription, description: 'late PATCH' })).toBe(false);
    expect(await store.setStatus(subscription.tenantId, subscription.id, 'enabled', new Date())).toBe(false);
    expect(await store.get(subscription.tenantId, subscription.id)).toBeUndefined();
  });

  it('counts concurrent abandonments in one failure-day window once', async () => {
    const subscription = await created();
    const results = await Promise.all(
      Array.from({ length: 5 }, () => store.recordFailureDay(subscription.tenantId, subscription.id, 86_400_000, 10)),
    );
    expect(results.every((result) => result?.failureDays === 1)).toBe(true);
    await store.recordFailureDay(subscription.tenantId, subscription.id, 2 * 86_400_000, 10);
    expect(await store.get(subscription.tenantId, subscription.id)).toMatchObject({
      failureDays: 2,
      status: 'enabled',
    });
    expect(await store.setStatus(subscription.tenantId, subscription.id, 'enabled', new Date())).toBe(true);
    expect(await store.get(subscription.tenantId, subscription.id)).toMatchObject({ failureDays: 0 });
  });

  it('says disabledNow to the one count that disabled the subscription, of several in its window', async () => {
    const subscription = await created();
    await store.recordFailureDay(subscription.tenantId, subscription.id, 86_400_000, 2);
    const results = await Promise.all(
      Array.from({ length: 5 }, () =>
        store.recordFailureDay(subscription.tenantId, subscription.id, 2 * 86_400_000, 2),
      ),
    );
    expect(results.filter((result) => result?.disabledNow)).toHaveLength(1);
    expect(results.every((result) => result?.disabled && result.failureDays === 2)).toBe(true);
    expect((await store.recordFailureDay(subscription.tenantId, subscription.id, 3 * 86_400_000, 2))?.disabledNow).toBe(
      false,
    );
  });

  it('lists every subscription of a tenant across driver pages, and pages them for the API', async () => {
    const tenantId = `tenant-${randomUUID().slice(0, 8)}`;
    const ids = Array.from({ length: 1_005 }, () => randomUUID());
    for (let start = 0; start < ids.length; start += 100) {
      await Promise.all(
        ids.slice(start, start + 100).map((id) =>
          store.save({
            ...blankSubscription(tenantId, id, new Date()),
            url: 'https://93.184.216.34/h',
            eventTypes: ['a.b'],
          }),
        ),
      );
    }
    expect((await store.listByTenant(tenantId)).map((subscription) => subscription.id).sort()).toEqual([...ids].sort());

    const paged: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await store.pageByTenant(tenantId, 400, cursor);
      expect(page.items.length).toBeLessThanOrEqual(400);
      paged.push(...page.items.map((subscription) => subscription.id));
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    expect(paged.sort()).toEqual([...ids].sort());
    await expect(store.pageByTenant(tenantId, 10, 'AAAA')).rejects.toMatchObject({ code: 'INVALID_INPUT' });
  });

  it("moves a subscription's health by compare-and-set, and never brings a deleted one back", async () => {
    const subscription = await created();
    const { tenantId, id } = subscription;
    const since = new Date(Date.now() - 1_000);
    const failing = { failingSince: since, announced: true, announcedAt: since };
    expect(await store.setHealth(tenantId, id, null, failing)).toBe(true);
    expect(await store.setHealth(tenantId, id, null, failing)).toBe(false); // moved meanwhile: lost
    expect(await store.get(tenantId, id)).toMatchObject({
      failingSince: since,
      failingAnnounced: true,
      failingAnnouncedAt: since,
      url: subscription.url,
    });
    const healthy = { failingSince: null, announced: false, announcedAt: since };
    expect(await store.setHealth(tenantId, id, new Date(since.getTime() + 1), healthy)).toBe(false);
    expect(await store.setHealth(tenantId, id, since, healthy)).toBe(true);
    expect(await store.get(tenantId, id)).toMatchObject({ failingSince: null, failingAnnounced: false });

    await store.delete(tenantId, id);
    expect(await store.setHealth(tenantId, id, null, failing)).toBe(false);
    expect(await store.get(tenantId, id)).toBeUndefined();
  });
});
