// kill -9 of a dispatcher and of the router in the middle of 1,000 events: every event still reaches every matching
// subscriber at least once (duplicates allowed, losses not).
import { blankSubscription } from '../../core/subscriptions/subscription.ts';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra } from '../../core/cassandra.ts';
import { loadConfig, requireSecrets } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { SubscriptionStore } from '../../core/subscriptions/subscription-store.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { eventPublisher } from '../support/events.ts';
import { startReceiver, startServices, testEnv, waitFor } from '../support/harness.ts';

const EVENTS = 1_000;

describe('crash safety', () => {
  let env: Record<string, string>;
  const stacks: Awaited<ReturnType<typeof startServices>>[] = [];
  const receivers: Awaited<ReturnType<typeof startReceiver>>[] = [];

  beforeAll(async () => {
    env = {
      ...testEnv(),
      KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}crash${randomUUID().slice(0, 8)}.`,
      WEBHOOK_RETRY_DELAYS: '1s',
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    };
    await provision(loadConfig(env), createLogger('test', 'warn'));
  });

  afterAll(async () => {
    await Promise.all(stacks.map((stack) => stack.stop()));
    await Promise.all(receivers.map((receiver) => receiver.close()));
    await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  });

  it('delivers every event to every matching subscriber despite kill -9 of a dispatcher and the router', async () => {
    const config = loadConfig(env);
    const db = await connectCassandra(config);
    const store = new SubscriptionStore(db, requireSecrets(config));
    const tenantId = `tenant-crash-${randomUUID().slice(0, 8)}`;
    for (let index = 0; index < 2; index += 1) {
      const receiver = await startReceiver();
      receivers.push(receiver);
      const subscription = blankSubscription(tenantId, randomUUID(), new Date());
      await store.save({ ...subscription, url: receiver.url, eventTypes: ['purchaseOrder.*'] });
    }
    await db.shutdown();

    const victims = await startServices(env, ['router', 'dispatcher']);
    const survivor = await startServices(env, ['dispatcher']);
    stacks.push(victims, survivor);
    const events = await eventPublisher(env);
    const ids: string[] = [];
    for (let batch = 0; batch < 10; batch += 1) {
      ids.push(
        ...(await events.publish(
          Array.from({ length: EVENTS / 10 }, () => ({ tenantId, eventType: 'purchaseOrder.validated' })),
        )),
      );
      if (batch === 3) {
        await waitFor(() => receivers[0]!.received.length > 100, 'deliveries to be flowing');
        for (const service of victims.services) service.child.kill('SIGKILL');
        await Promise.all(victims.services.map((service) => service.exited));
        stacks.push(await startServices(env, ['router']));
      }
    }
    await events.close();

    for (const receiver of receivers) {
      await waitFor(
        () => {
          const seen = new Set(receiver.received.map((request) => String(request.headers['x-webhook-event-id'])));
          return ids.every((id) => seen.has(id));
        },
        'every event at every subscriber',
        90_000,
      );
      const seen = new Set(receiver.received.map((request) => String(request.headers['x-webhook-event-id'])));
      expect(seen.size).toBe(EVENTS);
      expect(receiver.received.length).toBeGreaterThanOrEqual(EVENTS);
      // Few duplicates: records the survivors find in the partitions they take over are checked against the stored
      // state, so only attempts in flight at the kill are sent again (the rest of the uncommitted backlog was before).
      const duplicates = receiver.received.length - EVENTS;
      console.log(`kill -9 of a dispatcher and the router: ${duplicates} duplicates of ${EVENTS} at one receiver`);
      expect(duplicates).toBeLessThanOrEqual(EVENTS * 0.05);
    }
    // The next test needs the consumer groups to itself.
    await Promise.all(stacks.splice(0).map((stack) => stack.stop()));
  });

  it('on SIGTERM a dispatcher finishes its in-flight attempts, commits and exits; nothing is sent again', async () => {
    const config = loadConfig(env);
    const db = await connectCassandra(config);
    const store = new SubscriptionStore(db, requireSecrets(config));
    const tenantId = `tenant-term-${randomUUID().slice(0, 8)}`;
    const slow = await startReceiver(async () => {
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      return 204;
    });
    receivers.push(slow);
    await store.save({
      ...blankSubscription(tenantId, randomUUID(), new Date()),
      url: slow.url,
      eventTypes: ['purchaseOrder.*'],
    });
    await db.shutdown();

    const router = await startServices(env, ['router']);
    const first = await startServices(env, ['dispatcher']);
    stacks.push(router, first);
    const events = await eventPublisher(env);
    const ids = await events.publish(
      Array.from({ length: 10 }, () => ({ tenantId, eventType: 'purchaseOrder.validated' })),
    );
    await events.close();
    await waitFor(() => slow.received.length >= 10, 'all ten attempts to be in flight', 30_000);

    const dispatcher = first.services[0]!;
    dispatcher.child.kill('SIGTERM');
    expect(await dispatcher.exited).toBe(0);
    // Every attempt in flight at SIGTERM was finished (answered) before the process left.
    expect(slow.received).toHaveLength(10);

    const second = await startServices(env, ['dispatcher']);
    stacks.push(second);
    const more = await eventPublisher(env);
    const [marker] = await more.publish([{ tenantId, eventType: 'purchaseOrder.validated' }]);
    await more.close();
    await waitFor(
      () => slow.received.some((request) => request.headers['x-webhook-event-id'] === marker),
      'the marker',
    );
    // The new dispatcher started after the committed offsets: the ten were not sent again.
    const counts = ids.map(
      (id) => slow.received.filter((request) => request.headers['x-webhook-event-id'] === id).length,
    );
    expect(counts).toEqual(ids.map(() => 1));
  });
});
