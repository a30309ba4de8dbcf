import type { Subscription } from './subscription.ts';

/** Reads a tenant's subscriptions at most once per TTL (WEBHOOK_SUBSCRIPTION_CACHE_TTL) per process. */
export class SubscriptionCache {
  private readonly entries = new Map<string, { at: number; value: Promise<Subscription[]> }>();

  constructor(
    private readonly load: (tenantId: string) => Promise<Subscription[]>,
    private readonly ttlMs: number,
    private readonly maxTenants = 10_000,
  ) {}

  forTenant(tenantId: string): Promise<Subscription[]> {
    const now = Date.now();
    const cached = this.entries.get(tenantId);
    if (cached && now - cached.at < this.ttlMs) return cached.value;
    const value = this.load(tenantId);
    // A failed read must not be cached: the next caller tries again.
    value.catch(() => this.entries.delete(tenantId));
    if (this.entries.size >= this.maxTenants) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(tenantId, { at: now, value });
    return value;
  }

  async get(tenantId: string, id: string): Promise<Subscription | undefined> {
    return (await this.forTenant(tenantId)).find((subscription) => subscription.id === id);
  }
}
