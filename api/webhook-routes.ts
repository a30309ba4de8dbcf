import { blankSubscription, SECRET_ROTATION_WINDOW_MS, signsWithSecret } from '../core/subscriptions/subscription.ts';
import { generateStandardSecret } from '../core/standard-webhooks.ts';
import { createHash } from 'node:crypto';
import type {} from '@fastify/swagger';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { Catalogue } from '../core/catalogue.ts';
import type { Delivery, StoredEvent } from '../core/deliveries/delivery.ts';
import type { DeliveryStore } from '../core/deliveries/delivery-store.ts';
import { listDeliveries, type HistoryQuery } from './delivery-history.ts';
import { callTimeout, settleWithin } from '../core/budget.ts';
import { ConflictError, InvalidInputError, NotFoundError } from '../core/errors.ts';
import type { PageQuery } from '../core/http/paging.ts';
import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import { queueReplays, replayable, replayRecord, sentEnvelope } from '../core/deliveries/replay.ts';
import { randomBytes } from 'node:crypto';
import { deliveryIdFor, newId } from '../core/ids.ts';
import type { SubscriptionStore } from '../core/subscriptions/subscription-store.ts';
import {
  applySubscriptionInput,
  subscriptionView,
  type InputRules,
  type SubscriptionInput,
} from './subscription-input.ts';
import { webhookLinks, webhookOperations } from './webhook-operations.ts';
import { timeRange } from './time-range.ts';
import type { Intent, OperationalCheck } from '../core/operational-outbox.ts';
import { changedFields, subscriptionChanged, type OperationalEvent } from '../core/operational-events.ts';
import type { OperationalLimit } from '../core/operational-limit.ts';
import type { Subscription } from '../core/subscriptions/subscription.ts';

export interface WebhookRoutesOptions {
  subscriptions: SubscriptionStore;
  deliveries: DeliveryStore;
  catalogue: Catalogue;
  rules: Omit<InputRules, 'catalogue'>;
  historyRetentionMs: number;
  /** Puts a replayed series on the deliveries topic; resolves once Kafka acknowledged it. */
  enqueue(record: DeliveryRecord): Promise<void>;
  /** Raises a test event on the events topic the router reads; resolves once Kafka acknowledged it. */
  raiseTestEvent(event: TestEvent): Promise<void>;
  /** How long a replay waits for Kafka before answering 503 (GATEWAY_DEPENDENCY_TIMEOUT). */
  dependencyTimeoutMs: number;
  /**
   * Tells the routers and dispatchers that the tenant's subscriptions changed (a marker on each events topic, in the
   * tenant's partition, and on the changes topic the dispatchers tail); awaited before a change is answered, so every
   * event raised after the answer is routed with it.
   */
  subscriptionsChanged?(tenantId: string): Promise<void>;
  /**
   * Operational events (subscription.created, .updated, .deleted): each written down before its change is stored and
   * raised once it is (core/operational-outbox.ts); updates rate-limited per subscription. None without it.
   */
  operational?: {
    intend(event: OperationalEvent, check: OperationalCheck): Promise<Intent>;
    limit: OperationalLimit;
  };
  /** Idempotency-Key claims (compare-and-set): undefined when claimed, else the earlier request's claim. */
  idempotency: {
    claim(
      tenantId: string,
      key: string,
      requestHash: string,
      subscriptionId: string,
    ): Promise<{ requestHash: string; subscriptionId: string } | undefined>;
    release(tenantId: string, key: string, subscriptionId: string): Promise<void>;
  };
}

/** An integration event raised by POST /Subscriptions/{id}/test, for that subscription only. */
export type TestEvent = Omit<StoredEvent, 'payload'> & { payload: Buffer; testSubscriptionId: string };

/** The webhook API under /CoreWebhook/REST/Webhooks (register inside a context that has the auth plugin). */
export const webhookRoutes: FastifyPluginAsync<WebhookRoutesOptions> = async (app, options) => {
  const { subscriptions, deliveries, catalogue } = options;
  const rules: InputRules = {
    ...options.rules,
    catalogue: () => catalogue.names(),
    schemaOf: (eventType) => catalogue.get(eventType)?.payloadSchema ?? null,
  };

  // A marker that cannot be published (Kafka down past GATEWAY_DEPENDENCY_TIMEOUT) does not undo a change already
  // stored: the change is answered, and routers and dispatchers follow it within WEBHOOK_SUBSCRIPTION_CACHE_TTL.
  const announce = async (request: FastifyRequest, tenantId: string) => {
    if (!options.subscriptionsChanged) return;
    try {
      await withinTimeout(options.subscriptionsChanged(tenantId), options.dependencyTimeoutMs, 'Kafka');
    } catch (error) {
      request.log.warn({ err: error, tenantId }, 'subscription change marker not published; routers follow it later');
    }
  };

  /**
   * Writes down the operational event of a change about to be stored (undefined when there is none to raise: no
   * outbox, or an update over the subscription's rate limit). `before`: the stored version an update changes.
   */
  const intendChange = async (
    kind: 'created' | 'updated' | 'deleted',
    subscription: Subscription,
    before?: Subscription,
  ): Promise<Intent | undefined> => {
    const operational = options.operational;
    if (!operational) return undefined;
    const { tenantId, id } = subscription;
    if (kind === 'deleted') {
      const check = { kind: 'subscription-absent', tenantId, subscriptionId: id } as const;
      return operational.intend(subscriptionChanged('deleted', subscription, new Date()), check);
    }
    const at = subscription.updatedAt;
    const check = { kind: 'subscription-exists', tenantId, subscriptionId: id, since: at.getTime() } as const;
    if (kind === 'created') return operational.intend(subscriptionChanged('created', subscription, at), check);
    const decision = operational.limit.take(id, 'subscription.updated');
    if (!decision.raise) return undefined;
    const update = { changes: changedFields(before!, subscription), suppressed: decision.suppressed };
    return operational.intend(subscriptionChanged('updated', subscription, at, update), check);
  };

  /** Stores a change with its operational event: written down first, raised once stored, forgotten if not stored. */
  const storeWith = async <T>(intent: Intent | undefined, store: () => Promise<T>): Promise<T> => {
    let stored: T;
    try {
      stored = await store();
    } catch (error) {
      await intent?.cancel();
      throw error;
    }
    if (stored === false) await intent?.cancel();
    else await intent?.raise();
    return stored;
  };

  const load = async (tenantId: string, id: string) => {
    const subscription = await subscriptions.get(tenantId, id);
    if (!subscription) throw new NotFoundError('subscription', id);
    return subscription;
  };

  app.post<{ Body: SubscriptionInput; Headers: { 'idempotency-key'?: string } }>(
    '/Subscriptions',
    { schema: webhookOperations.createSubscription, links: webhookLinks.createSubscription },
    async (request, reply) => {
      const tenantId = request.principal.tenantId;
      const key = request.headers['idempotency-key'];
      const requestHash = createHash('sha256').update(JSON.stringify(request.body)).digest('base64');
      const id = newId();
      if (key) {
        // Claimed before anything is created, so concurrent requests with one key create one subscription.
        const earlier = await options.idempotency.claim(tenantId, key, requestHash, id);
        if (earlier && earlier.requestHash !== requestHash) {
          throw new ConflictError('Idempotency-Key was already used with a different request body');
        }
        if (earlier) {
          const existing = await subscriptions.get(tenantId, earlier.subscriptionId);
          if (!existing) {
            throw new ConflictError(
              'a request with this Idempotency-Key is still in progress (or its subscription was deleted); retry later',
            );
          }
          // The first request may have stored it and failed before its marker: the replay gives the same guarantee.
          await announce(request, tenantId);
          return reply
            .code(201)
            .header('location', `./Subscriptions/${existing.id}`)
            .header('idempotent-replayed', 'true')
            .send(
              subscriptionView(
                existing,
                signsWithSecret(existing.authenticationMode) ? existing.secrets.hmacSecret : undefined,
              ),
            );
        }
      }
      let created: Awaited<ReturnType<typeof applySubscriptionInput>>;
      try {
        created = await applySubscriptionInput(blankSubscription(tenantId, id, new Date()), request.body, rules, true);
        const subscription = created.subscription;
        await storeWith(await intendChange('created', subscription), () => subscriptions.save(subscription));
      } catch (error) {
        // A refused or failed request must not hold the key: the client may correct it and retry with the same key.
        if (key) await options.idempotency.release(tenantId, key, id).catch(() => undefined);
        throw error;
      }
      const { subscription, generatedSecret } = created;
      await announce(request, tenantId);
      return reply
        .code(201)
        .header('location', `./Subscriptions/${subscription.id}`)
        .send(
          subscriptionView(
            subscription,
            signsWithSecret(subscription.authenticationMode) ? generatedSecret : undefined,
          ),
        );
    },
  );

  app.get<{ Querystring: PageQuery }>(
    '/Subscriptions',
    { schema: webhookOperations.listSubscriptions, links: webhookLinks.listSubscriptions },
    async (request) => {
      const { limit, cursor } = request.query;
      const page = await subscriptions.pageByTenant(request.principal.tenantId, limit, cursor);
      return { items: page.items.map((subscription) => subscriptionView(subscription)), nextCursor: page.nextCursor };
    },
  );

  app.get<{ Params: { id: string } }>(
    '/Subscriptions/:id',
    { schema: webhookOperations.getSubscription },
    async (request) => subscriptionView(await load(request.principal.tenantId, request.params.id)),
  );

  app.patch<{ Params: { id: string }; Body: SubscriptionInput }>(
    '/Subscriptions/:id',
    { schema: webhookOperations.updateSubscription },
    async (request) => {
      const current = await load(request.principal.tenantId, request.params.id);
      const { subscription, generatedSecret } = await applySubscriptionInput(current, request.body, rules, false);
      subscription.updatedAt = new Date();
      const intent = await intendChange('updated', subscription, current);
      if (!(await storeWith(intent, () => subscriptions.update(subscription)))) {
        throw new NotFoundError('subscription', subscription.id);
      }
      await announce(request, subscription.tenantId);
      // Status and failure days may have moved since the read (dispatcher, status endpoint): answer the stored ones.
      const stored = await load(subscription.tenantId, subscription.id);
      // Switching to Hmac or StandardWebhooks without a secret generates one: this answer is the only place to learn it.
      return subscriptionView(
        { ...subscription, status: stored.status, failureDays: stored.failureDays },
        generatedSecret,
      );
    },
  );

  app.delete<{ Params: { id: string } }>(
    '/Subscriptions/:id',
    { schema: webhookOperations.deleteSubscription },
    async (request, reply) => {
      const current = await load(request.principal.tenantId, request.params.id);
      await storeWith(await intendChange('deleted', current), () =>
        subscriptions.delete(request.principal.tenantId, request.params.id),
      );
      await announce(request, request.principal.tenantId);
      return reply.code(204).send();
    },
  );

  app.patch<{ Params: { id: string }; Body: { status: 'enabled' | 'disabled' } }>(
    '/Subscriptions/:id/status',
    { schema: webhookOperations.setSubscriptionStatus },
    async (request) => {
      const { tenantId } = request.principal;
      const current = await load(tenantId, request.params.id);
      const { status } = request.body;
      const now = new Date();
      // Enabling an enabled subscription (its failure days reset) changes nothing a tenant is told of.
      const intent =
        status === current.status
          ? undefined
          : await intendChange('updated', { ...current, status, updatedAt: now }, current);
      if (!(await storeWith(intent, () => subscriptions.setStatus(tenantId, request.params.id, status, now)))) {
        throw new NotFoundError('subscription', request.params.id);
      }
      await announce(request, tenantId);
      return subscriptionView(await load(tenantId, request.params.id));
    },
  );

  app.post<{ Params: { id: string } }>(
    '/Subscriptions/:id/secret/rotate',
    { schema: webhookOperations.rotateSubscriptionSecret },
    async (request) => {
      const subscription = await load(request.principal.tenantId, request.params.id);
      if (!signsWithSecret(subscription.authenticationMode)) {
        throw new ConflictError(
          `the subscription uses ${subscription.authenticationMode}, not Hmac or StandardWebhooks: it has no secret`,
        );
      }
      const now = new Date();
      // Hmac: deliveries already queued keep the signature computed when they were queued. StandardWebhooks signs each
      // attempt: for SECRET_ROTATION_WINDOW_MS, with the previous secret too (a second signature in the same header).
      const rotation =
        subscription.authenticationMode === 'StandardWebhooks'
          ? {
              hmacSecret: generateStandardSecret(),
              previousHmacSecret: subscription.secrets.hmacSecret,
              previousHmacSecretUntil: now.getTime() + SECRET_ROTATION_WINDOW_MS,
            }
          : { hmacSecret: randomBytes(32).toString('base64') };
      const { hmacSecret } = rotation;
      const rotated = { ...subscription, secrets: { ...subscription.secrets, ...rotation }, updatedAt: now };
      const intent = await intendChange('updated', rotated, subscription);
      if (!(await storeWith(intent, () => subscriptions.update(rotated)))) {
        throw new NotFoundError('subscription', subscription.id);
      }
      await announce(request, subscription.tenantId);
      return { hmacSecret };
    },
  );

  app.post<{ Params: { id: string } }>(
    '/Deliveries/:id/replay',
    { schema: webhookOperations.replayDelivery, links: webhookLinks.replayDelivery },
    async (request, reply) => {
      const { tenantId } = request.principal;
      const original = await deliveries.get(tenantId, request.params.id);
      if (!original) throw new NotFoundError('delivery', request.params.id);
      // The replay rules, shared with bulk replay jobs (core/deliveries/replay.ts): same event, same envelope bytes and
      // signature; a new series with its own id, starting at attempt 1; sent first, stored second.
      const decision = await replayable(original, {
        getEvent: (tenant, eventId) => deliveries.getEvent(tenant, eventId),
        subscriptionExists: async (tenant, id) => (await subscriptions.get(tenant, id)) !== undefined,
      });
      if ('refused' in decision) throw new ConflictError(decision.refused);
      const record = replayRecord(original, decision.event, { deliveryId: newId(), queuedAt: Date.now() });
      const [replay] = await queueReplays(
        [record],
        (records) => withinTimeout(options.enqueue(records[0]!), options.dependencyTimeoutMs, 'Kafka'),
        (delivery) => deliveries.insertDelivery(delivery),
      );
      // Relative to …/Deliveries/{id}/replay, so it resolves to …/Deliveries/{new id}.
      return reply.code(202).header('location', `../${replay!.id}`).send(deliveryView(replay!));
    },
  );

  app.get(
    '/EventTypes',
    { schema: webhookOperations.listEventTypes, links: webhookLinks.listEventTypes },
    async () => ({
      items: catalogue.list(),
      nextCursor: null,
    }),
  );

  app.get<{ Params: { name: string } }>(
    '/EventTypes/:name',
    { schema: webhookOperations.getEventType },
    async (request) => {
      const eventType = catalogue.get(request.params.name);
      if (!eventType) throw new NotFoundError('event type', request.params.name);
      return eventType;
    },
  );

  app.post<{ Params: { id: string }; Body: { eventType: string } }>(
    '/Subscriptions/:id/test',
    { schema: webhookOperations.sendTestEvent },
    async (request, reply) => {
      const { tenantId } = request.principal;
      const subscription = await load(tenantId, request.params.id);
      const eventType = catalogue.get(request.body.eventType);
      if (!eventType) {
        throw new InvalidInputError([
          { path: 'eventType', message: `unknown event type ${request.body.eventType}; GET /EventTypes lists them` },
        ]);
      }
      if (eventType.example === null)
        throw new ConflictError(`event type ${eventType.eventType} has no example payload`);
      if (subscription.status !== 'enabled') {
        throw new ConflictError(`subscription ${subscription.id} is disabled: enable it to receive test events`);
      }
      // The catalogue's example goes the whole way (router, dispatcher, history) as a delivery marked as a test.
      const example = eventType.example as { id?: unknown; reference?: unknown };
      const entityId = typeof example.id === 'string' ? example.id : newId();
      const event: TestEvent = {
        tenantId,
        eventId: newId(),
        eventType: eventType.eventType,
        occurredAt: new Date().toISOString(),
        entityId,
        reference: typeof example.reference === 'string' ? example.reference : null,
        resourceUrl: `/test-events/${eventType.eventType}/${entityId}`,
        payload: Buffer.from(JSON.stringify(eventType.example), 'utf8'),
        testSubscriptionId: subscription.id,
      };
      await withinTimeout(options.raiseTestEvent(event), options.dependencyTimeoutMs, 'Kafka');
      const deliveryId = deliveryIdFor(event.eventId, subscription.id);
      return reply
        .code(202)
        .header('location', `../../Deliveries/${deliveryId}`)
        .send({ eventId: event.eventId, eventType: event.eventType, subscriptionId: subscription.id, deliveryId });
    },
  );

  app.get<{ Querystring: Omit<HistoryQuery, 'tenantId' | 'from' | 'to'> & { from?: string; to?: string } }>(
    '/Deliveries',
    { schema: webhookOperations.listDeliveries, links: webhookLinks.listDeliveries },
    async (request) => {
      const { from, to, ...filters } = request.query;
      const page = await listDeliveries(
        deliveries,
        { ...filters, ...timeRange(from, to), tenantId: request.principal.tenantId },
        options.historyRetentionMs,
      );
      return { items: page.items.map(deliveryView), nextCursor: page.nextCursor };
    },
  );

  app.get<{ Params: { id: string } }>(
    '/Deliveries/:id',
    { schema: webhookOperations.getDelivery, links: webhookLinks.getDelivery },
    async (request) => {
      const { tenantId } = request.principal;
      const delivery = await deliveries.get(tenantId, request.params.id);
      if (!delivery) throw new NotFoundError('delivery', request.params.id);
      const [attempts, event] = await Promise.all([
        deliveries.attempts(tenantId, delivery.id),
        deliveries.getEvent(tenantId, delivery.eventId),
      ]);
      return {
        ...deliveryView(delivery),
        attempts: attempts.map((attempt) => ({ ...attempt, at: attempt.at.toISOString() })),
        // The body as sent: rebuilt from the stored event exactly as a replay sends it (core/deliveries/replay.ts).
        envelope: event ? sentEnvelope(event, delivery.subscriptionId).toString('utf8') : null,
      };
    },
  );
};

export function deliveryView(delivery: Delivery) {
  return {
    id: delivery.id,
    eventId: delivery.eventId,
    eventType: delivery.eventType,
    subscriptionId: delivery.subscriptionId,
    entityId: delivery.entityId,
    status: delivery.status,
    attemptCount: delivery.attemptCount,
    lastStatusCode: delivery.lastStatusCode,
    lastErrorMessage: delivery.lastErrorMessage,
    nextRetryAt: delivery.nextRetryAt?.toISOString() ?? null,
    queuedAt: delivery.queuedAt.toISOString(),
    occurredAt: delivery.occurredAt,
    replayOf: delivery.replayOf,
    test: delivery.test === true,
    abandonReason: delivery.abandonReason ?? null,
  };
}

/**
 * Waits for `work` at most `ms` (less if the request's budget ends sooner), then answers DependencyUnavailableError.
 * The work itself goes on: a replay Kafka takes late is still sent (and its row is then written by the dispatcher's
 * first attempt), never lost.
 */
async function withinTimeout<T>(work: Promise<T>, ms: number, dependency: string): Promise<T> {
  return settleWithin(work, callTimeout(dependency, ms), dependency);
}
