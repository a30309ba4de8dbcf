import type { Attempt } from '../core/deliveries/delivery.ts';
import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import type { Logger } from '../core/log.ts';
import type { OperationalLimit } from '../core/operational-limit.ts';
import type { Intent, OperationalCheck } from '../core/operational-outbox.ts';
import {
  deliveryAbandoned,
  raisesOperationalEvents,
  subscriptionDisabled,
  subscriptionFailing,
  subscriptionRecovered,
  type OperationalEvent,
} from '../core/operational-events.ts';
import type { Subscription } from '../core/subscriptions/subscription.ts';
import type { AttemptResult } from './outcome.ts';

/** What the dispatcher's operational events need: the outbox, and the subscription's health as stored. */
export interface OperationalSignalsDeps {
  intend(event: OperationalEvent, check: OperationalCheck): Promise<Intent>;
  /** The subscription as stored now (not a cached read). */
  read(tenantId: string, id: string): Promise<Subscription | undefined>;
  setHealth(
    tenantId: string,
    id: string,
    expected: Date | null,
    next: { failingSince: Date | null; announced: boolean; announcedAt: Date | null },
  ): Promise<boolean>;
  /** A series' last attempt, for an abandonment without an attempt in hand (its lifetime ran out meanwhile). */
  lastAttempt(tenantId: string, deliveryId: string): Promise<Attempt | undefined>;
  limit: OperationalLimit;
  logger: Logger;
  /** `subscription.failing` at most once per this (a flapping endpoint changes state quietly in between). */
  quietMs: number;
  now?: () => number;
}

/** A subscription's health: failing or not, and whether (and when last) its going failing was announced. */
interface Health {
  failing: boolean;
  announced: boolean;
  announcedAt: number | undefined;
}

/** How long a health state this process set is trusted over the subscription cache's (which may be older). */
const KNOWN_FOR_MS = 60_000;
const KNOWN_MAX = 100_000;

/** Abandonments that follow a change already announced (the subscription's deletion or disabling). */
const ANNOUNCED_BY_CHANGE = new Set(['subscription deleted', 'subscription disabled']);

/**
 * The dispatcher's operational events: a subscription going failing and recovering (its health, stored with the
 * subscription and moved by compare-and-set, so one dispatcher announces each move), being disabled, and a delivery
 * abandoned. Each is written down as pending before its change (operational-outbox.ts). A healthy subscription's
 * successful attempt costs nothing here: only a move of its health reads and writes.
 */
export class OperationalSignals {
  private readonly now: () => number;
  private readonly known = new Map<string, Health & { until: number }>();
  private readonly moving = new Set<string>();

  constructor(private readonly deps: OperationalSignalsDeps) {
    this.now = deps.now ?? Date.now;
  }

  /** After an attempt's outcome was written: moves the subscription's health if the attempt changed it. */
  async attempted(record: DeliveryRecord, subscription: Subscription, result: AttemptResult, ok: boolean) {
    if (!raisesOperationalEvents(record)) return;
    const health = this.healthOf(subscription);
    const due = ok ? health.failing : !health.failing || this.lateAnnouncement(health);
    if (!due || this.moving.has(subscription.id)) return;
    this.moving.add(subscription.id);
    try {
      if (ok) await this.recover(record);
      else await this.fail(record, result);
    } catch (error) {
      // The next attempt tries again; a pending event left behind is the sweep's.
      this.deps.logger.warn({ err: error, subscriptionId: subscription.id }, 'subscription health not updated');
    } finally {
      this.moving.delete(subscription.id);
    }
  }

  /**
   * Before a series is written abandoned: the `delivery.abandoned` to raise once it is (undefined when none is: an
   * operational event's or a test's delivery, one ended by its subscription's deletion or disabling, or over the
   * subscription's rate limit).
   */
  async abandoning(record: DeliveryRecord, reason: string, last: Attempt | undefined): Promise<Intent | undefined> {
    if (!raisesOperationalEvents(record) || ANNOUNCED_BY_CHANGE.has(reason)) return undefined;
    const decision = this.deps.limit.take(record.subscriptionId, 'delivery.abandoned');
    if (!decision.raise) return undefined;
    const attempt = last ?? (await this.deps.lastAttempt(record.tenantId, record.deliveryId));
    const lastAttempt = attempt
      ? {
          at: attempt.at.toISOString(),
          statusCode: attempt.statusCode,
          error: attempt.errorMessage,
          durationMs: Math.round(attempt.durationMs),
        }
      : null;
    const delivery = {
      deliveryId: record.deliveryId,
      subscriptionId: record.subscriptionId,
      eventId: record.eventId,
      eventType: record.eventType,
      entityId: record.entityId,
      attempts: attempt?.attempt ?? record.attempt - 1,
    };
    const event = deliveryAbandoned(
      record.tenantId,
      delivery,
      reason,
      lastAttempt,
      new Date(this.now()),
      decision.suppressed,
    );
    return this.deps.intend(event, {
      kind: 'delivery-abandoned',
      tenantId: record.tenantId,
      deliveryId: record.deliveryId,
    });
  }

  /**
   * Counts a failure day through `count`, raising `subscription.disabled` when the count disables the subscription.
   * Written down as pending beforehand only when it may (the cached counter one or two short of the limit).
   */
  async countFailureDay<T extends { failureDays: number; disabledNow: boolean } | undefined>(
    subscription: Subscription,
    window: number,
    disableAt: number,
    count: () => Promise<T>,
  ): Promise<T> {
    const { tenantId, id } = subscription;
    const windowCounted = subscription.lastFailureWindow !== null && subscription.lastFailureWindow >= window;
    const mayDisable = subscription.failureDays + 2 >= disableAt && !windowCounted;
    const intent = mayDisable
      ? await this.deps.intend(subscriptionDisabled(subscription, new Date(this.now()), disableAt, window), {
          kind: 'subscription-disabled',
          tenantId,
          subscriptionId: id,
        })
      : undefined;
    const counted = await count();
    if (counted?.disabledNow && intent) await intent.raise();
    else await intent?.cancel();
    if (counted?.disabledNow && !intent) {
      // The cache was further behind than a day: raised after the fact (a crash right here would lose it).
      const event = subscriptionDisabled(subscription, new Date(this.now()), counted.failureDays, window);
      await (await this.deps.intend(event, { kind: 'subscription-disabled', tenantId, subscriptionId: id })).raise();
    }
    return counted;
  }

  /** The subscription's health as this process last set or read it (for a while), else as the cache has it. */
  private healthOf(subscription: Subscription): Health {
    const known = this.known.get(subscription.id);
    return known && known.until > this.now() ? known : storedHealth(subscription);
  }

  /** A failing kept quiet (an announcement less than `quietMs` before it) is announced once `quietMs` has passed. */
  private lateAnnouncement(health: Health): boolean {
    return health.failing && !health.announced && this.quietOver(health.announcedAt);
  }

  private quietOver(announcedAt: number | undefined): boolean {
    return announcedAt === undefined || this.now() - announcedAt >= this.deps.quietMs;
  }

  private remember(subscription: Subscription, health = storedHealth(subscription)): void {
    if (this.known.size >= KNOWN_MAX) this.known.clear();
    this.known.set(subscription.id, { ...health, until: this.now() + KNOWN_FOR_MS });
  }

  private async fail(record: DeliveryRecord, result: AttemptResult): Promise<void> {
    for (;;) {
      const current = await this.deps.read(record.tenantId, record.subscriptionId);
      if (!current) return;
      const health = storedHealth(current);
      if (health.failing && !this.lateAnnouncement(health)) return this.remember(current);
      const at = new Date(this.now());
      // Failing since now, or (a late announcement) since it went failing quietly.
      const since = current.failingSince ?? at;
      const announce = this.quietOver(health.announcedAt);
      const failure = {
        deliveryId: record.deliveryId,
        eventId: record.eventId,
        eventType: record.eventType,
        attempt: record.attempt,
        statusCode: result.statusCode,
        error: result.errorMessage,
      };
      const check = {
        kind: 'subscription-failing',
        tenantId: current.tenantId,
        subscriptionId: current.id,
        failingSince: since.getTime(),
        still: true,
      } as const;
      const intent = announce ? await this.deps.intend(subscriptionFailing(current, since, failure), check) : undefined;
      const next = {
        failingSince: since,
        announced: announce,
        announcedAt: announce ? at : current.failingAnnouncedAt,
      };
      if (await this.deps.setHealth(current.tenantId, current.id, current.failingSince, next)) {
        this.remember(current, { failing: true, announced: announce, announcedAt: next.announcedAt?.getTime() });
        await intent?.raise();
        this.deps.logger.warn(
          {
            subscriptionId: current.id,
            tenantId: current.tenantId,
            announced: announce,
            statusCode: result.statusCode,
          },
          'subscription failing',
        );
        return;
      }
      await intent?.cancel();
    }
  }

  private async recover(record: DeliveryRecord): Promise<void> {
    for (;;) {
      const current = await this.deps.read(record.tenantId, record.subscriptionId);
      if (!current) return;
      const since = current.failingSince;
      if (since === null) return this.remember(current);
      const at = new Date(this.now());
      const check = {
        kind: 'subscription-failing',
        tenantId: current.tenantId,
        subscriptionId: current.id,
        failingSince: since.getTime(),
        still: false,
      } as const;
      const intent = current.failingAnnounced
        ? await this.deps.intend(subscriptionRecovered(current, since, at, record.deliveryId), check)
        : undefined;
      const next = { failingSince: null, announced: false, announcedAt: current.failingAnnouncedAt };
      if (await this.deps.setHealth(current.tenantId, current.id, since, next)) {
        this.remember(current, { failing: false, announced: false, announcedAt: next.announcedAt?.getTime() });
        await intent?.raise();
        this.deps.logger.info(
          { subscriptionId: current.id, tenantId: current.tenantId, failingSince: since },
          'subscription recovered',
        );
        return;
      }
      await intent?.cancel();
    }
  }
}

function storedHealth(subscription: Subscription): Health {
  return {
    failing: subscription.failingSince !== null,
    announced: subscription.failingAnnounced,
    announcedAt: subscription.failingAnnouncedAt?.getTime(),
  };
}
