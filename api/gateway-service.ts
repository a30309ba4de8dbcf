import { randomUUID } from 'node:crypto';
import { Catalogue, type EventTypeEntry } from '../core/catalogue.ts';
import { requireSecrets, type Config } from '../core/config.ts';
import { createTokenVerifier } from '../core/auth/verifier.ts';
import { DeliveryStore } from '../core/deliveries/delivery-store.ts';
import { IntegratorStore } from '../core/integrators/integrator-store.ts';
import { Publisher, tailTopic } from '../core/kafka.ts';
import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import type { Logger } from '../core/log.ts';
import type { Platform } from '../core/platform.ts';
import { codecFor } from '../core/registry.ts';
import { parseCidrs } from '../core/ssrf.ts';
import { IdempotencyStore } from '../core/subscriptions/idempotency-store.ts';
import { SubscriptionStore } from '../core/subscriptions/subscription-store.ts';
import { topicNames } from '../core/topics.ts';
import { startPurchaseService } from '../producer/purchase-service.ts';
import { buildGateway } from './gateway.ts';
import { lookup } from 'node:dns/promises';

/** Starts the gateway: both APIs on one port, the purchase outbox relay, and the catalogue follower. */
export async function startGateway(
  config: Config,
  platform: Platform,
  logger: Logger,
  apis: { webhook: boolean; purchase: boolean },
): Promise<() => Promise<void>> {
  const topics = topicNames(config);
  const verifier = createTokenVerifier(config.auth);
  const integrators = new IntegratorStore(platform.db);
  const purchase = apis.purchase
    ? await startPurchaseService(config, platform, logger, { relay: config.purchase.outboxRelay })
    : undefined;
  let catalogueTail: { stop(): Promise<void> } | undefined;
  let webhook;
  let publisher: Publisher | undefined;
  if (apis.webhook) {
    const replays = await Publisher.connect(platform.kafka);
    publisher = replays;
    const deliveryCodec = await codecFor<DeliveryRecord>(platform.registry, 'delivery', topics.deliveries);
    const catalogue = new Catalogue(await codecFor<EventTypeEntry>(platform.registry, 'eventType', topics.eventTypes));
    catalogueTail = await tailTopic(platform.kafka, topics.eventTypes, `catalogue-${randomUUID()}`, (record) =>
      catalogue.apply(record.value, record.key),
    );
    webhook = {
      subscriptions: new SubscriptionStore(platform.db, requireSecrets(config)),
      deliveries: new DeliveryStore(platform.db, config.webhook.historyRetentionMs),
      idempotency: new IdempotencyStore(platform.db),
      catalogue,
      historyRetentionMs: config.webhook.historyRetentionMs,
      payloadLimitBytes: config.webhook.payloadLimitBytes,
      enqueue: async (record: DeliveryRecord) =>
        replays.publish([
          { topic: topics.deliveries, key: record.subscriptionId, value: await deliveryCodec.encode(record) },
        ]),
      rules: {
        allowHttp: config.webhook.allowHttp,
        allowed: parseCidrs(config.webhook.allowedCidrs),
        resolve: async (host: string) => (await lookup(host, { all: true })).map((entry) => entry.address),
      },
    };
  }
  const app = await buildGateway({
    logger,
    verifier,
    integrators,
    webhook,
    purchase: purchase ? { store: purchase.store } : undefined,
  });
  await app.listen({ host: config.gateway.host, port: config.gateway.port });
  logger.info({ baseUrl: config.gateway.baseUrl }, 'gateway listening');
  return async () => {
    await app.close();
    await catalogueTail?.stop();
    await purchase?.stop();
    await publisher?.close();
    verifier.close?.();
  };
}
