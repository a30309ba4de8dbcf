import type { ConsumedRecord, OutgoingRecord } from '../kafka.ts';

/**
 * Subscription changes reach the routers in order with the events. The API, once a tenant's subscription is stored and
 * before it answers, puts a marker on each events topic the routers read, keyed by the tenant like its events: in the
 * tenant's partition, every event raised after the answer comes after the marker. A router reaching the marker drops
 * its cached read of the tenant's subscriptions, so it routes those events with the change. The same marker goes to
 * the subscription changes topic, which every dispatcher tails: a dispatcher drops its cached read too, so deliveries
 * routed before the change (pending retries) follow it from their next attempt, a tail's lag later.
 */
export const SUBSCRIPTIONS_CHANGED_HEADER = 'subscriptions-changed';

/** The markers of a change to `tenantId`'s subscriptions: one per events topic, no value. */
export function subscriptionChangeMarkers(topics: readonly string[], tenantId: string): OutgoingRecord[] {
  return topics.map((topic) => ({
    topic,
    key: tenantId,
    value: null,
    headers: { [SUBSCRIPTIONS_CHANGED_HEADER]: '1' },
  }));
}

/** The tenant whose subscriptions changed, if `record` is a marker. */
export function changedTenant(record: ConsumedRecord): string | undefined {
  if (record.headers[SUBSCRIPTIONS_CHANGED_HEADER] === undefined) return undefined;
  return record.key?.toString('utf8');
}
