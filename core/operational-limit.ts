/** Keys remembered at most; past it the ones whose bucket is full again are forgotten (they are as new). */
const MAX_KEYS = 100_000;

/** What the limit decided for one event: raise it (saying how many it kept quiet since the last), or keep it quiet. */
export type LimitDecision = { raise: true; suppressed: number } | { raise: false };

/**
 * The rate limit of operational events that can come in numbers (`delivery.abandoned`, `subscription.updated`): per
 * subscription and type, a bucket of `burst` events refilled by one every `everyMs` (10 at once and one a minute: 70 in
 * the first hour at most, 60 an hour after). An event over it is not raised; the next one raised says how many were
 * kept quiet. Per process: N dispatchers raise up to N times as many.
 */
export class OperationalLimit {
  private readonly buckets = new Map<string, { tokens: number; at: number; suppressed: number }>();

  constructor(
    private readonly burst = 10,
    private readonly everyMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  take(subscriptionId: string, eventType: string): LimitDecision {
    const key = `${eventType}\u0000${subscriptionId}`;
    const at = this.now();
    const bucket = this.buckets.get(key) ?? { tokens: this.burst, at, suppressed: 0 };
    bucket.tokens = Math.min(this.burst, bucket.tokens + (at - bucket.at) / this.everyMs);
    bucket.at = at;
    if (!this.buckets.has(key)) {
      if (this.buckets.size >= MAX_KEYS) this.forgetFull(at);
      this.buckets.set(key, bucket);
    }
    if (bucket.tokens < 1) {
      bucket.suppressed += 1;
      return { raise: false };
    }
    bucket.tokens -= 1;
    const suppressed = bucket.suppressed;
    bucket.suppressed = 0;
    return { raise: true, suppressed };
  }

  private forgetFull(at: number): void {
    for (const [key, bucket] of this.buckets) {
      const full = bucket.tokens + (at - bucket.at) / this.everyMs >= this.burst;
      if (full && bucket.suppressed === 0) this.buckets.delete(key);
    }
    // Still full of busy keys: the oldest goes (its count kept quiet is lost, its next event says 0).
    if (this.buckets.size >= MAX_KEYS) this.buckets.delete(this.buckets.keys().next().value!);
  }
}
