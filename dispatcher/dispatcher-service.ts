import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { requireSecrets, type Config } from '../core/config.ts';
import { DeliveryStore } from '../core/deliveries/delivery-store.ts';
import {
  deliveryMessage,
  dueAtOf,
  fromDeliveryMessage,
  parkedMessage,
  type DeliveryRecord,
} from '../core/deliveries/delivery-record.ts';
import {
  ConsumerRunner,
  partitionOf,
  PoisonRecordError,
  Publisher,
  tailTopic,
  type ConsumedRecord,
} from '../core/kafka.ts';
import type { Logger } from '../core/log.ts';
import type { Platform } from '../core/platform.ts';
import { codecFor } from '../core/registry.ts';
import { parseCidrs } from '../core/ssrf.ts';
import { consumerJoined, createMetrics, Readiness, serveMetrics } from '../core/metrics.ts';
import { SubscriptionCache } from '../core/subscriptions/subscription-cache.ts';
import { changedTenant, subscriptionChangeMarkers } from '../core/subscriptions/subscription-changes.ts';
import { SubscriptionStore } from '../core/subscriptions/subscription-store.ts';
import { topicNames } from '../core/topics.ts';
import { ReplayJobStore } from '../core/replay-jobs/replay-job-store.ts';
import { createAuthHeaders } from './auth-headers.ts';
import { CircuitBreaker } from './circuit-breaker.ts';
import { ConcurrencyLimiter } from './concurrency-limiter.ts';
import { RateLimiter } from './rate-limiter.ts';
import { createDeliveryHandler } from './delivery-handler.ts';
import { EntityOrderGate } from './entity-order-gate.ts';
import { EntityOrderStore } from '../core/deliveries/entity-order.ts';
import { statementSender } from '../core/cassandra.ts';
import { WriteBatcher } from '../core/write-batcher.ts';
import { createGuardedAgent, createSender } from './http-sender.ts';
import { OriginGate } from './origin-gate.ts';
import { retryAfterCap } from './outcome.ts';
import { OperationalSignals } from './operational-signals.ts';
import { OperationalLimit } from '../core/operational-limit.ts';
import { startOperationalOutbox } from '../core/operational-service.ts';

/** A subscription announces going failing at most once an hour (subscription.failing). */
const OPERATIONAL_FAILING_QUIET_MS = 3_600_000;

/** Starts a dispatcher on the deliveries topic and every retry tier. Returns its stop function. */
export async function startDispatcher(
  config: Config,
  platform: Platform,
  logger: Logger,
): Promise<() => Promise<void>> {
  const topics = topicNames(config);
  const metrics = createMetrics('dispatcher');
  const readiness = new Readiness(['cassandra', 'schema registry', 'consumer group']);
  const metricsServer = await serveMetrics(metrics.registry, config.gateway.host, config.metricsPort, readiness);
  readiness.set('cassandra', async () =>
    (await platform.db.execute('SELECT release_version FROM system.local')).rowLength === 1 ? undefined : 'no answer',
  );
  const { webhook } = config;
  const allowed = parseCidrs(webhook.allowedCidrs);
  const { connectionsPerOrigin } = config.dispatcher;
  const agent = createGuardedAgent(allowed, webhook.attemptTimeoutMs, connectionsPerOrigin);
  const subscriptionStore = new SubscriptionStore(platform.db, requireSecrets(config));
  const cache = new SubscriptionCache(
    (tenantId) => subscriptionStore.listByTenant(tenantId),
    webhook.subscriptionCacheTtlMs,
  );
  const codec = await codecFor<DeliveryRecord>(platform.registry, 'delivery', topics.deliveries);
  for (const tier of [...topics.retries.map((retry) => retry.topic), topics.overflow])
    await codecFor<DeliveryRecord>(platform.registry, 'delivery', tier);
  readiness.set('schema registry', () => undefined); // it answered: the codecs above were fetched
  const publisher = await Publisher.connect(platform.kafka);
  const replayJobs = new ReplayJobStore(platform.db, webhook.historyRetentionMs);
  const origins = new OriginGate(connectionsPerOrigin);
  const send = createSender(agent, allowed, webhook.attemptTimeoutMs, connectionsPerOrigin, origins);
  // Each subscription's concurrency adapts between 1 and the static per-subscription limit (unless switched off).
  const { maxInFlightPerSubscription, adaptiveConcurrency } = config.dispatcher;
  const limiter = adaptiveConcurrency
    ? new ConcurrencyLimiter(
        { ceiling: maxInFlightPerSubscription, retryAfterCapMs: retryAfterCap(webhook.retryDelaysMs) },
        metrics.concurrency,
      )
    : undefined;

  // A circuit per subscription: an endpoint that keeps failing gets one probe at a time, not every delivery.
  const circuit = new CircuitBreaker(
    { ...config.dispatcher.circuit, probeTimeoutMs: webhook.attemptTimeoutMs * 2 },
    (subscriptionId, from, to, detail) => {
      metrics.circuit.transition(to);
      logger.warn({ subscriptionId, from, to, detail }, `circuit ${to}`);
    },
  );
  metrics.circuit.readOpen(() => circuit.openCount());

  const attempts = new DeliveryStore(platform.db, webhook.historyRetentionMs, {
    ...config.cassandra.writeBatch,
    lingerMs: config.dispatcher.historyLingerMs,
  });
  const orderStore = new EntityOrderStore(
    platform.db,
    new WriteBatcher(statementSender(platform.db), {
      ...config.cassandra.writeBatch,
      lingerMs: config.dispatcher.historyLingerMs,
    }),
  );
  const operational = await startOperationalOutbox(
    config,
    platform,
    publisher,
    {
      subscription: (tenantId, id) => subscriptionStore.get(tenantId, id),
      deliveryStatus: async (tenantId, id) => (await attempts.state(tenantId, id))?.status,
    },
    logger,
  );
  const signals = new OperationalSignals({
    intend: (event, check) => operational.outbox.intend(event, check),
    read: (tenantId, id) => subscriptionStore.get(tenantId, id),
    setHealth: (tenantId, id, expected, next) => subscriptionStore.setHealth(tenantId, id, expected, next),
    lastAttempt: async (tenantId, deliveryId) => (await attempts.attempts(tenantId, deliveryId)).at(-1),
    limit: new OperationalLimit(),
    logger,
    quietMs: OPERATIONAL_FAILING_QUIET_MS,
  });
  // maxDeliveriesPerSecond, across all dispatchers: this member's share of each limit (rate-limiter.ts for the design).
  const rates = new RateLimiter(partitionOf, (cause) => metrics.rateLimitedWait(cause));
  const handle = createDeliveryHandler({
    subscriptions: {
      get: (tenantId, id, readSince) => cache.get(tenantId, id, readSince),
      resetFailureDays: (tenantId, id) => subscriptionStore.resetFailureDays(tenantId, id),
      recordFailureDay: async (tenantId, id, window, disableAt) => {
        const counted = await subscriptionStore.recordFailureDay(tenantId, id, window, disableAt);
        if (counted?.disabledNow) {
          // Disabled here is a change like one made through the API: the routers (a marker in the tenant's partition
          // of each events topic, ahead of its later events) and the other dispatchers drop their cached read now.
          cache.forget(tenantId);
          await publisher.publish(
            subscriptionChangeMarkers([...config.kafka.sourceTopics, topics.subscriptionChanges], tenantId),
          );
        }
        return counted;
      },
    },
    attempts,
    // A record is a possible duplicate only when the handler says so (an ordered delivery's wait check).
    scheduleRetry: async (tier, record) =>
      publisher.publish([
        await deliveryMessage(
          topics.retries[tier]!.topic,
          { ...record, mayBeDuplicate: record.mayBeDuplicate === true },
          (value) => codec.encode(value),
        ),
      ]),
    send,
    authHeaders: createAuthHeaders(async ({ tokenUrl, body }) => {
      const response = await request(tokenUrl, {
        method: 'POST',
        dispatcher: agent,
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body,
        signal: AbortSignal.timeout(webhook.attemptTimeoutMs),
      });
      const answer = (await response.body.json()) as { access_token?: string; expires_in?: number };
      if (response.statusCode !== 200 || typeof answer.access_token !== 'string') {
        throw new Error(`token endpoint answered ${response.statusCode}`);
      }
      return { accessToken: answer.access_token, expiresInSeconds: Number(answer.expires_in ?? 300) };
    }),
    logger,
    metrics: metrics.delivery,
    concurrency: limiter,
    circuit,
    circuitMetrics: metrics.circuit,
    order: new EntityOrderGate({
      ledger: orderStore,
      state: (tenantId, deliveryId) => attempts.state(tenantId, deliveryId),
      supersede: async (row, state, by) => {
        await attempts.finish(
          { tenantId: by.tenantId, deliveryId: row.deliveryId, queuedAt: row.record.queuedAt },
          'superseded',
          `superseded by ${by.deliveryId}`,
          state.attemptCount,
        );
        metrics.delivery.outcome('superseded', undefined);
        logger.info({ deliveryId: row.deliveryId, by: by.deliveryId, outcome: 'superseded' }, 'delivery superseded');
      },
      // Its turn has come: back on the deliveries topic, checked there like any possible duplicate.
      release: async (record) =>
        publisher.publish([
          await deliveryMessage(topics.deliveries, { ...record, mayBeDuplicate: true }, (value) => codec.encode(value)),
        ]),
      now: Date.now,
      lifetimeMs: webhook.deliveryLifetimeMs,
    }),
    paceChained: async (subscriptionId) => {
      for (let wait = rates.wait(subscriptionId); wait > 0; wait = rates.wait(subscriptionId))
        await new Promise((resolve) => setTimeout(resolve, wait));
    },
    operational: signals,
    replayOutcomes: {
      ended: async (tenantId, jobId, outcome) => {
        await replayJobs.countOutcome(tenantId, jobId, outcome);
        metrics.replay.progress(outcome, 1);
      },
    },
    settings: webhook,
  });

  // A record is decoded once: before its lane (to learn its subscription's limit), and the handler reuses it.
  const decoded = new WeakMap<ConsumedRecord, Promise<DeliveryRecord>>();
  const decode = (record: ConsumedRecord, value: Buffer) => {
    let delivery = decoded.get(record);
    if (!delivery) {
      delivery = codec.decode(value);
      decoded.set(record, delivery);
      delivery.catch(() => decoded.delete(record)); // a failed decode is tried afresh by the handler
    }
    return delivery;
  };

  const consumer = new ConsumerRunner(platform.kafka, {
    groupId: `${config.kafka.topicPrefix}webhook-dispatcher`,
    // The overflow last: kafkajs' round-robin assignor deals partitions out in this order, and a topic between the
    // deliveries and the retry tiers would change which member owns which of their partitions.
    topics: [topics.deliveries, ...topics.retries.map((tier) => tier.topic), topics.overflow],
    maxInFlight: config.dispatcher.maxInFlight,
    maxInFlightPerGroup: config.dispatcher.maxInFlightPerTenant,
    lane: {
      of: (record) => record.key?.toString('utf8') ?? '',
      // Slots are shared between tenants in turn, and one tenant holds at most DISPATCHER_MAX_IN_FLIGHT_PER_TENANT.
      group: async (record) => (record.value ? (await decode(record, record.value)).tenantId : ''),
      // Its adaptive limit, and no more than the connections its origin will give it now (OriginGate.limitFor).
      limit: (subscriptionId) =>
        Math.min(limiter?.limit(subscriptionId) ?? maxInFlightPerSubscription, origins.limitFor(subscriptionId)),
      pace: {
        // The subscription's limit as the cache has it now (a change applies within WEBHOOK_SUBSCRIPTION_CACHE_TTL).
        prepare: async (subscriptionId, record) => {
          if (!record.value) return;
          const delivery = await decode(record, record.value);
          const subscription = await cache.get(delivery.tenantId, subscriptionId);
          rates.setLimit(subscriptionId, subscription?.maxDeliveriesPerSecond ?? null);
        },
        wait: (subscriptionId) => rates.wait(subscriptionId),
      },
      // A subscription's backlog beyond DISPATCHER_LANE_BACKLOG waits on the overflow topic, not in memory in front of
      // every other subscription of its partitions: the same bytes and headers, due after DISPATCHER_OVERFLOW_DELAY.
      overflow: {
        topic: topics.overflow,
        bound: () => config.dispatcher.laneBacklog,
        delayMs: config.dispatcher.overflowDelayMs,
        // Only a lane that would take longer than this to start its waiting records: a burst to healthy endpoints
        // drains faster from the buffer than through the overflow topic and back.
        waitMs: config.dispatcher.laneWaitMs,
        park: (record) =>
          publisher.publish([parkedMessage(topics.overflow, record, config.dispatcher.overflowDelayMs)]),
      },
    },
    onMembership: (membership) => rates.setView(membership),
    fromBeginning: true,
    fetchBytesPerPartition: config.dispatcher.fetchBytesPerPartition,
    // The tiers and the overflow are empty most of the time: left out of the fetches then, so that each fetch of the
    // deliveries topic carries its own partitions only.
    ...(config.dispatcher.quietCheckMs > 0 && {
      quiet: {
        topics: [...topics.retries.map((tier) => tier.topic), topics.overflow],
        checkEveryMs: config.dispatcher.quietCheckMs,
      },
    }),
    logger,
    metrics: metrics.consumer,
    // Stateless: exiting hands the partitions to the other members and lets the supervisor start a fresh process.
    onFatal: (error) => {
      logger.fatal({ err: error }, 'consumer stopped for good; exiting');
      process.exit(1);
    },
    dueAt: dueAtOf,
    dueSlackMs: config.dispatcher.dueSlackMs,
    handle: async (record, slot) => {
      if (!record.value) throw new PoisonRecordError('delivery record without a value');
      const delivery = await decode(record, record.value);
      // On the deliveries topic since the router published it, or past its due time in a retry tier.
      metrics.delivery.stage('queue_to_dispatch', Date.now() - Math.max(record.timestamp, delivery.dueAt));
      await handle(fromDeliveryMessage(record, delivery), slot);
    },
  });
  readiness.set(
    'consumer group',
    consumerJoined(() => consumer.assignedPartitions),
  );
  await consumer.start();
  logger.info(
    { topics: [topics.deliveries, topics.overflow, ...topics.retries.map((t) => t.topic)] },
    'dispatcher started',
  );
  // Changes made through the API since: the tenant's cached read is dropped, so pending deliveries follow them from
  // their next attempt (events raised after a change carry the version they were routed with: handled above).
  const changes = await tailTopic(
    platform.kafka,
    topics.subscriptionChanges,
    `${config.kafka.topicPrefix}webhook-dispatcher-changes-${randomUUID()}`,
    async (record) => {
      const tenant = changedTenant(record);
      if (tenant !== undefined) cache.forget(tenant);
    },
    { fromBeginning: false, maxWaitMs: 50 },
  );
  return async () => {
    // The deliveries first: the group rebalances as soon as this member leaves it, and every member waits for that.
    // The changes' tail keeps the cache true meanwhile.
    await consumer.stop();
    await changes.stop();
    await operational.stop();
    await publisher.close();
    await agent.close();
    metricsServer?.close();
  };
}
