import { retryTopicName, type Config } from './config.ts';

/** Names of every topic the system uses, derived from configuration. */
export interface TopicNames {
  purchaseEvents: string;
  deliveries: string;
  /** One per step of WEBHOOK_RETRY_DELAYS, in order; the last one repeats. */
  retries: { delayMs: number; topic: string }[];
  eventTypes: string;
}

export function topicNames(config: Config): TopicNames {
  const prefix = config.kafka.topicPrefix;
  const delays = [...new Set(config.webhook.retryDelaysMs)];
  return {
    purchaseEvents: `${prefix}purchase.events`,
    deliveries: `${prefix}webhook.deliveries`,
    retries: delays.map((delayMs) => ({ delayMs, topic: retryTopicName(prefix, delayMs) })),
    eventTypes: `${prefix}webhook.event-types`,
  };
}

/** The topic layout `topics apply` converges to. */
export function topicLayout(config: Config): { name: string; partitions: number; config?: Record<string, string> }[] {
  const names = topicNames(config);
  const partitions = config.kafka.partitions;
  // A retry record must outlive its delay plus the delivery lifetime, whichever tier it waits in.
  const retryRetentionMs = String(Math.max(config.webhook.deliveryLifetimeMs * 2, 7 * 86_400_000));
  return [
    // A purchase order of 5,000 rows with long descriptions is tens of megabytes: raise the record size limit.
    {
      name: names.purchaseEvents,
      partitions,
      config: { 'retention.ms': String(7 * 86_400_000), 'max.message.bytes': String(64 * 1024 * 1024) },
    },
    { name: names.deliveries, partitions, config: { 'retention.ms': retryRetentionMs } },
    ...names.retries.map(({ topic }) => ({ name: topic, partitions, config: { 'retention.ms': retryRetentionMs } })),
    { name: names.eventTypes, partitions: 1, config: { 'cleanup.policy': 'compact' } },
  ];
}
