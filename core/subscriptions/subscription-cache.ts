import type { Subscription } from './subscription.ts';

interface TenantSubscriptions {
  list: Subscription[];
  byId: Map<string, Subscription>;
}

/** Reads a tenant's subscriptions at most once per TTL (WEBHOOK_SUBSCRIPTION_CACHE_TTL) per process. */
export class SubscriptionCache {
  private readonly entries = new Map<string, { at: number; value: Promise<TenantSubscriptions> }>();

  constructor(
    private readonly load: (tenantId: string) => Promise<Subscription[]>,
    private readonly ttlMs: number,
    private readonly maxTenants = 10_000,
  ) {}

  async forTenant(tenantId: string): Promise<Subscription[]> {
    return (await this.entry(tenantId)).list;
  }

  /**
   * One subscription by id: a map lookup, since the dispatcher asks for every delivery. With `readSince` (epoch ms),
   * the tenant's subscriptions as read by a load begun at or after it: a cached read begun earlier is replaced.
   */
  async get(tenantId: string, id: string, readSince = 0): Promise<Subscription | undefined> {
    return (await this.entry(tenantId, readSince)).byId.get(id);
  }

  /** Drops the tenant's cached read: the next lookup reads the store (a change marker was reached). */
  forget(tenantId: string): void {
    this.entries.delete(tenantId);
  }

  /** Drops every cached read (partitions changed hands: markers handled by their previous owner were not seen here). */
  clear(): void {
    this.entries.clear();
  }

  private entry(tenantId: string, readSince = 0): Promise<TenantSubscriptions> {
    const now = Date.now();
    const cached = this.entries.get(tenantId);
    if (cached && now - cached.at < this.ttlMs && cached.at >= readSince) return cached.value;
    const value = this.load(tenantId).then((list) => ({
      list,
      byId: new Map(list.map((subscription) => [subscription.id, subscription])),
    }));
    // A failed read must not be cached: the next caller tries again.
    value.catch(() => this.entries.delete(tenantId));
    if (this.entries.size >= this.maxTenants) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(tenantId, { at: now, value });
    return value;
  }
}
