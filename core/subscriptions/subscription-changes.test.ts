import { describe, expect, it } from 'vitest';

import type { ConsumedRecord } from '../kafka.ts';
import { changedTenant, subscriptionChangeMarkers } from './subscription-changes.ts';

const consumed = (record: { key: string; value: Buffer | null; headers?: Record<string, string> }): ConsumedRecord => ({
  topic: 'purchase.events',
  partition: 0,
  offset: '0',
  key: Buffer.from(record.key),
  value: record.value,
  headers: record.headers ?? {},
  timestamp: 0,
});

describe('subscription change markers', () => {
  it("go to every events topic, in the tenant's partition (its key), without a value", () => {
    expect(subscriptionChangeMarkers(['purchase.events', 'billing.events'], 'tenant-a')).toEqual([
      { topic: 'purchase.events', key: 'tenant-a', value: null, headers: { 'subscriptions-changed': '1' } },
      { topic: 'billing.events', key: 'tenant-a', value: null, headers: { 'subscriptions-changed': '1' } },
    ]);
  });

  it('are told from events by their header, and name the tenant', () => {
    const [marker] = subscriptionChangeMarkers(['purchase.events'], 'tenant-a');
    expect(changedTenant(consumed({ ...marker!, headers: marker!.headers }))).toBe('tenant-a');
    expect(changedTenant(consumed({ key: 'tenant-a', value: Buffer.from('event') }))).toBeUndefined();
  });
});
