import { MOST_THROTTLED, type ConcurrencyMetrics, type LimitsSnapshot, type ThrottleReason } from '../core/metrics.ts';
import type { AttemptResult } from './outcome.ts';

/** How a subscription's concurrent attempts adapt; only floor, ceiling and the Retry-After cap come from config. */
export interface LimiterSettings {
  /** The static per-subscription limit (DISPATCHER_MAX_IN_FLIGHT_PER_SUBSCRIPTION): where a subscription starts. */
  ceiling: number;
  /** The longest Retry-After window honoured (the longest retry delay). */
  retryAfterCapMs: number;
  floor?: number;
  /** Multiplied into the limit on a 429, a 503, a timeout or a refused or dropped connection. */
  backoff?: number;
  /** Multiplied into the limit when the answers' latency rises. */
  latencyBackoff?: number;
  /** Latency is rising when its recent average exceeds the baseline this many times… */
  latencyTolerance?: number;
  /** …and by at least this much (jitter of a few ms on a fast endpoint, or a busy event loop, is no signal). */
  latencyExcessMs?: number;
  /** A subscription no attempt began for in this long is forgotten (it starts again at the ceiling). */
  idleMs?: number;
  /** Subscriptions tracked at most; the one least recently begun with nothing in flight makes room. */
  maxTracked?: number;
}

/** The state of one subscription's limit. */
interface SubscriptionLimit {
  tenantId: string;
  /** Fractional: additive increase adds 1/limit per success, so it grows by about 1 per window of answers. */
  limit: number;
  inFlight: number;
  /** Epoch ms before which the limit stays at the floor: the end of the last Retry-After window. */
  heldUntil: number;
  /** Attempts begun so far, and how many had begun at the last decrease. */
  begun: number;
  begunAtDecrease: number;
  /** Long-run latency (follows drops at once, rises slowly) and recent latency (a short moving average), in ms. */
  baselineMs: number | undefined;
  recentMs: number | undefined;
  lastUsed: number;
}

/** Weight of a new sample in the recent latency, and in the baseline when it lies above it. */
const RECENT_WEIGHT = 0.2;
const BASELINE_RISE = 0.01;

/**
 * Adaptive concurrency per subscription (AIMD, as TCP congestion avoidance and Netflix's concurrency-limits AIMD
 * limiter): each subscription starts at the ceiling; every answer that says its endpoint is overloaded — a 429 or 503,
 * no answer in time, a refused or dropped connection, or a recent latency well above its baseline — multiplies the
 * limit down (to no less than the floor), once per window: answers to attempts begun before the last decrease reflect
 * the old limit and do not cut it again. Every 2xx outside a Retry-After window adds 1/limit, about 1 per full
 * window of answers, up to the ceiling. A 429 or 503 with Retry-After pins the limit at the floor until the time it
 * names (capped) has passed; then it grows again from the floor.
 *
 * Other answers (4xx, 500, a blocked address, a failed token request) neither grow nor cut it: they say nothing about
 * load. The limit is read by the consumer's lane for the subscription whenever it may admit a record.
 */
export class ConcurrencyLimiter {
  private readonly tracked = new Map<string, SubscriptionLimit>();
  private readonly floor: number;
  private readonly settings: Required<LimiterSettings>;
  private lastSweep = 0;

  constructor(
    settings: LimiterSettings,
    private readonly metrics?: ConcurrencyMetrics,
    private readonly now: () => number = Date.now,
  ) {
    this.settings = {
      floor: 1,
      backoff: 0.5,
      latencyBackoff: 0.8,
      latencyTolerance: 2,
      latencyExcessMs: 250,
      idleMs: 10 * 60_000,
      maxTracked: 10_000,
      ...settings,
    };
    this.floor = Math.max(1, Math.min(this.settings.floor, this.settings.ceiling));
    metrics?.readLimits(() => this.snapshot());
  }

  /** The number of attempts the subscription may have under way now. */
  limit(subscriptionId: string): number {
    const state = this.tracked.get(subscriptionId);
    return state ? this.effective(state, this.now()) : this.settings.ceiling;
  }

  /** Notes an attempt to the subscription starting; call the answer with its result (undefined if it had none). */
  begin(subscriptionId: string, tenantId: string): (result: AttemptResult | undefined) => void {
    const now = this.now();
    this.sweep(now);
    const state = this.touch(subscriptionId, tenantId, now);
    state.inFlight += 1;
    state.begun += 1;
    const ticket = state.begun;
    let answered = false;
    return (result) => {
      if (answered) return;
      answered = true;
      state.inFlight -= 1;
      if (result) this.observe(state, ticket, result);
    };
  }

  /** The limits now, for the metrics (read at each scrape). */
  snapshot(): LimitsSnapshot {
    const now = this.now();
    const limits: number[] = [];
    const below: { subscriptionId: string; tenantId: string; limit: number; heldUntil: number }[] = [];
    let held = 0;
    for (const [subscriptionId, state] of this.tracked) {
      const limit = this.effective(state, now);
      limits.push(limit);
      if (state.heldUntil > now) held += 1;
      if (limit < this.settings.ceiling) {
        below.push({ subscriptionId, tenantId: state.tenantId, limit, heldUntil: state.heldUntil });
      }
    }
    // The lowest limits first; among equals, the one held longest.
    below.sort((a, b) => a.limit - b.limit || b.heldUntil - a.heldUntil);
    const mostThrottled = below
      .slice(0, MOST_THROTTLED)
      .map(({ subscriptionId, tenantId, limit }) => ({ subscriptionId, tenantId, limit }));
    return { limits, held, mostThrottled };
  }

  /** Subscriptions tracked now (evicted ones are not). */
  get size(): number {
    return this.tracked.size;
  }

  private effective(state: SubscriptionLimit, now: number): number {
    if (now < state.heldUntil) return this.floor;
    return Math.max(this.floor, Math.min(this.settings.ceiling, Math.floor(state.limit)));
  }

  private observe(state: SubscriptionLimit, ticket: number, result: AttemptResult): void {
    const now = this.now();
    const { settings } = this;
    const signal = overloadOf(result);
    if (signal) this.metrics?.throttled(signal);
    if (signal && result.retryAfterMs !== undefined) {
      // The endpoint said when to come back: the floor until then, whatever the window.
      const until = now + Math.min(Math.max(0, result.retryAfterMs), settings.retryAfterCapMs);
      state.heldUntil = Math.max(state.heldUntil, until);
      state.limit = this.floor;
      state.begunAtDecrease = state.begun;
      return;
    }
    if (signal) return this.decrease(state, ticket, settings.backoff);
    if (result.statusCode === null) return; // no answer, for a reason that says nothing about load

    const sample = result.durationMs;
    const baseline = state.baselineMs ?? sample;
    state.baselineMs = sample < baseline ? sample : baseline + (sample - baseline) * BASELINE_RISE;
    state.recentMs = state.recentMs === undefined ? sample : state.recentMs + (sample - state.recentMs) * RECENT_WEIGHT;
    const rising =
      state.recentMs > state.baselineMs * settings.latencyTolerance &&
      state.recentMs - state.baselineMs >= settings.latencyExcessMs;
    if (rising) {
      this.metrics?.throttled('latency');
      return this.decrease(state, ticket, settings.latencyBackoff);
    }
    const acknowledged = result.statusCode >= 200 && result.statusCode < 300;
    if (acknowledged && now >= state.heldUntil) {
      state.limit = Math.min(settings.ceiling, state.limit + 1 / Math.max(1, state.limit));
    }
  }

  /** Multiplies the limit down, once per window: not for an answer to an attempt begun before the last decrease. */
  private decrease(state: SubscriptionLimit, ticket: number, factor: number): void {
    if (ticket <= state.begunAtDecrease) return;
    state.limit = Math.max(this.floor, Math.min(state.limit, this.settings.ceiling) * factor);
    state.begunAtDecrease = state.begun;
  }

  /** The subscription's state, made most recently used (Map order is the eviction order). */
  private touch(subscriptionId: string, tenantId: string, now: number): SubscriptionLimit {
    let state = this.tracked.get(subscriptionId);
    if (state) {
      this.tracked.delete(subscriptionId);
    } else {
      if (this.tracked.size >= this.settings.maxTracked) this.evictOne();
      state = {
        tenantId,
        limit: this.settings.ceiling,
        inFlight: 0,
        heldUntil: 0,
        begun: 0,
        begunAtDecrease: 0,
        baselineMs: undefined,
        recentMs: undefined,
        lastUsed: now,
      };
    }
    state.lastUsed = now;
    this.tracked.set(subscriptionId, state);
    return state;
  }

  /**
   * Forgets subscriptions no attempt has begun for in idleMs (nothing in flight, no window open), at most once a
   * second. The map is in order of the last attempt begun, so the walk stops at the first recent one.
   */
  private sweep(now: number): void {
    if (now - this.lastSweep < 1_000) return;
    this.lastSweep = now;
    for (const [subscriptionId, state] of this.tracked) {
      if (now - state.lastUsed < this.settings.idleMs) break; // the rest were used more recently
      if (state.inFlight === 0 && state.heldUntil <= now) this.tracked.delete(subscriptionId);
    }
  }

  /** Makes room: the least recently used subscription with nothing in flight goes. */
  private evictOne(): void {
    for (const [subscriptionId, state] of this.tracked) {
      if (state.inFlight === 0) {
        this.tracked.delete(subscriptionId);
        return;
      }
    }
  }
}

/** What an answer says about the endpoint's load, if anything. */
export function overloadOf(result: AttemptResult): Exclude<ThrottleReason, 'latency'> | undefined {
  if (result.statusCode === 429) return '429';
  if (result.statusCode === 503) return '503';
  return result.statusCode === null ? result.failure : undefined;
}
