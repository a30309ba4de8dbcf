import type { Attempt, DeliveryStatus } from '../core/deliveries/delivery.ts';
import { withoutTransportFlags, type DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import type { SeriesIdentity, SeriesRef, SeriesState } from '../core/deliveries/delivery-store.ts';
import type { Logger } from '../core/log.ts';
import type { CircuitMetrics, DeliveryMetrics } from '../core/metrics.ts';
import type { Gate } from './circuit-breaker.ts';
import type { Subscription } from '../core/subscriptions/subscription.ts';
import { decideFate, failureWindow, holdHop, LIFETIME_EXCEEDED, nextHop, type AttemptResult } from './outcome.ts';
import { isOrdered } from '../core/deliveries/entity-order.ts';
import { backoffDelay, RecoveryBackoff } from '../core/recovery-backoff.ts';
import { standardHeaders } from '../core/standard-webhooks.ts';
import type { Admission, EndedTurn } from './entity-order-gate.ts';
import { LocalTurns } from './local-turns.ts';
import type { OutboundRequest, Sender } from './http-sender.ts';
import type { OperationalSignals } from './operational-signals.ts';
import type { Intent } from '../core/operational-outbox.ts';
import { endSpan, failSpan, headersOf, startSpan, tracing, type Span } from '../core/tracing.ts';

/** Where attempts and final states are written. */
export interface AttemptLog {
  recordAttempt(series: SeriesRef, attempt: Attempt, next: AttemptOutcome, identity?: SeriesIdentity): Promise<void>;
  finish(series: SeriesRef, status: DeliveryStatus, abandonReason: string, attemptsMade: number): Promise<void>;
  defer(series: SeriesRef, attemptsMade: number, nextRetryAt: Date | null, reason: string): Promise<void>;
  state(tenantId: string, deliveryId: string): Promise<SeriesState | undefined>;
  latestForEntity(
    tenantId: string,
    subscriptionId: string,
    entityId: string,
  ): Promise<{ deliveryId: string } | undefined>;
}

/**
 * The state an attempt leaves its series in. `noted`: a note may have been written before this first attempt (an
 * ordered delivery's wait), which its empty error and next retry clear.
 */
export interface AttemptOutcome {
  status: DeliveryStatus;
  nextRetryAt: Date | null;
  abandonReason?: string | null;
  noted?: boolean;
}

/**
 * Ordered delivery per entity (entity-order-gate.ts): whether a delivery may be sent now; the end of one, which
 * answers the next delivery of its entity if that one waits; and the publication of a waiting delivery's record.
 */
export interface EntityOrder {
  admit(record: DeliveryRecord & { orderSeq: number }, supersedes: boolean, thorough: boolean): Promise<Admission>;
  ended(record: DeliveryRecord & { orderSeq: number }): Promise<EndedTurn>;
  release(record: DeliveryRecord): Promise<void>;
}

/**
 * Deliveries of one entity that a handler sends on, one after the other, once the one it handled has ended; the next
 * is published again instead (and the handler returns). See the handler's last function.
 */
const MAX_CHAIN = 16;

/** The gate of a dispatcher without a circuit breaker: every attempt goes out. */
const OPEN_GATE: Gate & { send: true } = { send: true, probe: false };

const FINAL: ReadonlySet<DeliveryStatus> = new Set(['acknowledged', 'abandoned', 'superseded']);

/** How long an ordered delivery waits before its record checks its turn itself (its turn normally comes first). */
const ORDER_CHECK_MIN_MS = 300_000;
const ORDER_CHECK_MAX_MS = 3_600_000;

/** Moves a failed delivery to a retry tier; resolves once Kafka acknowledged it. */
export type RetryScheduler = (tier: number, record: DeliveryRecord) => Promise<void>;

/** What the dispatcher needs to know and change about subscriptions. */
export interface SubscriptionDirectory {
  /** `readSince`: as read by a load begun at or after that time (epoch ms), not from an older cached read. */
  get(tenantId: string, id: string, readSince?: number): Promise<Subscription | undefined>;
  resetFailureDays(tenantId: string, id: string): Promise<void>;
  /** Counts a failure-day window once; `disabledNow` when this count reached the limit and disabled it. */
  recordFailureDay(
    tenantId: string,
    id: string,
    windowStart: number,
    disableAt: number,
  ): Promise<{ failureDays: number; disabledNow: boolean } | undefined>;
}

/**
 * Where the end of a bulk replay job's replay is counted: the job's delivered and failed progress. Called right after
 * the final state was written; a count retried after a timeout that had applied counts twice (progress, not accounting).
 */
export interface ReplayOutcomeLog {
  ended(tenantId: string, jobId: string, outcome: 'delivered' | 'failed'): Promise<void>;
}

/** Adapts a subscription's concurrency to its endpoint: told when each POST starts, and what it got. */
export interface ConcurrencyControl {
  begin(subscriptionId: string, tenantId: string): (result: AttemptResult | undefined) => void;
}

/** A circuit breaker per subscription (circuit-breaker.ts): asked before each attempt, told each attempt's result. */
export interface CircuitControl {
  enter(subscriptionId: string): Gate;
  done(subscriptionId: string, gate: Gate & { send: true }, result: AttemptResult | undefined): void;
}

/** Builds the authentication headers of a subscription (ApiKey, OAuth2 bearer); null token means refresh. */
export type AuthHeaders = (subscription: Subscription, refresh: boolean) => Promise<Record<string, string>>;

export interface DeliveryHandlerDeps {
  subscriptions: SubscriptionDirectory;
  attempts: AttemptLog;
  scheduleRetry: RetryScheduler;
  send: Sender;
  authHeaders: AuthHeaders;
  logger: Logger;
  metrics?: DeliveryMetrics;
  concurrency?: ConcurrencyControl;
  circuit?: CircuitControl;
  circuitMetrics?: Pick<CircuitMetrics, 'deferred'>;
  replayOutcomes?: ReplayOutcomeLog;
  /** Ordered delivery per entity; without it, no delivery waits for another. */
  order?: EntityOrder;
  /** Operational events (subscription failing, recovered, disabled; delivery abandoned); none without it. */
  operational?: Pick<OperationalSignals, 'attempted' | 'abandoning' | 'countFailureDay'>;
  /** Waits for a subscription's rate limit before a delivery sent on after the one before it (no lane paces it). */
  paceChained?: (subscriptionId: string) => Promise<void>;
  settings: {
    retryDelaysMs: readonly number[];
    deliveryLifetimeMs: number;
    failureDayMs: number;
    autoDisableAfterDays: number;
  };
  now?: () => number;
  /** Waits between two tries of a write that failed, cut short when writes succeed again (tests make it instant). */
  backoff?: Pick<RecoveryBackoff, 'wait' | 'succeeded'>;
}

/**
 * Handles one due delivery record: attempt it (or end it) and make the outcome durable before resolving. Before the
 * POST an error is thrown (nothing happened yet, the record is handled again); after it, each write that fails is
 * retried on its own until it succeeds, so a store or broker hiccup never sends the receiver the same attempt again.
 */
export function createDeliveryHandler(
  deps: DeliveryHandlerDeps,
): (record: DeliveryRecord, slot?: { release(): void }) => Promise<void> {
  const now = deps.now ?? Date.now;
  const backoff = deps.backoff ?? new RecoveryBackoff();
  const { settings, logger } = deps;

  const durably = async (what: string, record: DeliveryRecord, write: () => Promise<unknown>): Promise<void> => {
    for (let failures = 0; ; failures += 1) {
      try {
        await write();
        backoff.succeeded();
        return;
      } catch (error) {
        logger.error(
          { ...logFields(record, 'pending', {}), err: error, retryInMs: backoffDelay(failures) },
          `${what} failed; retrying it`,
        );
        await backoff.wait(failures);
      }
    }
  };

  const seriesOf = (record: DeliveryRecord): SeriesRef => ({
    tenantId: record.tenantId,
    deliveryId: record.deliveryId,
    queuedAt: record.queuedAt,
  });

  /**
   * What the end of an ordered delivery (the key) found: the first pending delivery of its entity, and the next one's
   * record when its turn came; `sure` when that end was this record's own (not found again on a duplicate of it): the
   * next then has neither been sent by anyone else nor anything before it, and goes without a check.
   */
  const ends = new WeakMap<DeliveryRecord, EndedTurn & { sure: boolean }>();
  /** Records sent on at their turn without the gate's look (their predecessor's end just saw them next). */
  const admitted = new WeakSet<DeliveryRecord>();
  /** The ordered deliveries being sent here, and a later one of each entity waiting for that one's end here. */
  const turns = new LocalTurns();
  /** An ordered delivery has ended: its row goes, and the next of its entity, if it waits, is sent on (see below). */
  const endOrdered = async (record: DeliveryRecord, sure = true) => {
    const order = deps.order;
    if (!order || !isOrdered(record)) return;
    let turn: EndedTurn = {};
    await durably("ending the delivery's turn", record, async () => (turn = await order.ended(record)));
    ends.set(record, { ...turn, sure });
  };

  /**
   * Leaves an ordered delivery waiting for an earlier one of its entity, without an attempt: the earlier one's end
   * sends it on. Meanwhile its record hops through the retry tiers toward a check (a safety net should its turn never
   * come: after as long as it has waited, 5 minutes at least and an hour at most) or its deadline; from the first
   * check on, the history says which delivery it waits for.
   */
  const wait = async (record: DeliveryRecord, blocker: string, deadline: number) => {
    const at = now();
    const checkAt = Math.min(
      deadline,
      at + Math.min(Math.max(at - record.queuedAt, ORDER_CHECK_MIN_MS), ORDER_CHECK_MAX_MS),
    );
    // Noted in the history once its check finds it still waiting: most waits end within a round trip or a retry.
    if (record.holdUntil !== undefined) {
      const reason = `waiting for delivery ${blocker}, of an earlier event of entity ${record.entityId} (ordering: entity)`;
      await durably('recording the wait', record, () =>
        deps.attempts.defer(seriesOf(record), record.attempt - 1, null, reason),
      );
    }
    const hop = holdHop(at, checkAt, settings.retryDelaysMs);
    const series = withoutTransportFlags(record);
    // A possible duplicate when it comes back: the release may have sent it meanwhile.
    const check = { ...series, dueAt: hop.dueAt, holdUntil: checkAt, mayBeDuplicate: true };
    await durably('scheduling the wait check', record, () => deps.scheduleRetry(hop.tier, check));
    deps.metrics?.outcome('waiting', undefined);
    logger.info(logFields(record, 'waiting', { blocker }), 'delivery waiting for an earlier one of its entity');
  };

  /** Counts the end of a bulk replay job's replay toward the job's progress. */
  const countReplay = async (record: DeliveryRecord, outcome: 'delivered' | 'failed') => {
    const jobId = record.replayJobId;
    if (!jobId || !deps.replayOutcomes) return;
    await durably('counting the replay job outcome', record, () =>
      deps.replayOutcomes!.ended(record.tenantId, jobId, outcome),
    );
  };

  /**
   * Ends a series without an attempt; the last attempt's status code and error stay as they were. A failure day is
   * counted only when the subscriber's side is to blame (`ours`: the service cannot make the attempt at all).
   */
  const abandon = async (
    record: DeliveryRecord,
    reason: string,
    subscription: Subscription | undefined,
    ours = false,
  ) => {
    const announced = await abandoning(record, reason, undefined);
    await deps.attempts.finish(seriesOf(record), 'abandoned', reason, record.attempt - 1);
    await announced?.raise();
    await endOrdered(record);
    await countReplay(record, 'failed');
    if (!ours) await countFailureDay(record, subscription);
    deps.metrics?.outcome('abandoned', undefined);
    if (ours)
      logger.error(logFields(record, 'abandoned', { reason }), 'delivery abandoned: the service cannot send it');
    else logger.info(logFields(record, 'abandoned', { reason }), 'delivery abandoned');
  };

  /** Writes a `delivery.abandoned` down before the abandonment is (operational-signals.ts); raised once it is. */
  const abandoning = async (record: DeliveryRecord, reason: string, last: Attempt | undefined) => {
    const operational = deps.operational;
    if (!operational) return undefined;
    let intent: Intent | undefined;
    await durably('writing down delivery.abandoned', record, async () => {
      intent = await operational.abandoning(record, reason, last);
    });
    return intent;
  };

  const countFailureDay = async (record: DeliveryRecord, subscription: Subscription | undefined) => {
    // A test delivery checks the endpoint on request: it never counts toward disabling the subscription.
    if (!subscription || subscription.status !== 'enabled' || record.test) return;
    const window = failureWindow(now(), settings.failureDayMs);
    const disableAt = settings.autoDisableAfterDays;
    const count = () => deps.subscriptions.recordFailureDay(record.tenantId, record.subscriptionId, window, disableAt);
    const counted = deps.operational
      ? await deps.operational.countFailureDay(subscription, window, disableAt, count)
      : await count();
    if (counted?.disabledNow) {
      deps.metrics?.autoDisabled();
      logger.warn(
        { tenantId: record.tenantId, subscriptionId: record.subscriptionId, failureDays: counted.failureDays },
        'subscription auto-disabled after consecutive failure days',
      );
    }
  };

  /**
   * Holds a delivery without an attempt until `retryAt` (its subscription's circuit lets a probe through then): the
   * history says why and when, and the record hops through the retry tiers toward that time, as a long Retry-After
   * holds it; past the delivery's deadline it hops toward the deadline instead, where it is abandoned, and the history
   * shows no next retry. No attempt is counted, and no failure day: those follow real attempts only.
   */
  const defer = async (record: DeliveryRecord, retryAt: number, gateReason: string, deadline: number) => {
    const at = now();
    const hop =
      retryAt < deadline
        ? { ...holdHop(at, retryAt, settings.retryDelaysMs), holdUntil: retryAt }
        : { ...holdHop(at, deadline, settings.retryDelaysMs), expiryHop: true as const };
    const nextRetryAt = 'holdUntil' in hop ? new Date(Math.max(hop.dueAt, retryAt)) : null;
    const reason =
      nextRetryAt === null
        ? `${gateReason}; the delivery's lifetime ends first: abandoned at ${new Date(deadline).toISOString()}`
        : gateReason;
    await durably('recording the deferral', record, () =>
      deps.attempts.defer(seriesOf(record), record.attempt - 1, nextRetryAt, reason),
    );
    const series = withoutTransportFlags(record);
    const next = {
      ...series,
      dueAt: hop.dueAt,
      ...('holdUntil' in hop ? { holdUntil: hop.holdUntil } : { expiryHop: true }),
    };
    await durably('scheduling the deferred attempt', record, () => deps.scheduleRetry(hop.tier, next));
    deps.circuitMetrics?.deferred();
    deps.metrics?.outcome('deferred', undefined);
    logger.info(logFields(record, 'deferred', { reason, nextRetryAt }), 'delivery deferred: circuit open');
  };

  /** The attempt each series being handled here is making: a duplicate record may arrive while the first is busy. */
  const handling = new Map<string, { attempt: number; done: Promise<void> }>();
  const skipDuplicate = async (record: DeliveryRecord, status: string) => {
    deps.metrics?.outcome('duplicate', undefined);
    logger.info(logFields(record, 'duplicate', { status }), 'duplicate delivery record skipped');
    // An ended series whose end may not have released the next of its entity (a crash in between): done again.
    if (FINAL.has(status as DeliveryStatus)) await endOrdered(record, false);
  };

  /**
   * A possible duplicate of an attempt recorded as retrying: the attempt's retry is scheduled after its record was
   * written, and a crash in between leaves none (the series would stay retrying for good). It is scheduled again, as a
   * possible duplicate held until a tier's delay after the recorded time: the first retry, if it was published after
   * all, has made its attempt by then, and this copy finds it made (a rebalance's redeliveries cost one record each).
   */
  const retryAgain = async (record: DeliveryRecord, state: SeriesState) => {
    const series = withoutTransportFlags(record);
    const next = { ...series, attempt: record.attempt + 1, mayBeDuplicate: true, rescheduled: true };
    const at = now();
    if (state.nextRetryAt) {
      const holdUntil = state.nextRetryAt.getTime() + settings.retryDelaysMs[0]!;
      const hop = holdHop(at, holdUntil, settings.retryDelaysMs);
      await durably('scheduling the retry again', record, () =>
        deps.scheduleRetry(hop.tier, { ...next, dueAt: hop.dueAt, holdUntil }),
      );
    } else {
      // Its attempts were over, it hopped toward its deadline (where it is abandoned): on with that.
      const hop = nextHop(at, record.queuedAt + settings.deliveryLifetimeMs, settings.retryDelaysMs);
      const tier = hop.kind === 'expire' ? hop.tier : 0;
      const dueAt = hop.kind === 'expire' ? hop.dueAt : at + settings.retryDelaysMs[0]!;
      await durably('scheduling the expiry hop again', record, () =>
        deps.scheduleRetry(tier, { ...next, dueAt, expiryHop: true }),
      );
    }
    deps.metrics?.outcome('duplicate', undefined);
    logger.info(
      logFields(record, 'duplicate', { status: state.status, scheduledAgain: true }),
      'duplicate delivery record: its retry scheduled again, in case a crash lost it',
    );
  };

  const handle = async (record: DeliveryRecord, slot: { release(): void } | undefined) => {
    if (isOrdered(record) && record.holdUntil !== undefined && now() < record.holdUntil && !record.expiryHop) {
      // A waiting delivery's check, not due yet (short retry tiers bring it back often): on toward it, reading nothing.
      // Whether it was sent meanwhile is looked at when it is due. Its time never passes its deadline (see wait).
      const hop = holdHop(now(), record.holdUntil, settings.retryDelaysMs);
      await deps.scheduleRetry(hop.tier, { ...record, dueAt: hop.dueAt });
      return;
    }
    if (record.mayBeDuplicate || record.attempt > 1) {
      // Routed again, or redelivered after a rebalance: a finished series, or an attempt already made, is not repeated.
      // Nor by a retry: a retry scheduled again (retryAgain) may have made it first, its record held up less than the
      // first one's (a tier's partition without a leader for a while, say).
      const state = await deps.attempts.state(record.tenantId, record.deliveryId);
      if (
        record.mayBeDuplicate &&
        state?.status === 'retrying' &&
        state.attemptCount === record.attempt &&
        !record.rescheduled
      )
        return retryAgain(record, state);
      if (state && (FINAL.has(state.status) || state.attemptCount >= record.attempt))
        return skipDuplicate(record, state.status);
    }
    let subscription = await deps.subscriptions.get(record.tenantId, record.subscriptionId);
    if (
      !subscription ||
      subscription.status === 'disabled' ||
      subscription.updatedAt.getTime() < (record.subscriptionVersion ?? 0)
    ) {
      // The router found the subscription enabled, in the version the record names, when it queued this delivery: a
      // cache read before that may not know it yet (created since), still have it disabled (enabled again since) or
      // hold an older version (its URL or authentication changed since). A miss is never taken for a deletion: the
      // store is read again, as of after the routing, before anything is decided.
      const routedAt = record.routedAt ?? record.queuedAt;
      subscription = await deps.subscriptions.get(record.tenantId, record.subscriptionId, routedAt);
    }
    const deadline = record.queuedAt + settings.deliveryLifetimeMs;
    if (!subscription) return abandon(record, 'subscription deleted', undefined);
    if (subscription.status === 'disabled') return abandon(record, 'subscription disabled', undefined);
    if (now() >= deadline) return abandon(record, LIFETIME_EXCEEDED, subscription);
    if (record.expiryHop) {
      const hop = nextHop(now(), deadline, settings.retryDelaysMs);
      if (hop.kind === 'expire') await deps.scheduleRetry(hop.tier, { ...record, dueAt: hop.dueAt });
      return;
    }
    if (record.holdUntil !== undefined && now() < record.holdUntil) {
      // Held by a Retry-After longer than every tier: hop on toward the time it asked, without an attempt.
      const hop = holdHop(now(), record.holdUntil, settings.retryDelaysMs);
      await deps.scheduleRetry(hop.tier, { ...record, dueAt: hop.dueAt });
      return;
    }
    if (subscription.unreadableSecrets) {
      // A secret no configured key opens can never be used: retrying would stall the partition for nothing. The fault
      // is ours (a key dropped from SECRETS_PREVIOUS_KEYS too early), so the subscription is not marked failing.
      deps.metrics?.unreadableSecret();
      return abandon(record, `subscription secrets unreadable: ${subscription.unreadableSecrets}`, subscription, true);
    }
    if (subscription.supersedePendingDeliveries && record.replayOf === null && !record.test) {
      const latest = await deps.attempts.latestForEntity(record.tenantId, record.subscriptionId, record.entityId);
      if (latest && latest.deliveryId !== record.deliveryId) {
        await deps.attempts.finish(
          seriesOf(record),
          'superseded',
          `superseded by ${latest.deliveryId}`,
          record.attempt - 1,
        );
        await endOrdered(record);
        deps.metrics?.outcome('superseded', undefined);
        logger.info(logFields(record, 'superseded', { by: latest.deliveryId }), 'delivery superseded');
        return;
      }
    }

    if (deps.order && isOrdered(record) && !admitted.has(record)) {
      // Ordering 'entity': sent only once no earlier delivery of its entity is pending. A record seen again (a check,
      // a release, a redelivery) has the rows before it checked, not only read.
      const thorough = record.mayBeDuplicate === true || record.holdUntil !== undefined;
      // A first record goes without a look when the delivery of its entity's previous event ended here; one whose
      // predecessor is being sent right here waits for that one's end, its slot given back meanwhile: the end tells
      // whether its turn has come, or the gate looks (local-turns.ts).
      const cleared = !thorough && turns.cleared(record);
      const local = thorough || cleared ? undefined : turns.follow(record);
      if (local) slot?.release();
      if (!cleared && !(local && (await local))) {
        const admission = await deps.order.admit(record, subscription.supersedePendingDeliveries, thorough);
        if (!admission.go) return wait(record, admission.blocker, deadline);
        if (admission.unlisted) {
          // No row: it ended, or this attempt was made by a copy of it (a duplicate). Sent again, it could reach the
          // receiver after the entity's later deliveries.
          const state = await deps.attempts.state(record.tenantId, record.deliveryId);
          if (state && (FINAL.has(state.status) || state.attemptCount >= record.attempt))
            return skipDuplicate(record, state.status);
        }
      }
    }
    if (deps.order && isOrdered(record)) turns.hold(record);

    const gate = deps.circuit?.enter(record.subscriptionId) ?? OPEN_GATE;
    if (!gate.send) return defer(record, gate.retryAt, gate.reason, deadline);

    const at = new Date(now());
    // The wait for the receiver (and for an OAuth2 token) holds this record's lane, never one of the dispatcher's
    // shared slots: a hanging endpoint costs its socket and its timer, not a slot a healthy subscription needs.
    slot?.release();
    // The attempt's span, child of the routing (core/tracing.ts); its traceparent goes with the POST.
    const span = tracing() ? attemptSpan(record) : undefined;
    const traceHeaders = span ? headersOf(span) : undefined;
    const attemptOnce = async (refresh: boolean): Promise<AttemptResult> => {
      try {
        const request = await outbound(subscription, record, deps.authHeaders, refresh, now(), traceHeaders);
        const answered = deps.concurrency?.begin(record.subscriptionId, record.tenantId);
        let result: AttemptResult | undefined;
        try {
          result = await deps.send(request);
          return result;
        } finally {
          answered?.(result);
        }
      } catch (error) {
        // Only building the request can throw (the OAuth2 token request): a failed attempt, not a crash.
        return { statusCode: null, errorMessage: `authentication failed: ${(error as Error).message}`, durationMs: 0 };
      }
    };
    let result = await attemptOnce(false);
    if (result.statusCode === 401 && subscription.authenticationMode === 'OAuth2') {
      // A rejected token may have been revoked early: fetch a new one and try once more within this attempt.
      result = await attemptOnce(true);
    }
    if (span) endAttemptSpan(span, result);
    if (gate !== OPEN_GATE) deps.circuit?.done(record.subscriptionId, gate, result);
    deps.metrics?.stage('attempt', result.durationMs);
    if (record.attempt === 1 && record.replayOf === null)
      deps.metrics?.stage('event_to_answer', now() - record.queuedAt);

    // From here on the attempt has happened: its outcome is written, never earned again by another POST.
    const fate = decideFate(result, record.attempt, now(), deadline, settings.retryDelaysMs);
    const { statusCode, errorMessage, durationMs } = result;
    const attempt: Attempt = { attempt: record.attempt, at, statusCode, errorMessage, durationMs };
    const identity = record.replayOf === null ? undefined : identityOf(record);
    const noted = isOrdered(record) ? { noted: true } : {};
    const write = (next: { status: DeliveryStatus; nextRetryAt: Date | null; abandonReason?: string }) =>
      durably('recording the attempt', record, () =>
        identity
          ? deps.attempts.recordAttempt(seriesOf(record), attempt, { ...next, ...noted }, identity)
          : deps.attempts.recordAttempt(seriesOf(record), attempt, { ...next, ...noted }),
      );
    const logBase = logFields(record, fate.kind === 'expire' ? 'retrying' : fate.kind, {
      statusCode: result.statusCode,
      durationMs: result.durationMs,
    });

    if (fate.kind === 'acknowledged') {
      deps.metrics?.outcome('acknowledged', result.durationMs);
      await write({ status: 'acknowledged', nextRetryAt: null });
      await deps.operational?.attempted(record, subscription, result, true);
      await endOrdered(record);
      await countReplay(record, 'delivered');
      if (subscription.failureDays > 0 && !record.test) {
        await durably('resetting failure days', record, () =>
          deps.subscriptions.resetFailureDays(record.tenantId, record.subscriptionId),
        );
      }
      logger.info(logBase, 'delivery acknowledged');
    } else if (fate.kind === 'retry' || fate.kind === 'expire') {
      deps.metrics?.outcome('retrying', result.durationMs);
      if (fate.kind === 'retry' && fate.retryAfter) deps.metrics?.retryAfterDeferral();
      // An expiry hop makes no attempt: the series has no next retry, it waits for its deadline. A held retry is
      // made when its hold ends.
      const nextRetryAt = fate.kind === 'retry' ? new Date(fate.holdUntil ?? fate.dueAt) : null;
      await write({ status: 'retrying', nextRetryAt });
      await deps.operational?.attempted(record, subscription, result, false);
      const series = withoutTransportFlags(record);
      const next = {
        ...series,
        attempt: record.attempt + 1,
        dueAt: fate.dueAt,
        ...(fate.kind === 'expire' ? { expiryHop: true } : {}),
        ...(fate.kind === 'retry' && fate.holdUntil !== undefined ? { holdUntil: fate.holdUntil } : {}),
      };
      await durably('scheduling the retry', record, () => deps.scheduleRetry(fate.tier, next));
      const retryAfter = result.retryAfterMs === undefined ? {} : { retryAfterMs: result.retryAfterMs };
      logger.info({ ...logBase, error: result.errorMessage, nextRetryAt, ...retryAfter }, 'delivery retrying');
    } else {
      deps.metrics?.outcome('abandoned', result.durationMs);
      const announced = await abandoning(record, fate.reason, attempt);
      await write({ status: 'abandoned', nextRetryAt: null, abandonReason: fate.reason });
      await announced?.raise();
      await deps.operational?.attempted(record, subscription, result, false);
      await endOrdered(record);
      await countReplay(record, 'failed');
      await durably('counting the failure day', record, () => countFailureDay(record, subscription));
      logger.info({ ...logBase, reason: fate.reason, error: result.errorMessage }, 'delivery abandoned');
    }
  };

  /** One record, alone or beside other records of its series in this process. */
  const handleOnce = async (record: DeliveryRecord, slot: { release(): void } | undefined) => {
    // Two records of one series in this process at once (a possible duplicate beside its original, both read before
    // either wrote): the one that comes second, for an attempt no later than the first's, is the duplicate. Except for
    // an ordered delivery: the first may only be waiting or hopping toward a check, and the second be its turn come.
    // It waits for the first to finish (holding no slot), then decides from what the first left.
    let busy = handling.get(record.deliveryId);
    // Whatever its mark says: two routings of one event at once (two relays published it) both go out unmarked when
    // neither finds the other's rows, and the record the router marked may come first.
    if (busy !== undefined && !record.mayBeDuplicate) record = { ...record, mayBeDuplicate: true };
    while (record.mayBeDuplicate && busy !== undefined && busy.attempt >= record.attempt) {
      if (!isOrdered(record)) return skipDuplicate(record, 'in flight');
      slot?.release();
      slot = undefined;
      await busy.done;
      busy = handling.get(record.deliveryId);
    }
    if (busy !== undefined) return handle(record, slot);
    let done!: () => void;
    handling.set(record.deliveryId, {
      attempt: record.attempt,
      done: new Promise<void>((resolve) => (done = resolve)),
    });
    try {
      await handle(record, slot);
    } finally {
      handling.delete(record.deliveryId);
      done();
    }
  };

  /**
   * Handles a record, then the deliveries of its entity whose turn its end brought (ordering 'entity'), one after the
   * other in this same call: a released delivery neither goes back to the end of the deliveries topic nor waits for a
   * slot, it takes the place of the one before it. Its record stays uncommitted until the chain ends, so a crash
   * meanwhile hands it again and its end releases the next again. After MAX_CHAIN the next is published instead.
   */
  return async (record, slot) => {
    let current = record;
    for (let sent = 0; ; sent += 1) {
      let successor: DeliveryRecord | undefined;
      let sure = false;
      try {
        await handleOnce(current, sent === 0 ? slot : undefined);
        const next = ends.get(current)?.next;
        if (next && sent >= MAX_CHAIN) {
          const order = deps.order!;
          await durably('releasing the next delivery of the entity', next, () => order.release(next));
        } else if (next) {
          // Found on a duplicate's end, a copy of it may have been sent meanwhile: checked as a possible duplicate.
          sure = ends.get(current)!.sure;
          successor = { ...next, mayBeDuplicate: !sure };
        }
      } finally {
        // The entity's turn in this process goes to the successor, or to the delivery waiting here for it (which then
        // sends itself), or back to the gate's look for that one. Also when the handling failed.
        if (isOrdered(current)) {
          const chained = successor && isOrdered(successor) ? successor : undefined;
          if (!turns.pass(current, ends.get(current), chained)) successor = undefined;
        }
      }
      if (!successor) return;
      await deps.paceChained?.(successor.subscriptionId);
      if (sure) admitted.add(successor);
      current = successor;
    }
  };
}

function identityOf(record: DeliveryRecord): SeriesIdentity {
  return {
    eventId: record.eventId,
    eventType: record.eventType,
    subscriptionId: record.subscriptionId,
    entityId: record.entityId,
    occurredAt: record.occurredAt,
    replayOf: record.replayOf,
    signature: record.signature,
    test: record.test === true,
  };
}

async function outbound(
  subscription: Subscription,
  record: DeliveryRecord,
  authHeaders: AuthHeaders,
  refresh: boolean,
  at: number,
  traceHeaders: Record<string, string> | undefined,
): Promise<OutboundRequest> {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'user-agent': 'CoreWebhooks/1.0',
    'x-webhook-event-id': record.eventId,
    'x-webhook-delivery-id': record.deliveryId,
    'x-webhook-event-type': record.eventType,
    'x-webhook-subscription-id': record.subscriptionId,
    'x-webhook-attempt': String(record.attempt),
    ...(await authHeaders(subscription, refresh)),
  };
  if (record.signature !== null) headers[subscription.signatureHeaderName.toLowerCase()] = record.signature;
  if (subscription.authenticationMode === 'StandardWebhooks' && subscription.secrets.hmacSecret) {
    const { hmacSecret, previousHmacSecret, previousHmacSecretUntil } = subscription.secrets;
    // Signed when sent (its timestamp is this attempt's); with the previous secret too during a rotation's window.
    const previous = previousHmacSecret && at < (previousHmacSecretUntil ?? 0) ? [previousHmacSecret] : [];
    Object.assign(
      headers,
      standardHeaders([hmacSecret, ...previous], record.eventId, Math.floor(at / 1000), record.envelope),
    );
  }
  if (record.test) headers['x-webhook-test'] = 'true';
  if (traceHeaders) Object.assign(headers, traceHeaders);
  return { url: subscription.url, headers, body: record.envelope, key: record.subscriptionId };
}

/** An attempt's client span, under the routing span the record names (a root span for a record without one). */
function attemptSpan(record: DeliveryRecord): Span {
  return startSpan(
    `POST ${record.eventType}`,
    'client',
    record.traceparent ? { traceparent: record.traceparent } : {},
    {
      'http.request.method': 'POST',
      'webhook.delivery_id': record.deliveryId,
      'webhook.event_id': record.eventId,
      'webhook.subscription_id': record.subscriptionId,
      'webhook.attempt': record.attempt,
    },
  );
}

function endAttemptSpan(span: Span, result: AttemptResult): void {
  if (result.statusCode !== null) span.setAttribute('http.response.status_code', result.statusCode);
  const ok = result.statusCode !== null && result.statusCode >= 200 && result.statusCode < 300;
  if (!ok) failSpan(span, result.errorMessage ?? `HTTP ${result.statusCode}`);
  endSpan(span);
}

function logFields(record: DeliveryRecord, outcome: string, extra: Record<string, unknown>) {
  return {
    outcome,
    deliveryId: record.deliveryId,
    eventId: record.eventId,
    subscriptionId: record.subscriptionId,
    tenantId: record.tenantId,
    attempt: record.attempt,
    ...extra,
  };
}
