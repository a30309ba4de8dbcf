// Defects of the delivery engine that only show at volume or under faults (issue "correctness under stress"), each on
// the real path: the router and the dispatcher as processes, real Kafka and Cassandra, real receivers on 127.0.0.1.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig, requireSecrets } from '../../core/config.ts';
import { MAY_BE_DUPLICATE_HEADER } from '../../core/deliveries/delivery-record.ts';
import { DeliveryStore } from '../../core/deliveries/delivery-store.ts';
import { deliveryIdFor } from '../../core/ids.ts';
import { createKafka, Publisher } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { topicNames } from '../../core/topics.ts';
import { SubscriptionStore } from '../../core/subscriptions/subscription-store.ts';
import { blankSubscription, type Subscription } from '../../core/subscriptions/subscription.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { eventPublisher } from '../support/events.ts';
import { freePort, startReceiver, startServices, testEnv, waitFor, type ReceivedRequest } from '../support/harness.ts';

type Receiver = Awaited<ReturnType<typeof startReceiver>>;

describe('delivery engine under stress', () => {
  let env: Record<string, string>;
  let db: CassandraClient;
  let subscriptions: SubscriptionStore;
  let deliveries: DeliveryStore;
  let stack: Awaited<ReturnType<typeof startServices>>;
  let events: Awaited<ReturnType<typeof eventPublisher>>;
  const receivers: Receiver[] = [];
  let metricsPort: number;
  const restarted: Awaited<ReturnType<typeof startServices>>[] = [];

  beforeAll(async () => {
    env = {
      ...testEnv(),
      KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}stress${randomUUID().slice(0, 8)}.`,
      WEBHOOK_RETRY_DELAYS: '1s,2s',
      WEBHOOK_DELIVERY_LIFETIME: '1h',
      WEBHOOK_SUBSCRIPTION_CACHE_TTL: '200ms',
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
      LOG_LEVEL: 'info',
    };
    const config = loadConfig(env);
    await provision(config, createLogger('test', 'warn'));
    db = await connectCassandra(config);
    subscriptions = new SubscriptionStore(db, requireSecrets(config));
    deliveries = new DeliveryStore(db, config.webhook.historyRetentionMs);
    metricsPort = await freePort();
    stack = await startServices(env, ['router', 'dispatcher'], { dispatcher: { METRICS_PORT: String(metricsPort) } });
    events = await eventPublisher(env);
  });

  afterAll(async () => {
    await Promise.all(restarted.map((services) => services.stop()));
    await stack?.stop();
    await events?.close();
    await Promise.all(receivers.map((receiver) => receiver.close()));
    await db?.shutdown();
    await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  });

  const receiver = async (respond?: (request: ReceivedRequest) => number | Promise<number>) => {
    const started = await startReceiver(respond);
    receivers.push(started);
    return started;
  };

  const subscribe = async (tenantId: string, url: string, extra: Partial<Subscription> = {}) => {
    const subscription = { ...blankSubscription(tenantId, randomUUID(), new Date()), url, ...extra };
    await subscriptions.save(subscription);
    return subscription;
  };

  /** Deliveries of a subscription routed in the last two hours (the tenant's listing rows, by their SAI index). */
  const routedCount = async (tenantId: string, subscriptionId: string) => {
    const hour = Math.floor(Date.now() / 3_600_000);
    let count = 0;
    for (const h of [hour - 1, hour]) {
      const result = await db.execute(
        'SELECT count(*) AS n FROM deliveries_by_tenant WHERE tenant_id = ? AND hour = ? AND subscription_id = ?',
        [tenantId, h, subscriptionId],
        { prepare: true },
      );
      count += Number(result.first()?.n ?? 0);
    }
    return count;
  };

  it('starvation by one slow subscription: 2,000 deliveries held 5 s each do not stall a fast subscription', async () => {
    const tenantId = `tenant-${randomUUID().slice(0, 8)}`;
    let slowHolds = true;
    const slow = await receiver(async () => {
      if (slowHolds) await new Promise((resolve) => setTimeout(resolve, 5_000));
      return 204;
    });
    const fast = await receiver();
    const slowSubscription = await subscribe(tenantId, slow.url, { eventTypes: ['purchaseOrder.cancelled'] });
    await subscribe(tenantId, fast.url, { eventTypes: ['purchaseOrder.validated'] });
    await new Promise((resolve) => setTimeout(resolve, 400)); // two router cache periods

    await events.publish(Array.from({ length: 2_000 }, () => ({ tenantId, eventType: 'purchaseOrder.cancelled' })));
    // The 2,000 are routed and the dispatcher is busy with them before the fast subscription's events arrive.
    await waitFor(
      async () => (await routedCount(tenantId, slowSubscription.id)) >= 2_000,
      'the 2,000 slow deliveries to be routed',
      60_000,
    );
    await waitFor(() => slow.received.length >= 20, 'the slow receiver to hold its first requests', 30_000);
    const publishedAt = new Map<string, number>();
    for (let batch = 0; batch < 10; batch += 1) {
      const ids = await events.publish(
        Array.from({ length: 20 }, () => ({ tenantId, eventType: 'purchaseOrder.validated' })),
      );
      for (const id of ids) publishedAt.set(id, Date.now());
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    try {
      await waitFor(() => fast.received.length >= 200, 'the fast receiver to get its 200 deliveries', 20_000);
    } finally {
      slowHolds = false; // let the slow backlog drain so the stack stops promptly
    }
    const latencies = fast.received
      .map((request) => request.at - publishedAt.get(String(request.headers['x-webhook-event-id']))!)
      .sort((a, b) => a - b);
    const p99 = latencies[Math.ceil(latencies.length * 0.99) - 1]!;
    console.log(`fast subscription beside 2,000 slow deliveries: p50 ${latencies[99]} ms, p99 ${p99} ms`);
    expect(p99).toBeLessThan(2_000);
  });

  it('poison records: an undecodable record and an unreadable secret end, and the partition moves on', async () => {
    const tenantId = `tenant-${randomUUID().slice(0, 8)}`;
    const good = await receiver();
    const damaged = await receiver();
    const healthy = await subscribe(tenantId, good.url, {
      eventTypes: ['purchaseOrder.*'],
      authenticationMode: 'Hmac',
      secrets: { hmacSecret: 'healthy-secret-0123456789' },
    });
    const broken = await subscribe(tenantId, damaged.url, {
      eventTypes: ['purchaseOrder.*'],
      authenticationMode: 'Hmac',
      secrets: { hmacSecret: 'broken-secret-0123456789' },
    });
    // A sealed secret no configured key opens (damaged at rest, or its key dropped from SECRETS_PREVIOUS_KEYS).
    await db.execute('UPDATE subscriptions SET secrets = ? WHERE tenant_id = ? AND id = ?', [
      Buffer.from('not a sealed secret'),
      tenantId,
      broken.id,
    ]);
    // A record that is not Avro at all, on the healthy subscription's partition, ahead of its deliveries.
    const kafka = createKafka(loadConfig(env).kafka.brokers, 'test-poison', createLogger('test', 'warn'));
    const raw = await Publisher.connect(kafka);
    await raw.publish([
      { topic: topicNames(loadConfig(env)).deliveries, key: healthy.id, value: Buffer.from('{"not":"avro"}') },
    ]);
    await raw.close();
    await new Promise((resolve) => setTimeout(resolve, 400));

    const ids = await events.publish(
      Array.from({ length: 5 }, () => ({ tenantId, eventType: 'purchaseOrder.validated' })),
    );
    await waitFor(() => good.received.length >= 5, 'the healthy subscription to get its 5 deliveries', 30_000);
    const ended = await waitFor(
      async () => {
        const rows = await Promise.all(ids.map((id) => deliveries.get(tenantId, deliveryIdFor(id, broken.id))));
        return rows.every((row) => row?.status === 'abandoned') ? rows : undefined;
      },
      'the deliveries of the subscription with unreadable secrets to be abandoned',
      30_000,
    );
    expect(ended[0]!.abandonReason).toMatch(/^subscription secrets unreadable: /);
    expect(damaged.received).toHaveLength(0);
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(Number(/webhook_poison_records_total\{[^}]*\} (\d+)/.exec(metrics)?.[1])).toBeGreaterThanOrEqual(1);
    expect(Number(/webhook_unreadable_secret_abandons_total\{[^}]*\} (\d+)/.exec(metrics)?.[1])).toBeGreaterThanOrEqual(
      5,
    );
    // The fault is the service's (its keys), not the subscriber's: no failure day is counted toward auto-disable.
    const [row] = (
      await db.execute('SELECT failure_days FROM subscriptions WHERE tenant_id = ? AND id = ?', [tenantId, broken.id])
    ).rows;
    expect(row?.failure_days ?? 0).toBe(0);
  });

  /** Publishes one event to a receiver and waits for its delivery to be acknowledged. */
  const acknowledgedEvent = async (answer: { status: number }) => {
    const tenantId = `tenant-${randomUUID().slice(0, 8)}`;
    const target = await receiver(() => answer.status);
    const subscription = await subscribe(tenantId, target.url, { eventTypes: ['purchaseOrder.*'] });
    await new Promise((resolve) => setTimeout(resolve, 400));
    const [eventId] = await events.publish([{ tenantId, eventType: 'purchaseOrder.validated' }]);
    const deliveryId = deliveryIdFor(eventId!, subscription.id);
    await waitFor(
      async () => (await deliveries.get(tenantId, deliveryId))?.status === 'acknowledged',
      'the delivery to be acknowledged',
    );
    /** Once an event published after now has reached the receiver, what it got of the first event. */
    const afterMarker = async () => {
      const [marker] = await events.publish([{ tenantId, eventType: 'purchaseOrder.cancelled' }]);
      await waitFor(
        () => target.received.some((request) => request.headers['x-webhook-event-id'] === marker),
        'an event published afterwards to arrive',
        60_000,
      );
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      return {
        sent: target.received.filter((request) => request.headers['x-webhook-event-id'] === eventId).length,
        row: await deliveries.get(tenantId, deliveryId),
      };
    };
    return { tenantId, eventId: eventId!, afterMarker };
  };

  it('re-sent acknowledged deliveries: after a router crash the events it routes again are not POSTed again', async () => {
    const answer = { status: 204 };
    const first = await acknowledgedEvent(answer);
    // The router dies before committing (kill -9, then its group rewound): it routes the whole topic again. A
    // duplicate POST would now fail and, before the fix, flip the history back to retrying.
    answer.status = 500;
    const router = stack.services.find((service) => service.name === 'router')!;
    router.child.kill('SIGKILL');
    await router.exited;
    const config = loadConfig(env);
    const admin = createKafka(config.kafka.brokers, 'test-rewind', createLogger('test', 'warn')).admin();
    await admin.connect();
    try {
      // The dead member leaves the group after its session timeout; only then can the offsets be rewound.
      await waitFor(
        async () => {
          await admin.resetOffsets({
            groupId: `${config.kafka.topicPrefix}webhook-router`,
            topic: topicNames(config).purchaseEvents,
            earliest: true,
          });
          return true;
        },
        'the router group to be empty',
        60_000,
      );
    } finally {
      await admin.disconnect();
    }
    restarted.push(await startServices(env, ['router']));
    const { sent, row } = await first.afterMarker();
    expect(sent).toBe(1);
    expect(row).toMatchObject({ status: 'acknowledged', attemptCount: 1, lastStatusCode: 204 });
  });

  it('re-sent acknowledged deliveries: an event a producer publishes again, marked, is not POSTed again', async () => {
    const answer = { status: 204 };
    const first = await acknowledgedEvent(answer);
    answer.status = 500;
    await events.publish([
      {
        tenantId: first.tenantId,
        eventType: 'purchaseOrder.validated',
        eventId: first.eventId,
        headers: { [MAY_BE_DUPLICATE_HEADER]: '1' },
      },
    ]);
    const { sent, row } = await first.afterMarker();
    expect(sent).toBe(1);
    expect(row).toMatchObject({ status: 'acknowledged', attemptCount: 1, lastStatusCode: 204 });
  });
});
