/**
 * The services' own delivery path as warm-up load. A fresh Cassandra given a minute of generic writes, reads and
 * compare-and-sets still spent 22 s of its first bench run's 39 s of CPU in its JIT compiler threads (8 s in the second
 * run): the statements, tables and request sizes the router and dispatcher use are other code paths. So the warm-up
 * also runs a router and a dispatcher in this process on a scratch keyspace and topics, publishes events at the bench's
 * pace to two signed subscriptions of each of ten tenants, and lets them deliver to a receiver here; then it removes
 * what it made. Two events in five come from purchase orders validated through the purchase service's own code (its
 * store's read, compare-and-set and outbox relay), as `npm run bench -- --api` makes them: with the pipeline's path
 * warm but not that one, the API bench's first runs after a start took twice the warm runs' p99.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadConfig, requireSecrets } from '../../core/config.ts';
import { createKafka, Publisher } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { connectPlatform } from '../../core/platform.ts';
import { codecFor } from '../../core/registry.ts';
import { blankSubscription } from '../../core/subscriptions/subscription.ts';
import { SubscriptionStore } from '../../core/subscriptions/subscription-store.ts';
import { topicNames } from '../../core/topics.ts';
import { startDispatcher } from '../../dispatcher/dispatcher-service.ts';
import { draftPurchaseOrder } from '../../producer/purchase-order.ts';
import { orderTransitions } from '../../producer/purchase-routes.ts';
import { startPurchaseService } from '../../producer/purchase-service.ts';
import { startRouter } from '../../router/router-service.ts';
import { deprovision, provision } from '../provision.ts';
import type { ServerEndpoints } from '../servers.ts';
import { endpointsEnv } from './util.ts';

/** The scratch environment's names: fixed, so that a start cleans up what an interrupted one left. */
export const WARM_UP_PIPELINE_KEYSPACE = 'core_warm_up_pipeline';
export const WARM_UP_PIPELINE_PREFIX = '_core_warm_up.';

const TENANTS = 10;
const SUBSCRIPTIONS_PER_TENANT = 2;
/** Events a second: with two subscriptions each, the 500 deliveries/s of `npm run bench -- --rate 500`. */
const EVENTS_PER_SECOND = 250;
const TICK_MS = 20;
/** How long the last events may take to arrive once publishing stopped. */
const DRAIN_MS = 15_000;

export interface PipelineWarmUp {
  /** Events published directly, and purchase orders validated (their events published by the relay). */
  published: number;
  validated: number;
  delivered: number;
}

/** A router and a dispatcher started on the scratch environment, with their subscriptions and a receiver. */
export interface ScratchPipeline {
  /** Publishes events until `until` (one tick at least) and waits for their deliveries, `DRAIN_MS` at most. */
  load(until: number): Promise<PipelineWarmUp>;
  /** Stops the services and removes the scratch keyspace and topics. */
  close(): Promise<void>;
}

/**
 * Provisions the scratch environment and starts the services on it. Its schema changes and topics take tens of seconds
 * on a cold Cassandra (more beside other load), so the warm-up makes it first and loads afterwards.
 */
export async function openPipeline(
  endpoints: ServerEndpoints,
  settings: Readonly<Record<string, string>> = {},
): Promise<ScratchPipeline> {
  const config = loadConfig({
    ...settings,
    ...endpointsEnv(endpoints),
    CASSANDRA_KEYSPACE: WARM_UP_PIPELINE_KEYSPACE,
    KAFKA_TOPIC_PREFIX: WARM_UP_PIPELINE_PREFIX,
    KAFKA_PARTITIONS: '6',
    SECRETS_KEY: randomBytes(32).toString('base64'),
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    WEBHOOK_RETRY_DELAYS: '1s,2s',
  });
  const logger = createLogger('warm-up', 'error');
  // What a warm-up stopped midway (a killed start) left behind.
  await deprovision(config, logger);
  await provision(config, logger);
  const delivered = new Set<string>();
  const receiver = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      delivered.add(String(request.headers['x-webhook-delivery-id']));
      response.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`;
  const platform = await connectPlatform(config, logger, 'warm-up');
  const stops: (() => Promise<void>)[] = [];
  const close = async () => {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
    await platform.close().catch(() => undefined);
    receiver.closeAllConnections();
    await new Promise((resolve) => receiver.close(resolve));
    await deprovision(config, logger);
  };
  try {
    const store = new SubscriptionStore(platform.db, requireSecrets(config));
    const tenants = Array.from({ length: TENANTS }, (_, index) => `warm-up-tenant-${index}`);
    for (const tenantId of tenants) {
      for (let index = 0; index < SUBSCRIPTIONS_PER_TENANT; index += 1) {
        await store.save({
          ...blankSubscription(tenantId, randomUUID(), new Date()),
          url,
          eventTypes: ['purchaseOrder.*'],
          authenticationMode: 'Hmac',
          secrets: { hmacSecret: `warm-up-secret-${randomUUID()}` },
        });
      }
    }
    stops.push(await startRouter(config, platform, logger));
    stops.push(await startDispatcher(config, platform, logger));
    const purchases = await startPurchaseService(config, platform, logger, { relay: true });
    stops.push(purchases.stop);
    const { applyTransition } = orderTransitions(purchases.store);
    const item = { id: randomUUID(), code: 'warm-up', name: 'Warm-up', unitPrice: '1.00', createdAt: '' };
    /** A draft written, then validated: the API's validate call without its HTTP, its event published by the relay. */
    const validate = async (tenantId: string): Promise<void> => {
      const now = new Date().toISOString();
      const rows = [{ item, quantity: '1', description: null }];
      const draft = draftPurchaseOrder({
        id: randomUUID(),
        supplierName: 'Warm-up',
        currency: 'EUR',
        rows,
        amends: null,
        now,
      });
      await purchases.store.createOrder(tenantId, draft);
      await applyTransition(tenantId, draft.id, 'validate', undefined);
    };
    const topic = topicNames(config).purchaseEvents;
    const codec = await codecFor<Record<string, unknown>>(platform.registry, 'integrationEvent', topic);
    const publisher = await Publisher.connect(createKafka(config.kafka.brokers, 'core-warm-up-events', logger));
    stops.push(() => publisher.close());
    const load = async (until: number): Promise<PipelineWarmUp> => {
      let published = 0;
      let validated = 0;
      const validations: Promise<void>[] = [];
      const perTick = Math.max(2, Math.round((EVENTS_PER_SECOND * TICK_MS) / 1000));
      const validatedPerTick = Math.floor(perTick / 2);
      for (let next = Date.now(); published === 0 || Date.now() < until; next += TICK_MS) {
        for (let index = 0; index < validatedPerTick; index += 1) {
          // Not awaited before the next tick either; one that fails (a timeout on a cold node) only warms less.
          const tenantId = tenants[validations.length % tenants.length]!;
          validations.push(
            validate(tenantId).then(
              () => void (validated += 1),
              () => undefined,
            ),
          );
        }
        const records = await Promise.all(
          Array.from({ length: perTick - validatedPerTick }, async (_, index) => {
            const entityId = randomUUID();
            const tenantId = tenants[(published + index) % tenants.length]!;
            return {
              topic,
              key: tenantId,
              value: await codec.encode({
                eventId: randomUUID(),
                eventType: 'purchaseOrder.validated',
                occurredAt: new Date().toISOString(),
                tenantId,
                entityId,
                reference: null,
                resourceUrl: `/CorePurchase/REST/PurchaseOrders/${entityId}`,
                payload: Buffer.from(JSON.stringify({ id: entityId, lines: [{ sku: 'warm-up', quantity: 1 }] })),
              }),
            };
          }),
        );
        // Not awaited before the next tick: a slow acknowledgement must not lower the pace.
        void publisher.publish(records).catch(() => undefined);
        published += records.length;
        await new Promise((resolve) => setTimeout(resolve, Math.max(0, next + TICK_MS - Date.now())));
      }
      // Their events are published once they are committed: the count to wait for is known only then.
      await Promise.all(validations);
      const drainUntil = Date.now() + DRAIN_MS;
      while (delivered.size < (published + validated) * SUBSCRIPTIONS_PER_TENANT && Date.now() < drainUntil) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      return { published, validated, delivered: delivered.size };
    };
    return { load, close };
  } catch (error) {
    await close().catch(() => undefined);
    throw error;
  }
}
