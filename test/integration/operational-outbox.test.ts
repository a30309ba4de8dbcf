// The operational events outbox against real Cassandra, a crash at each point of a change: an event written down and
// its change never made is dropped by the sweep; one whose change was made but which was never published is raised by
// the sweep as a possible duplicate; one raised normally leaves nothing behind. The pending row keeps the event whole.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig, requireSecrets } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { subscriptionChanged, type OperationalEvent } from '../../core/operational-events.ts';
import { CassandraPendingEvents, OperationalOutbox, PENDING_SHARDS } from '../../core/operational-outbox.ts';
import { changeMade } from '../../core/operational-service.ts';
import { blankSubscription } from '../../core/subscriptions/subscription.ts';
import { SubscriptionStore } from '../../core/subscriptions/subscription-store.ts';
import { testEnv } from '../support/harness.ts';

describe('operational events outbox', () => {
  let db: CassandraClient;
  let subscriptions: SubscriptionStore;
  let pending: CassandraPendingEvents;
  const published: { event: OperationalEvent; mayBeDuplicate: boolean }[] = [];
  let clock = Date.now();
  let outbox: OperationalOutbox;
  const tenantId = `ops-outbox-${randomUUID().slice(0, 8)}`;

  beforeAll(async () => {
    const config = loadConfig(testEnv());
    db = await connectCassandra(config);
    subscriptions = new SubscriptionStore(db, requireSecrets(config));
    pending = new CassandraPendingEvents(db);
    outbox = new OperationalOutbox({
      pending,
      publish: async (events, mayBeDuplicate) => {
        for (const event of events) published.push({ event, mayBeDuplicate });
      },
      verify: (check) =>
        changeMade(check, {
          subscription: (tenant, id) => subscriptions.get(tenant, id),
          deliveryStatus: async () => undefined,
        }),
      logger: createLogger('test', 'silent'),
      publishTimeoutMs: 1_000,
      settleMs: 60_000,
      now: () => clock,
    });
  });
  afterAll(() => db?.shutdown());

  /** This test's events among those published (other files' gateways share the keyspace's table). */
  const ours = () => published.filter(({ event }) => event.tenantId === tenantId);
  const pendingOf = async (eventId: string) => {
    const rows = [];
    for (let shard = 0; shard < PENDING_SHARDS; shard += 1)
      rows.push(...(await pending.olderThan(shard, clock + 1, 5_000)));
    return rows.filter((row) => row.event.eventId === eventId);
  };

  const subscription = () => ({
    ...blankSubscription(tenantId, randomUUID(), new Date(clock)),
    url: 'https://93.184.216.34/hooks',
    eventTypes: ['purchaseOrder.*'],
  });

  it('keeps a pending event whole until it is raised, then forgets it', async () => {
    const created = subscription();
    const event = subscriptionChanged('created', created, created.createdAt);
    const check = { kind: 'subscription-exists', tenantId, subscriptionId: created.id, since: clock } as const;
    const intent = await outbox.intend(event, check);
    const [row] = await pendingOf(event.eventId);
    expect(row).toMatchObject({ event: { ...event, payload: event.payload }, check });
    expect(row!.event.payload.equals(event.payload)).toBe(true);
    await subscriptions.save(created);
    await intent.raise();
    expect(ours()).toEqual([{ event: row!.event, mayBeDuplicate: false }]);
    expect(await pendingOf(event.eventId)).toEqual([]);
  });

  it('sweeps: raises, as a possible duplicate, an event whose change was made; drops one whose change was not', async () => {
    published.length = 0;
    // Crashed after the change, before the publication.
    const stored = subscription();
    const raised = subscriptionChanged('created', stored, stored.createdAt);
    await outbox.intend(raised, { kind: 'subscription-exists', tenantId, subscriptionId: stored.id, since: clock });
    await subscriptions.save(stored);
    // Crashed before the change.
    const never = subscription();
    const dropped = subscriptionChanged('created', never, never.createdAt);
    await outbox.intend(dropped, { kind: 'subscription-exists', tenantId, subscriptionId: never.id, since: clock });

    await outbox.sweep();
    expect(ours()).toEqual([]); // neither has settled yet
    expect(await pendingOf(raised.eventId)).toHaveLength(1);

    clock += 60_001;
    await outbox.sweep();
    expect(ours().map(({ event, mayBeDuplicate }) => [event.eventId, mayBeDuplicate])).toEqual([
      [raised.eventId, true],
    ]);
    expect(await pendingOf(raised.eventId)).toEqual([]);
    expect(await pendingOf(dropped.eventId)).toEqual([]);
  });

  it('checks a deletion and an update against the stored subscription', async () => {
    published.length = 0;
    const kept = subscription();
    await subscriptions.save(kept);
    const deleted = subscriptionChanged('deleted', kept, new Date(clock));
    await outbox.intend(deleted, { kind: 'subscription-absent', tenantId, subscriptionId: kept.id });
    const later = clock + 5_000;
    const updated = subscriptionChanged('updated', { ...kept, updatedAt: new Date(later) }, new Date(later), {
      changes: ['url'],
      suppressed: 0,
    });
    await outbox.intend(updated, { kind: 'subscription-exists', tenantId, subscriptionId: kept.id, since: later });
    clock += 60_001;
    await outbox.sweep(); // neither was made: still there, not updated since
    expect(ours()).toEqual([]);

    const gone = subscription();
    await subscriptions.save(gone);
    await outbox.intend(subscriptionChanged('deleted', gone, new Date(clock)), {
      kind: 'subscription-absent',
      tenantId,
      subscriptionId: gone.id,
    });
    await subscriptions.delete(tenantId, gone.id);
    clock += 60_001;
    await outbox.sweep();
    expect(ours().map(({ event }) => [event.eventType, event.entityId])).toEqual([['subscription.deleted', gone.id]]);
  });
});
