// Entity ordering: a subscription with ordering 'entity' receives each entity's deliveries in the order their events
// were raised, one at a time, while its receiver fails first attempts and answers slowly at random, and across a
// kill -9 of one of two dispatchers. A subscription without ordering, under the same receiver, shows disorder: the
// check below can see it.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra } from '../../core/cassandra.ts';
import { loadConfig, requireSecrets } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { DeliveryStore } from '../../core/deliveries/delivery-store.ts';
import { EntityOrderStore } from '../../core/deliveries/entity-order.ts';
import { deliveryIdFor } from '../../core/ids.ts';
import { blankSubscription, type Ordering } from '../../core/subscriptions/subscription.ts';
import { SubscriptionStore } from '../../core/subscriptions/subscription-store.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { eventPublisher } from '../support/events.ts';
import { freePort, startServices, testEnv, waitFor } from '../support/harness.ts';

const ENTITIES = 200;
const EVENTS_PER_ENTITY = 5;
/** Rounds (one event per entity) published before the kill; the rest follow it. */
const ROUNDS_BEFORE_KILL = 3;
/** Share of first attempts answered 500, share of requests answered 200-800 ms late. */
const FAIL_FIRST = 0.3;
const SLOW = 0.1;

/** One request as the receiver saw it, in arrival order (`seq`), with the status it answered. */
interface Arrival {
  seq: number;
  eventId: string;
  entityId: string;
  attempt: number;
  status: number;
  /** When it arrived (epoch ms). */
  at: number;
}

const acknowledged = (arrival: Arrival) => arrival.status >= 200 && arrival.status < 300;

/**
 * A receiver on 127.0.0.1 that fails FAIL_FIRST of first attempts (500) and answers SLOW of requests 200-800 ms late;
 * it records every request when it has arrived whole, with the status it will answer.
 */
async function startFlakyReceiver() {
  const arrivals: Arrival[] = [];
  const injected = { failures: 0, slow: 0 };
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const attempt = Number(request.headers['x-webhook-attempt']);
      const status = attempt === 1 && Math.random() < FAIL_FIRST ? 500 : 204;
      if (status === 500) injected.failures += 1;
      const { entityId } = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { entityId: string };
      arrivals.push({
        seq: arrivals.length,
        eventId: String(request.headers['x-webhook-event-id']),
        entityId,
        attempt,
        status,
        at: Date.now(),
      });
      const delay = Math.random() < SLOW ? 200 + Math.random() * 600 : 0;
      if (delay > 0) injected.slow += 1;
      setTimeout(() => response.writeHead(status).end(), delay);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`,
    arrivals,
    injected,
    /** Whether every one of `eventIds` was acknowledged at least once. */
    allAcknowledged: (eventIds: string[]) => {
      const seen = new Set(arrivals.filter(acknowledged).map((arrival) => arrival.eventId));
      return eventIds.every((id) => seen.has(id));
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * Where the arrivals break each entity's raise order (`raised`: entity → its event ids, first raised first):
 * `disordered`, the entities whose acknowledged requests, consecutive repeats of one event collapsed (a crash may send
 * a delivery again), are not exactly their events in raise order; `early`, the requests (any status) of an event that
 * arrived before an earlier event of its entity was first acknowledged. A disordered entity comes with all its requests
 * (`#arrival event/attempt status`), for the diagnosis.
 */
function orderViolations(raised: Map<string, string[]>, arrivals: Arrival[]) {
  const byEntity = new Map<string, Arrival[]>();
  for (const arrival of arrivals) byEntity.set(arrival.entityId, [...(byEntity.get(arrival.entityId) ?? []), arrival]);
  const disordered: { entityId: string; acknowledged: number[]; requests: string }[] = [];
  const early: { entityId: string; event: number; attempt: number; before: number }[] = [];
  for (const [entityId, eventIds] of raised) {
    const position = new Map(eventIds.map((id, index) => [id, index]));
    const mine = byEntity.get(entityId) ?? [];
    const acks = mine.filter(acknowledged).map((arrival) => position.get(arrival.eventId)!);
    const collapsed = acks.filter((event, index) => index === 0 || event !== acks[index - 1]);
    if (collapsed.join() !== eventIds.map((_, index) => index).join()) {
      const requests = mine.map((arrival) => {
        const event = position.get(arrival.eventId)!;
        return `#${arrival.seq} ${event}/${arrival.attempt} ${arrival.status}`;
      });
      disordered.push({ entityId, acknowledged: collapsed, requests: requests.join(', ') });
    }
    const firstAck = eventIds.map((id) => mine.find((arrival) => arrival.eventId === id && acknowledged(arrival)));
    for (const arrival of mine) {
      const event = position.get(arrival.eventId)!;
      const before = firstAck.slice(0, event).findIndex((ack) => ack === undefined || ack.seq > arrival.seq);
      if (before >= 0) early.push({ entityId, event, attempt: arrival.attempt, before });
    }
  }
  return { disordered, early };
}

describe('entity ordering', () => {
  let env: Record<string, string>;
  let metricsPorts: number[];
  const stacks: Awaited<ReturnType<typeof startServices>>[] = [];
  const receivers: Awaited<ReturnType<typeof startFlakyReceiver>>[] = [];

  beforeAll(async () => {
    env = {
      ...testEnv(),
      KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}ordering${randomUUID().slice(0, 8)}.`,
      WEBHOOK_RETRY_DELAYS: '1s,2s',
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    };
    await provision(loadConfig(env), createLogger('test', 'warn'));
    // A router and two dispatchers in one group, each dispatcher with its /metrics (to tell which one to kill).
    metricsPorts = [await freePort(), await freePort()];
    stacks.push(
      await startServices(env, ['router', 'dispatcher', 'dispatcher'], {}, [
        {},
        { METRICS_PORT: String(metricsPorts[0]) },
        { METRICS_PORT: String(metricsPorts[1]) },
      ]),
    );
  });

  afterAll(async () => {
    await Promise.all(stacks.map((stack) => stack.stop()));
    await Promise.all(receivers.map((receiver) => receiver.close()));
    await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  });

  /** A tenant with one subscription of `ordering` to a new flaky receiver. */
  async function subscribe(ordering: Ordering) {
    const config = loadConfig(env);
    const db = await connectCassandra(config);
    const store = new SubscriptionStore(db, requireSecrets(config));
    const tenantId = `tenant-order-${randomUUID().slice(0, 8)}`;
    const receiver = await startFlakyReceiver();
    receivers.push(receiver);
    const subscription = blankSubscription(tenantId, randomUUID(), new Date());
    await store.save({ ...subscription, url: receiver.url, eventTypes: ['purchaseOrder.*'], ordering });
    await db.shutdown();
    return { tenantId, subscriptionId: subscription.id, receiver };
  }

  /**
   * Waits for every event of `raised` acknowledged; on a timeout, the error tells, for the first few entities with an
   * event never acknowledged, what the receiver saw of the entity and what Cassandra holds: each event's delivery state
   * and the entity's order rows (place, delivery, waiting mark).
   */
  async function waitForEvery(
    tenantId: string,
    subscriptionId: string,
    receiver: Awaited<ReturnType<typeof startFlakyReceiver>>,
    raised: Map<string, string[]>,
    timeoutMs: number,
  ) {
    const eventIds = [...raised.values()].flat();
    try {
      await waitFor(() => receiver.allAcknowledged(eventIds), 'every event acknowledged', timeoutMs);
    } catch (error) {
      const seen = new Set(receiver.arrivals.filter(acknowledged).map((arrival) => arrival.eventId));
      const stuck = [...raised].filter(([, ids]) => ids.some((id) => !seen.has(id)));
      const lastAt = Date.now() - (receiver.arrivals.at(-1)?.at ?? 0);
      const config = loadConfig(env);
      const db = await connectCassandra(config);
      const deliveries = new DeliveryStore(db, config.webhook.historyRetentionMs);
      const order = new EntityOrderStore(db);
      const lines: string[] = [];
      for (const [entityId, ids] of stuck.slice(0, 5)) {
        const states = await Promise.all(
          ids.map(async (id, index) => {
            const deliveryId = deliveryIdFor(id, subscriptionId);
            const state = await deliveries.state(tenantId, deliveryId);
            const status = state ? `${state.status}×${state.attemptCount}` : 'no row';
            return `${index} ${deliveryId.slice(0, 8)} ${seen.has(id) ? 'acked' : 'NOT acked'} (${status})`;
          }),
        );
        const rows = await order.first({ tenantId, subscriptionId, entityId }, 10, false);
        const requests = receiver.arrivals
          .filter((arrival) => arrival.entityId === entityId)
          .map((arrival) => `#${arrival.seq} ${ids.indexOf(arrival.eventId)}/${arrival.attempt} ${arrival.status}`);
        lines.push(
          `${entityId}: ${states.join('; ')}`,
          `  order rows: ${rows.map((row) => `${row.seq} ${row.deliveryId.slice(0, 8)}${row.waiting ? ' waiting' : ''}`).join('; ') || 'none'}`,
          `  requests: ${requests.join(', ') || 'none'}`,
        );
      }
      await db.shutdown();
      throw new Error(
        `${error instanceof Error ? error.message : String(error)}; ${stuck.length} entities with an event not ` +
          `acknowledged; ${receiver.arrivals.length} requests in all, the last ${lastAt} ms before the timeout:\n` +
          lines.join('\n'),
        { cause: error },
      );
    }
  }

  /**
   * Publishes `rounds` rounds of one event per entity of `raised`, each once Kafka has acknowledged the previous one
   * (the tenant is the key: one partition, so each entity's events are on the topic in raise order).
   */
  async function publishRounds(
    tenantId: string,
    raised: Map<string, string[]>,
    rounds: number,
    events: Awaited<ReturnType<typeof eventPublisher>>,
  ) {
    for (let round = 0; round < rounds; round += 1) {
      const entityIds = [...raised.keys()];
      const ids = await events.publish(
        entityIds.map((entityId) => ({ tenantId, eventType: 'purchaseOrder.validated', entityId })),
      );
      entityIds.forEach((entityId, index) => raised.get(entityId)!.push(ids[index]!));
    }
  }

  it("delivers each entity's events in raise order despite failures, slow answers and kill -9 of a dispatcher", async () => {
    const { tenantId, subscriptionId, receiver } = await subscribe('entity');

    const raised = new Map<string, string[]>(
      Array.from({ length: ENTITIES }, (_, index) => [`entity-${index}-${randomUUID()}`, []]),
    );
    const events = await eventPublisher(env);
    await publishRounds(tenantId, raised, ROUNDS_BEFORE_KILL, events);
    const acks = () => receiver.arrivals.filter(acknowledged).length;
    await waitFor(() => acks() >= 250, 'deliveries to be flowing', 60_000);
    // Kill the dispatcher that handled more deliveries over the last second: the one holding the busy partitions now.
    const handledBy = () =>
      Promise.all(
        metricsPorts.map(async (port) => {
          const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
          const samples = [...text.matchAll(/^webhook_deliveries_total\{[^}]*\} (\S+)$/gm)];
          return samples.reduce((sum, sample) => sum + Number(sample[1]), 0);
        }),
      );
    const before = await handledBy();
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const handled = (await handledBy()).map((count, index) => count - before[index]!);
    const victim = stacks[0]!.services[handled[0]! >= handled[1]! ? 1 : 2]!;
    const atKill = { acknowledged: acks(), arrivals: receiver.arrivals.length };
    victim.child.kill('SIGKILL');
    await victim.exited;
    // A new member joins while the survivor takes over: two more hand-offs of the partitions.
    stacks.push(await startServices(env, ['dispatcher']));
    await publishRounds(tenantId, raised, EVENTS_PER_ENTITY - ROUNDS_BEFORE_KILL, events);
    await events.close();

    const eventIds = [...raised.values()].flat();
    await waitForEvery(tenantId, subscriptionId, receiver, raised, 90_000);
    const { disordered, early } = orderViolations(raised, receiver.arrivals);
    const acknowledgedRequests = receiver.arrivals.filter(acknowledged).length;
    console.log(
      `entity ordering: ${ENTITIES} entities × ${EVENTS_PER_ENTITY} events; ${receiver.arrivals.length} requests, ` +
        `${acknowledgedRequests} acknowledged (${acknowledgedRequests - eventIds.length} duplicates); injected ` +
        `${receiver.injected.failures} failures (500) and ${receiver.injected.slow} slow answers; a dispatcher killed ` +
        `at ${atKill.acknowledged} acknowledged, arrival #${atKill.arrivals} (deliveries handled in the second before: ${handled.join(' and ')}); ` +
        `${disordered.length} entities out of order, ${early.length} requests sent before an earlier event's ` +
        'acknowledgement',
    );
    expect(new Set(receiver.arrivals.filter(acknowledged).map((arrival) => arrival.eventId)).size).toBe(
      ENTITIES * EVENTS_PER_ENTITY,
    );
    // The first few of each, as event positions (0 raised first), so a failure reads in a few lines.
    expect(disordered.slice(0, 3), `${disordered.length} entities acknowledged out of raise order`).toEqual([]);
    expect(early.slice(0, 3), `${early.length} requests sent before an earlier event's acknowledgement`).toEqual([]);
  });

  it('shows disorder for a subscription without ordering under the same receiver (the check can see it)', async () => {
    const { tenantId, receiver } = await subscribe('none');
    const raised = new Map<string, string[]>(
      Array.from({ length: 50 }, (_, index) => [`entity-${index}-${randomUUID()}`, []]),
    );
    const events = await eventPublisher(env);
    await publishRounds(tenantId, raised, 3, events);
    await events.close();
    await waitFor(() => receiver.allAcknowledged([...raised.values()].flat()), 'every event acknowledged', 60_000);
    const { disordered, early } = orderViolations(raised, receiver.arrivals);
    console.log(`without ordering: ${disordered.length} of 50 entities out of order, ${early.length} early requests`);
    expect(disordered.length).toBeGreaterThan(0);
    expect(early.length).toBeGreaterThan(0);
  });
});
