import { describe, expect, it } from 'vitest';

import { SubscriptionCache } from './subscription-cache.ts';
import { blankSubscription, type Subscription } from './subscription.ts';

function counted(list: () => Subscription[]) {
  const loads: number[] = [];
  const cache = new SubscriptionCache(async () => {
    loads.push(Date.now());
    return list();
  }, 60_000);
  return { cache, loads };
}

describe('SubscriptionCache', () => {
  it("reads a tenant's subscriptions once per TTL", async () => {
    const { cache, loads } = counted(() => [blankSubscription('t', 's1', new Date(0))]);
    expect((await cache.get('t', 's1'))?.id).toBe('s1');
    expect(await cache.get('t', 'other')).toBeUndefined();
    expect(await cache.forTenant('t')).toHaveLength(1);
    expect(loads).toHaveLength(1);
  });

  it('reads again for readSince later than the cached read began, not for an earlier one', async () => {
    let list: Subscription[] = [];
    const { cache, loads } = counted(() => list);
    const before = Date.now();
    expect(await cache.get('t', 's1')).toBeUndefined();
    list = [blankSubscription('t', 's1', new Date(0))];
    expect(await cache.get('t', 's1', before)).toBeUndefined(); // that read began at or after `before`: still valid
    expect((await cache.get('t', 's1', Date.now() + 1))?.id).toBe('s1');
    expect(loads).toHaveLength(2);
    expect((await cache.get('t', 's1'))?.id).toBe('s1'); // the fresh read replaced the cached one
    expect(loads).toHaveLength(2);
  });

  it('does not keep a failed read: the next caller reads again', async () => {
    let fail = true;
    const cache = new SubscriptionCache(async () => {
      if (fail) throw new Error('cassandra unavailable');
      return [];
    }, 60_000);
    await expect(cache.get('t', 's1')).rejects.toThrow('cassandra unavailable');
    fail = false;
    expect(await cache.get('t', 's1')).toBeUndefined();
  });
});
