// maxDeliveriesPerSecond across two dispatchers (issue 13, item 2): the router and two dispatcher processes in one
// consumer group, real Kafka and Cassandra, real receivers on 127.0.0.1. The limited subscription's id is chosen so
// that its partition of the deliveries topic and of the first retry tier belong to different dispatchers, and a third
// of its first attempts fail: both dispatchers start its attempts, and their sum must stay within the limit.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig, requireSecrets } from '../../core/config.ts';
import { createKafka, partitionOf, stableGroupMembers, type GroupMembership } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { SubscriptionStore } from '../../core/subscriptions/subscription-store.ts';
import { blankSubscription } from '../../core/subscriptions/subscription.ts';
import { topicNames } from '../../core/topics.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { eventPublisher } from '../support/events.ts';
import { freePort, startReceiver, startServices, testEnv, waitFor } from '../support/harness.ts';

const LIMIT = 5;
/** The documented burst: one token per dispatcher owning the subscription's partitions (two here). */
const BURST = 2;

/** The most requests in any window [t, t + 1000). */
const busiestSecond = (times: number[]) =>
  Math.max(0, ...times.map((at) => times.filter((other) => other >= at && other < at + 1000).length));

describe('maxDeliveriesPerSecond across two dispatchers', () => {
  let env: Record<string, string>;
  let db: CassandraClient;
  let subscriptions: SubscriptionStore;
  let stack: Awaited<ReturnType<typeof startServices>>;
  let events: Awaited<ReturnType<typeof eventPublisher>>;
  let metricsPorts: number[];
  const closers: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    env = {
      ...testEnv(),
      KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}ratelimit${randomUUID().slice(0, 8)}.`,
      WEBHOOK_RETRY_DELAYS: '1s,2s',
      WEBHOOK_DELIVERY_LIFETIME: '5m',
      WEBHOOK_SUBSCRIPTION_CACHE_TTL: '200ms',
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
      LOG_LEVEL: 'warn',
    };
    const config = loadConfig(env);
    await provision(config, createLogger('test', 'warn'));
    db = await connectCassandra(config);
    subscriptions = new SubscriptionStore(db, requireSecrets(config));
    metricsPorts = [await freePort(), await freePort()];
    stack = await startServices(env, ['router', 'dispatcher', 'dispatcher'], {}, [
      {},
      { METRICS_PORT: String(metricsPorts[0]) },
      { METRICS_PORT: String(metricsPorts[1]) },
    ]);
    events = await eventPublisher(env);
  });

  afterAll(async () => {
    await stack?.stop();
    await events?.close();
    for (const close of closers) await close();
    await db?.shutdown();
    await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  });

  /** The dispatcher group once both members hold partitions. */
  async function dispatcherGroup(): Promise<GroupMembership['members']> {
    const config = loadConfig(env);
    const admin = createKafka(config.kafka.brokers, 'test-admin', createLogger('test', 'warn')).admin();
    await admin.connect();
    closers.push(() => admin.disconnect());
    let members: GroupMembership['members'] | undefined;
    await waitFor(
      async () => {
        members = await stableGroupMembers(admin, `${config.kafka.topicPrefix}webhook-dispatcher`);
        return members?.length === 2 && members.every((m) => Object.keys(m.assignment).length > 0);
      },
      'both dispatchers to join their group and hold partitions',
      45_000,
    );
    return members!;
  }

  const scrapeWaits = async (port: number) => {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    return Number(/^webhook_rate_limited_waits_total\{[^}]*cause="token"[^}]*\} (\S+)$/m.exec(text)?.[1] ?? 0);
  };

  it('a 5/s subscription never gets more than 5 (+ burst) in any second from both dispatchers; one beside it keeps its pace', async () => {
    const members = await dispatcherGroup();
    const topics = topicNames(loadConfig(env));
    const partitions = (topic: string) =>
      Math.max(...members.flatMap((member) => (member.assignment[topic] ?? []).map((p) => p + 1)));
    const owner = (topic: string, key: string) =>
      members.find((member) => member.assignment[topic]?.includes(partitionOf(key, partitions(topic))))?.memberId;
    const firstTier = topics.retries[0]!.topic;
    // An id whose first attempts and first retries are consumed by different dispatchers (bounded: an assignment
    // where no partition of the two topics has different owners fails here, naming it, instead of spinning).
    const search = (matches: (id: string) => boolean, what: string) => {
      for (let tries = 0; tries < 10_000; tries += 1) {
        const id = randomUUID();
        if (matches(id)) return id;
      }
      throw new Error(`no subscription id ${what}; group assignment ${JSON.stringify(members)}`);
    };
    const limitedId = search(
      (id) => owner(topics.deliveries, id) !== owner(firstTier, id),
      'whose deliveries and first retries have different owners',
    );
    // The unlimited subscription shares the limited one's deliveries partition: the limit must not hold it up.
    const freeId = search(
      (id) => partitionOf(id, partitions(topics.deliveries)) === partitionOf(limitedId, partitions(topics.deliveries)),
      "on the limited one's deliveries partition",
    );

    const tenantId = `tenant-${randomUUID().slice(0, 8)}`;
    let firstAttempts = 0;
    const limitedReceiver = await startReceiver((request) => {
      if (request.headers['x-webhook-attempt'] !== '1') return 204;
      firstAttempts += 1;
      return firstAttempts % 3 === 0 ? 500 : 204; // a third go through the first retry tier
    });
    const freeReceiver = await startReceiver();
    closers.push(limitedReceiver.close, freeReceiver.close);
    await subscriptions.save({
      ...blankSubscription(tenantId, limitedId, new Date()),
      url: limitedReceiver.url,
      eventTypes: ['purchaseOrder.cancelled'],
      maxDeliveriesPerSecond: LIMIT,
    });
    await subscriptions.save({
      ...blankSubscription(tenantId, freeId, new Date()),
      url: freeReceiver.url,
      eventTypes: ['purchaseOrder.validated'],
    });
    await new Promise((resolve) => setTimeout(resolve, 400)); // two router cache periods

    const deliveries = 60;
    await events.publish(
      Array.from({ length: deliveries }, () => ({ tenantId, eventType: 'purchaseOrder.cancelled' })),
    );
    await waitFor(
      () => limitedReceiver.received.length >= 10,
      'the limited subscription to get its first requests',
      20_000,
    );

    // The unlimited subscription's events, paced, while the limited one works through its backlog.
    const publishedAt = new Map<string, number>();
    for (let batch = 0; batch < 10; batch += 1) {
      const ids = await events.publish(
        Array.from({ length: 10 }, () => ({ tenantId, eventType: 'purchaseOrder.validated' })),
      );
      for (const id of ids) publishedAt.set(id, Date.now());
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await waitFor(() => freeReceiver.received.length >= 100, 'the unlimited subscription to get its 100', 20_000);
    expect(limitedReceiver.received.length).toBeLessThan(deliveries); // it arrived while the limited one was paced
    const latencies = freeReceiver.received
      .map((request) => request.at - publishedAt.get(String(request.headers['x-webhook-event-id']))!)
      .sort((a, b) => a - b);
    const p99 = latencies[Math.ceil(latencies.length * 0.99) - 1]!;
    console.log(`unlimited beside the limited one: p50 ${latencies[latencies.length >> 1]} ms, p99 ${p99} ms`);
    expect(p99).toBeLessThan(3_000);

    await waitFor(
      () =>
        new Set(limitedReceiver.received.map((request) => String(request.headers['x-webhook-delivery-id']))).size >=
          deliveries && limitedReceiver.received.length >= deliveries + Math.floor(deliveries / 3),
      `all ${deliveries} deliveries and ${Math.floor(deliveries / 3)} retries of the limited subscription`,
      45_000,
    );
    const times = limitedReceiver.received.map((request) => request.at).sort((a, b) => a - b);
    const busiest = busiestSecond(times);
    const spanS = (times.at(-1)! - times[0]!) / 1000;
    console.log(
      `limited (${LIMIT}/s over two dispatchers): ${times.length} requests in ${spanS.toFixed(1)} s, ` +
        `at most ${busiest} in one second`,
    );
    expect(busiest).toBeLessThanOrEqual(LIMIT + BURST);
    const retries = limitedReceiver.received.filter((request) => request.headers['x-webhook-attempt'] === '2');
    expect(retries.length).toBe(Math.floor(deliveries / 3));
    // Paced as a whole, not only in its busiest second: 80 requests at 5/s take at least (80 - burst) / 5 s.
    expect(spanS).toBeGreaterThanOrEqual((times.length - LIMIT - BURST) / LIMIT);
    // The backlog waited for tokens in its lane (the retries' dispatcher gets them no faster than its share, so it
    // may never have had to wait).
    const waits = await Promise.all(metricsPorts.map(scrapeWaits));
    console.log(`rate-limited waits per dispatcher: ${waits.join(', ')}`);
    expect(waits[0]! + waits[1]!).toBeGreaterThan(10);
  });
});
