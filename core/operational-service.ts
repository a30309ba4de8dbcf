import type { Config } from './config.ts';
import { MAY_BE_DUPLICATE_HEADER } from './deliveries/delivery-record.ts';
import type { Publisher } from './kafka.ts';
import type { Logger } from './log.ts';
import type { OperationalEvent } from './operational-events.ts';
import { CassandraPendingEvents, OperationalOutbox, type OperationalCheck } from './operational-outbox.ts';
import type { Platform } from './platform.ts';
import { codecFor } from './registry.ts';
import type { Subscription } from './subscriptions/subscription.ts';
import { topicNames } from './topics.ts';

/** How often a process sweeps pending operational events, and how old one is before a sweep takes it. */
const SWEEP_INTERVAL_MS = 30_000;
const SETTLE_MS = 60_000;

/** What a pending event's check reads. */
export interface CheckReads {
  subscription(tenantId: string, id: string): Promise<Subscription | undefined>;
  deliveryStatus(tenantId: string, deliveryId: string): Promise<string | undefined>;
}

/** Whether a pending operational event's change was made (see OperationalCheck). */
export async function changeMade(check: OperationalCheck, reads: CheckReads): Promise<boolean> {
  if (check.kind === 'delivery-abandoned')
    return (await reads.deliveryStatus(check.tenantId, check.deliveryId)) === 'abandoned';
  const subscription = await reads.subscription(check.tenantId, check.subscriptionId);
  switch (check.kind) {
    case 'subscription-absent':
      return subscription === undefined;
    case 'subscription-exists':
      return subscription !== undefined && subscription.updatedAt.getTime() >= check.since;
    case 'subscription-disabled':
      return subscription?.status === 'disabled';
    case 'subscription-failing': {
      const since = subscription?.failingSince?.getTime();
      return check.still ? since === check.failingSince : subscription !== undefined && since !== check.failingSince;
    }
  }
}

/**
 * The operational events outbox of a service (API, dispatcher): events go to the events topic the routers read (keyed
 * by tenant, Avro like the producer's), and pending ones are swept until `stop`.
 */
export async function startOperationalOutbox(
  config: Config,
  platform: Platform,
  publisher: Publisher,
  reads: CheckReads,
  logger: Logger,
): Promise<{ outbox: OperationalOutbox; stop(): Promise<void> }> {
  const topic = topicNames(config).purchaseEvents;
  const codec = await codecFor<OperationalEvent>(platform.registry, 'integrationEvent', topic);
  const outbox = new OperationalOutbox({
    pending: new CassandraPendingEvents(platform.db),
    publish: async (events, mayBeDuplicate) =>
      publisher.publish(
        await Promise.all(
          events.map(async (event) => ({
            topic,
            key: event.tenantId,
            value: await codec.encode(event),
            headers: mayBeDuplicate ? { [MAY_BE_DUPLICATE_HEADER]: '1' } : undefined,
          })),
        ),
      ),
    verify: (check) => changeMade(check, reads),
    logger,
    publishTimeoutMs: config.gateway.dependencyTimeoutMs,
    settleMs: SETTLE_MS,
  });
  const stopping = new AbortController();
  const sweeping = outbox.run(stopping.signal, SWEEP_INTERVAL_MS);
  return {
    outbox,
    stop: async () => {
      stopping.abort();
      await sweeping;
    },
  };
}
