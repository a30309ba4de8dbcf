import type { Attempt, DeliveryStatus } from '../core/deliveries/delivery.ts';
import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import type { Logger } from '../core/log.ts';
import type { DeliveryMetrics } from '../core/metrics.ts';
import type { Subscription } from '../core/subscriptions/subscription.ts';
import { decideFate, failureWindow } from './outcome.ts';
import type { OutboundRequest, Sender } from './http-sender.ts';

/** Where attempts and final states are written. */
export interface AttemptLog {
  recordAttempt(
    tenantId: string,
    deliveryId: string,
    attempt: Attempt,
    next: { status: DeliveryStatus; nextRetryAt: Date | null },
  ): Promise<void>;
  finish(tenantId: string, deliveryId: string, status: DeliveryStatus, errorMessage: string | null): Promise<void>;
  latestForEntity(
    tenantId: string,
    subscriptionId: string,
    entityId: string,
  ): Promise<{ deliveryId: string } | undefined>;
}

/** Moves a failed delivery to a retry tier; resolves once Kafka acknowledged it. */
export type RetryScheduler = (tier: number, record: DeliveryRecord) => Promise<void>;

/** What the dispatcher needs to know and change about subscriptions. */
export interface SubscriptionDirectory {
  get(tenantId: string, id: string): Promise<Subscription | undefined>;
  resetFailureDays(tenantId: string, id: string): Promise<void>;
  recordFailureDay(tenantId: string, id: string, windowStart: number, disableAt: number): Promise<unknown>;
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
  settings: {
    retryDelaysMs: readonly number[];
    deliveryLifetimeMs: number;
    failureDayMs: number;
    autoDisableAfterDays: number;
  };
  now?: () => number;
}

/** Handles one due delivery record: attempt it (or end it) and make the outcome durable before resolving. */
export function createDeliveryHandler(deps: DeliveryHandlerDeps): (record: DeliveryRecord) => Promise<void> {
  const now = deps.now ?? Date.now;
  const { settings, logger } = deps;

  const abandon = async (record: DeliveryRecord, reason: string, subscription: Subscription | undefined) => {
    await deps.attempts.finish(record.tenantId, record.deliveryId, 'abandoned', reason);
    if (subscription && subscription.status === 'enabled') {
      const window = failureWindow(now(), settings.failureDayMs);
      await deps.subscriptions.recordFailureDay(
        record.tenantId,
        record.subscriptionId,
        window,
        settings.autoDisableAfterDays,
      );
    }
    deps.metrics?.outcome('abandoned', undefined);
    logger.info(logFields(record, 'abandoned', { reason }), 'delivery abandoned');
  };

  return async (record) => {
    const subscription = await deps.subscriptions.get(record.tenantId, record.subscriptionId);
    const deadline = record.queuedAt + settings.deliveryLifetimeMs;
    if (!subscription) return abandon(record, 'subscription deleted', undefined);
    if (subscription.status === 'disabled') return abandon(record, 'subscription disabled', undefined);
    if (now() >= deadline) return abandon(record, 'delivery lifetime exceeded', subscription);
    if (subscription.supersedePendingDeliveries && record.replayOf === null) {
      const latest = await deps.attempts.latestForEntity(record.tenantId, record.subscriptionId, record.entityId);
      if (latest && latest.deliveryId !== record.deliveryId) {
        await deps.attempts.finish(
          record.tenantId,
          record.deliveryId,
          'superseded',
          `superseded by ${latest.deliveryId}`,
        );
        deps.metrics?.outcome('superseded', undefined);
        logger.info(logFields(record, 'superseded', { by: latest.deliveryId }), 'delivery superseded');
        return;
      }
    }

    const at = new Date(now());
    const attemptOnce = async (refresh: boolean) => {
      try {
        return await deps.send(await outbound(subscription, record, deps.authHeaders, refresh));
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
    const fate = decideFate(result, record.attempt, now(), deadline, settings.retryDelaysMs);
    const attempt: Attempt = { attempt: record.attempt, at, ...result };
    if (fate.kind !== 'abandoned') {
      deps.metrics?.outcome(fate.kind === 'retry' ? 'retrying' : 'acknowledged', result.durationMs);
    }
    const logBase = logFields(record, fate.kind, { statusCode: result.statusCode, durationMs: result.durationMs });

    if (fate.kind === 'acknowledged') {
      await deps.attempts.recordAttempt(record.tenantId, record.deliveryId, attempt, {
        status: 'acknowledged',
        nextRetryAt: null,
      });
      if (subscription.failureDays > 0)
        await deps.subscriptions.resetFailureDays(record.tenantId, record.subscriptionId);
      logger.info(logBase, 'delivery acknowledged');
    } else if (fate.kind === 'retry') {
      await deps.attempts.recordAttempt(record.tenantId, record.deliveryId, attempt, {
        status: 'retrying',
        nextRetryAt: new Date(fate.dueAt),
      });
      await deps.scheduleRetry(fate.tier, { ...record, attempt: record.attempt + 1, dueAt: fate.dueAt });
      logger.info({ ...logBase, error: result.errorMessage, nextRetryAt: new Date(fate.dueAt) }, 'delivery retrying');
    } else {
      await deps.attempts.recordAttempt(record.tenantId, record.deliveryId, attempt, {
        status: 'abandoned',
        nextRetryAt: null,
      });
      await abandon(record, fate.reason, subscription);
    }
  };
}

async function outbound(
  subscription: Subscription,
  record: DeliveryRecord,
  authHeaders: AuthHeaders,
  refresh: boolean,
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
  return { url: subscription.url, headers, body: record.envelope };
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
