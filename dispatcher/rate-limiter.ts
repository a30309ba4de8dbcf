import type { RateLimitWait } from '../core/metrics.ts';

/**
 * Per-subscription delivery rate limits (maxDeliveriesPerSecond), enforced across all dispatchers without any shared
 * write on the hot path.
 *
 * Design: a subscription's records reach a dispatcher only through the partitions its key (the subscription id) maps to,
 * one per topic (the deliveries topic and each retry tier). After every join, each dispatcher reads the group's
 * assignment (describeGroups) and finds the members that own one of those partitions: the subscription's owners. Each
 * owner paces the start of attempts with a token bucket at limit / owners (itself counted even when it owns none, for
 * records left over from before a rebalance), so the owners together start at most `limit` per second; a subscription
 * whose partitions all sit on one dispatcher still gets its full limit there. Burst: each bucket holds one token, so in
 * any 1-second window a subscription sees at most limit + (number of owners) attempt starts, plus the spread of network
 * and answer times. Between a rebalance starting and the new assignment being read, limited subscriptions start
 * nothing (held), so no member uses a share it had before the group grew. Unlimited subscriptions never reach a bucket.
 *
 * Why not a shared counter per (subscription, second) in Cassandra: a write per attempt (and a read of it) on the hot
 * path, and counters that cannot refuse an increment over the limit. The cost of shares: while two members own a
 * subscription's partitions but only one has its records, that one uses only its share (limit / owners).
 */

/** The consumer group as one member sees it after joining: itself and each member's partitions by topic. */
export interface GroupView {
  self: string;
  members: { memberId: string; assignment: Record<string, number[]> }[];
}

/**
 * The share of a key's limit this member may use: 1 / the members owning a partition the key maps to in any topic
 * (this member counted in any case). Partition counts are read from the assignment (a stable group assigns them all).
 */
export function shareOf(
  key: string,
  view: GroupView,
  partitionOf: (key: string, partitions: number) => number,
): number {
  const counts = new Map<string, number>();
  for (const { assignment } of view.members) {
    for (const [topic, partitions] of Object.entries(assignment)) {
      counts.set(topic, Math.max(counts.get(topic) ?? 0, ...partitions.map((p) => p + 1)));
    }
  }
  const owners = new Set<string>([view.self]);
  for (const [topic, count] of counts) {
    const partition = partitionOf(key, count);
    for (const member of view.members) {
      if (member.assignment[topic]?.includes(partition)) owners.add(member.memberId);
    }
  }
  return 1 / owners.size;
}

/** A token bucket holding at most one token, refilled at `ratePerSecond`: attempts start at most that often. */
export class TokenBucket {
  private tokens = 1;
  private at: number;

  constructor(
    private ratePerSecond: number,
    now: number,
  ) {
    this.at = now;
  }

  /** 0 when a token was taken now, else the ms until one will be there. */
  take(now: number): number {
    this.refill(now);
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil(((1 - this.tokens) / this.ratePerSecond) * 1000));
  }

  /** Changes the rate from now on (tokens gathered so far are kept). */
  setRate(ratePerSecond: number, now: number): void {
    this.refill(now);
    this.ratePerSecond = ratePerSecond;
  }

  get rate(): number {
    return this.ratePerSecond;
  }

  /** True when the bucket is full: it then behaves as a new one and can be forgotten. */
  full(now: number): boolean {
    this.refill(now);
    return this.tokens >= 1;
  }

  private refill(now: number): void {
    this.tokens = Math.min(1, this.tokens + (Math.max(0, now - this.at) / 1000) * this.ratePerSecond);
    this.at = now;
  }
}

/** How long a lane waits before asking again while limited subscriptions are held (no group view yet). */
export const HELD_RETRY_MS = 100;

/**
 * Per-subscription rate limits of this dispatcher: learns each subscription's limit as its records arrive, and tells
 * the consumer's lane for a subscription whether its next record may start now.
 */
export class RateLimiter {
  private readonly limits = new Map<string, { perSecond: number; seenAt: number }>();
  private readonly buckets = new Map<string, TokenBucket>();
  private readonly shares = new Map<string, number>();
  private view: GroupView | undefined;
  private lastSweep = 0;

  constructor(
    private readonly partitionOf: (key: string, partitions: number) => number,
    private readonly onWait?: (cause: RateLimitWait) => void,
    private readonly now: () => number = Date.now,
    private readonly idleMs = 10 * 60_000,
  ) {}

  /** Notes a subscription's limit (null: unlimited), read with each of its records. */
  setLimit(subscriptionId: string, perSecond: number | null): void {
    if (perSecond === null) {
      this.limits.delete(subscriptionId);
      this.buckets.delete(subscriptionId);
    } else {
      this.limits.set(subscriptionId, { perSecond, seenAt: this.now() });
    }
  }

  /** The group as read after a join; undefined while a rebalance is under way (limited subscriptions are held). */
  setView(view: GroupView | undefined): void {
    this.view = view;
    this.shares.clear();
  }

  /** 0 when the subscription's next attempt may start now (its token taken), else the ms to wait before asking again. */
  wait(subscriptionId: string): number {
    const limit = this.limits.get(subscriptionId);
    if (!limit) return 0; // unlimited: no bucket, no clock
    const now = this.now();
    limit.seenAt = now;
    this.sweep(now);
    const rate = this.rateOf(subscriptionId, limit.perSecond);
    if (rate === undefined) {
      this.onWait?.('held');
      return HELD_RETRY_MS;
    }
    let bucket = this.buckets.get(subscriptionId);
    if (!bucket) {
      bucket = new TokenBucket(rate, now);
      this.buckets.set(subscriptionId, bucket);
    } else if (bucket.rate !== rate) {
      bucket.setRate(rate, now);
    }
    const waitMs = bucket.take(now);
    if (waitMs > 0) this.onWait?.('token');
    return waitMs;
  }

  /** This member's rate for the subscription, or undefined while the group is not known. */
  rateOf(subscriptionId: string, perSecond: number): number | undefined {
    if (!this.view) return undefined;
    let share = this.shares.get(subscriptionId);
    if (share === undefined) {
      share = shareOf(subscriptionId, this.view, this.partitionOf);
      if (this.shares.size >= 100_000) this.shares.clear();
      this.shares.set(subscriptionId, share);
    }
    return perSecond * share;
  }

  /** Forgets, at most once a minute, limits not seen for idleMs and full buckets (a new bucket starts full). */
  private sweep(now: number): void {
    if (now - this.lastSweep < 60_000) return;
    this.lastSweep = now;
    for (const [id, bucket] of this.buckets) if (bucket.full(now)) this.buckets.delete(id);
    for (const [id, limit] of this.limits) if (now - limit.seenAt > this.idleMs) this.limits.delete(id);
  }
}
