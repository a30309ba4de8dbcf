import { retryTopicName, type Config } from './config.ts';

/** Names of every topic the system uses, derived from configuration. */
export interface TopicNames {
  purchaseEvents: string;
  deliveries: string;
  /** Where a dispatcher parks the backlog of a subscription whose lane is full, until it has room (lane.overflow). */
  overflow: string;
  /** One per step of WEBHOOK_RETRY_DELAYS, in order; the last one repeats. */
  retries: { delayMs: number; topic: string }[];
  eventTypes: string;
  /** Subscription change markers every dispatcher tails (core/subscriptions/subscription-changes.ts). */
  subscriptionChanges: string;
}

export function topicNames(config: Config): TopicNames {
  const prefix = config.kafka.topicPrefix;
  const delays = [...new Set(config.webhook.retryDelaysMs)];
  return {
    purchaseEvents: `${prefix}purchase.events`,
    deliveries: `${prefix}webhook.deliveries`,
    overflow: `${prefix}webhook.deliveries.overflow`,
    retries: delays.map((delayMs) => ({ delayMs, topic: retryTopicName(prefix, delayMs) })),
    eventTypes: `${prefix}webhook.event-types`,
    subscriptionChanges: `${prefix}webhook.subscription-changes`,
  };
}

/** One topic as `topics apply` creates it. */
export interface TopicSpec {
  name: string;
  partitions: number;
  /** -1 takes the broker's default replication factor. */
  replicationFactor: number;
  config: Record<string, string>;
}

/**
 * Largest record of the delivery and retry topics: the largest envelope (a 204,800 B payload plus the envelope fields
 * and signature, about 205 KB) and its Avro framing fit ten times over. The broker's default (1 MiB) would also fit,
 * but stating it keeps a broker-wide change from silently refusing our records.
 */
const DELIVERY_MAX_MESSAGE_BYTES = 2 * 1024 * 1024;

/** The topic layout `topics apply` converges to. */
export function topicLayout(config: Config): TopicSpec[] {
  const names = topicNames(config);
  const partitions = config.kafka.partitions;
  // A retry record must outlive its delay plus the delivery lifetime, whichever tier it waits in.
  const retryRetentionMs = String(Math.max(config.webhook.deliveryLifetimeMs * 2, 7 * 86_400_000));
  const delivery = {
    'retention.ms': retryRetentionMs,
    'max.message.bytes': String(DELIVERY_MAX_MESSAGE_BYTES),
  };
  const topics: Omit<TopicSpec, 'replicationFactor'>[] = [
    // A purchase order of 5,000 rows with long descriptions is tens of megabytes: raise the record size limit.
    {
      name: names.purchaseEvents,
      partitions,
      config: { 'retention.ms': String(7 * 86_400_000), 'max.message.bytes': String(64 * 1024 * 1024) },
    },
    { name: names.deliveries, partitions, config: delivery },
    { name: names.overflow, partitions, config: delivery },
    ...names.retries.map(({ topic }) => ({ name: topic, partitions, config: delivery })),
    { name: names.eventTypes, partitions: 1, config: { 'cleanup.policy': 'compact' } },
    // Read from their end by dispatchers as they start: a day is kept only for inspection.
    { name: names.subscriptionChanges, partitions: 1, config: { 'retention.ms': String(86_400_000) } },
  ];
  // acks=all waits for the in-sync replicas only: without a floor on their number, a leader alone acknowledges.
  return topics.map((topic) => ({
    ...topic,
    replicationFactor: config.kafka.replicationFactor,
    config: { ...topic.config, 'min.insync.replicas': String(config.kafka.minInsyncReplicas) },
  }));
}
