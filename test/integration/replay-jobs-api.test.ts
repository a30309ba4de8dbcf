// Bulk replay's API (POST /Deliveries/replay, /ReplayJobs) on the in-process gateway with real Cassandra and Kafka:
// validation answered with 400 problems naming the fields, tenant isolation (404), cancel (409 once ended); and a
// replay runner, in this process on the same store, carrying a job out over a seeded history.
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeliveryRecord } from '../../core/deliveries/delivery-record.ts';
import type { Delivery, DeliveryStatus, StoredEvent } from '../../core/deliveries/delivery.ts';
import { buildEnvelope, signBody } from '../../core/envelope.ts';
import { newId } from '../../core/ids.ts';
import { replayIdFor } from '../../core/replay-jobs/replay-job.ts';
import { ReplayJobStore } from '../../core/replay-jobs/replay-job-store.ts';
import { ReplayRunner, type ReplayJobLedger } from '../../router/replay-runner.ts';
import { waitFor } from '../support/harness.ts';
import {
  call,
  expectProblem,
  ISO_MS,
  startWebhookApi,
  subscriptionBody,
  uniqueTenant,
  WEBHOOKS,
  type DeliveryView,
  type Page,
  type SubscriptionView,
  type WebhookApi,
} from '../support/webhook-api.ts';

interface JobView {
  id: string;
  status: string;
  filters: Record<string, unknown>;
  matched: number;
  queued: number;
  skipped: number;
  delivered: number;
  failed: number;
  createdAt: string;
  updatedAt: string;
  finishedAt: string | null;
  error: string | null;
}

describe('webhook API: bulk replay jobs', () => {
  let api: WebhookApi;
  const tenantA = uniqueTenant('replay-jobs-a');
  const tenantB = uniqueTenant('replay-jobs-b');
  let tokenA: string;
  let tokenB: string;
  let subA: SubscriptionView;
  let subB: SubscriptionView;

  const hooks = <T = JobView>(method: string, path: string, token = tokenA, body?: unknown) =>
    call<T>(api.base, method, `${WEBHOOKS}${path}`, { token, body });
  const create = (body: unknown, token = tokenA) => hooks('POST', '/Deliveries/replay', token, body);

  beforeAll(async () => {
    api = await startWebhookApi();
    tokenA = await api.tokenFor(tenantA);
    tokenB = await api.tokenFor(tenantB);
    const subscribe = async (token: string) => {
      const answer = await call<SubscriptionView>(api.base, 'POST', `${WEBHOOKS}/Subscriptions`, {
        token,
        body: subscriptionBody({ authenticationMode: 'Hmac' }),
      });
      expect(answer.status, answer.text).toBe(201);
      return answer.body;
    };
    subA = await subscribe(tokenA);
    subB = await subscribe(tokenB);
  });

  afterAll(async () => {
    await api?.close();
  });

  describe('POST /Deliveries/replay', () => {
    it('creates a running job: 202, the job, and a Location where it is read back', async () => {
      const from = '2026-01-01T00:00:00.000Z';
      const answer = await create({
        subscriptionId: subA.id,
        status: 'abandoned',
        eventTypes: ['purchaseOrder.*', 'purchaseOrder.*'],
        from,
      });
      expect(answer.status, answer.text).toBe(202);
      expect(answer.body).toEqual({
        id: expect.any(String),
        status: 'running',
        filters: { subscriptionId: subA.id, eventTypes: ['purchaseOrder.*'], status: 'abandoned', from, to: null },
        matched: 0,
        queued: 0,
        skipped: 0,
        delivered: 0,
        failed: 0,
        createdAt: expect.stringMatching(ISO_MS),
        updatedAt: expect.stringMatching(ISO_MS),
        finishedAt: null,
        error: null,
      });
      const location = new URL(answer.headers.get('location')!, answer.url);
      expect(location.pathname).toBe(`${WEBHOOKS}/ReplayJobs/${answer.body.id}`);
      const read = await call<JobView>(api.base, 'GET', location.pathname, { token: tokenA });
      expect(read.status).toBe(200);
      expect(read.body).toEqual(answer.body);
    });

    it.each([
      ['no filter at all', {}, '', /at least one of subscriptionId, status, from or to/],
      ['event types alone', { eventTypes: ['purchaseOrder.validated'] }, '', /at least one of/],
      ['a status that cannot be replayed', { status: 'queued' }, 'status', undefined],
      ['a time that is not one', { from: 'yesterday' }, 'from', undefined],
      ['an empty range', { from: '2026-03-02T00:00:00Z', to: '2026-03-02T00:00:00Z' }, 'to', /after from/],
      ['a reversed range', { from: '2026-03-02T00:00:00Z', to: '2026-03-01T00:00:00+01:00' }, 'to', /after from/],
      ['no event types', { status: 'abandoned', eventTypes: [] }, 'eventTypes', undefined],
      ['a malformed event type', { status: 'abandoned', eventTypes: ['purchaseOrder..x'] }, 'eventTypes.0', undefined],
      ['an unknown field', { status: 'abandoned', subscription: 'x' }, 'subscription', /not a known property/],
      ['a subscriptionId of the wrong type', { subscriptionId: 7 }, 'subscriptionId', undefined],
    ])('answers 400 naming the field for %s, creating nothing', async (_name, body, path, message) => {
      const before = await hooks<Page<JobView>>('GET', '/ReplayJobs?limit=500');
      expectProblem(await create(body), 400, path, message);
      const after = await hooks<Page<JobView>>('GET', '/ReplayJobs?limit=500');
      expect(after.body.items.length).toBe(before.body.items.length);
    });

    it("answers 404 for a subscription that is not the caller tenant's", async () => {
      expectProblem(await create({ subscriptionId: subB.id }), 404);
      expectProblem(await create({ subscriptionId: 'no-such-subscription', status: 'abandoned' }), 404);
    });
  });

  describe('/ReplayJobs', () => {
    it("lists the tenant's jobs newest first, paged, and never another tenant's", async () => {
      const tenant = uniqueTenant('replay-jobs-list');
      const token = await api.tokenFor(tenant);
      const made: string[] = [];
      for (let index = 0; index < 3; index += 1) {
        const answer = await create({ status: 'abandoned' }, token);
        expect(answer.status).toBe(202);
        made.unshift(answer.body.id);
        await new Promise((resolve) => setTimeout(resolve, 5)); // distinct milliseconds: ids sort by time
      }
      const seen: string[] = [];
      let cursor: string | null = null;
      do {
        const query: string = cursor === null ? '?limit=2' : `?limit=2&cursor=${cursor}`;
        const page = await hooks<Page<JobView>>('GET', `/ReplayJobs${query}`, token);
        expect(page.status, page.text).toBe(200);
        expect(page.body.items.length).toBeLessThanOrEqual(2);
        seen.push(...page.body.items.map((job) => job.id));
        cursor = page.body.nextCursor;
      } while (cursor !== null);
      expect(seen).toEqual(made);
      const others = await hooks<Page<JobView>>('GET', '/ReplayJobs?limit=500', tokenB);
      for (const id of made) expect(others.body.items.map((job) => job.id)).not.toContain(id);
      expectProblem(await hooks('GET', '/ReplayJobs?cursor=not-a-cursor', token), 400, 'cursor');
    });

    it("answers 404 for another tenant's job, to read or cancel it, and leaves it running", async () => {
      const job = (await create({ status: 'abandoned' })).body;
      expectProblem(await hooks('GET', `/ReplayJobs/${job.id}`, tokenB), 404);
      expectProblem(await hooks('POST', `/ReplayJobs/${job.id}/cancel`, tokenB), 404);
      expectProblem(await hooks('GET', '/ReplayJobs/no-such-job'), 404);
      expectProblem(await hooks('POST', '/ReplayJobs/no-such-job/cancel'), 404);
      expect((await hooks('GET', `/ReplayJobs/${job.id}`)).body.status).toBe('running');
    });

    it('cancels a running job once; cancelling it again is a 409', async () => {
      const job = (await create({ status: 'abandoned' })).body;
      const cancelled = await hooks('POST', `/ReplayJobs/${job.id}/cancel`);
      expect(cancelled.status, cancelled.text).toBe(200);
      expect(cancelled.body).toMatchObject({
        id: job.id,
        status: 'cancelled',
        finishedAt: expect.stringMatching(ISO_MS),
      });
      expectProblem(await hooks('POST', `/ReplayJobs/${job.id}/cancel`), 409, undefined);
      expect((await hooks('GET', `/ReplayJobs/${job.id}`)).body.status).toBe('cancelled');
    });
  });

  describe('a job carried out by a replay runner', () => {
    const payload = Buffer.from('{"id":"po-9",  "total":"2.50"}');

    /** A delivery of tenant A on subA with its event, envelope and signature, queued `ageMs` ago. */
    async function seed(status: DeliveryStatus, ageMs: number, subscriptionId = subA.id) {
      const event: StoredEvent = {
        tenantId: tenantA,
        eventId: newId(),
        eventType: 'purchaseOrder.validated',
        occurredAt: new Date(Date.now() - ageMs - 100).toISOString(),
        entityId: 'po-9',
        reference: 'PO-000009',
        resourceUrl: '/CorePurchase/REST/PurchaseOrders/po-9',
        payload,
      };
      const envelope = buildEnvelope({ ...event, subscriptionId }, payload, 204_800);
      const secret = (await api.gateway.subscriptions.get(tenantA, subscriptionId))?.secrets.hmacSecret;
      const delivery: Delivery = {
        tenantId: tenantA,
        id: newId(),
        eventId: event.eventId,
        eventType: event.eventType,
        subscriptionId,
        entityId: event.entityId,
        status,
        attemptCount: 3,
        lastStatusCode: 500,
        lastErrorMessage: 'HTTP 500',
        nextRetryAt: null,
        queuedAt: new Date(Date.now() - ageMs),
        occurredAt: event.occurredAt,
        replayOf: null,
        signature: secret ? signBody(secret, envelope) : null,
      };
      await api.gateway.deliveries.createDeliveries(event, [delivery], Date.now());
      return { delivery, envelope };
    }

    it('replays the matching ended deliveries once each and completes; then cancel is a 409', async () => {
      const other = (
        await call<SubscriptionView>(api.base, 'POST', `${WEBHOOKS}/Subscriptions`, {
          token: tokenA,
          body: subscriptionBody(),
        })
      ).body;
      const abandoned = await Promise.all([1, 2, 3].map((index) => seed('abandoned', index * 60_000)));
      await seed('acknowledged', 30_000);
      await seed('abandoned', 30_000, other.id);
      const job = (await create({ subscriptionId: subA.id, status: 'abandoned' })).body;

      const store = new ReplayJobStore(api.gateway.platform.db, api.gateway.config.webhook.historyRetentionMs);
      const published: DeliveryRecord[] = [];
      const deliveries = api.gateway.deliveries;
      // Only this job: others of the run (the contract test's hundreds) would each walk 30 days of empty hours here.
      const jobs: ReplayJobLedger = Object.assign(Object.create(store) as ReplayJobStore, {
        active: async () => (await store.active()).filter((entry) => entry.jobId === job.id),
      });
      const runner = new ReplayRunner({
        jobs,
        history: deliveries,
        sources: {
          getEvent: (tenantId, eventId) => deliveries.getEvent(tenantId, eventId),
          subscriptionExists: async (tenantId, id) => (await api.gateway.subscriptions.get(tenantId, id)) !== undefined,
        },
        publish: async (records) => {
          published.push(...records);
        },
        store: (delivery) => deliveries.insertDelivery(delivery),
        owner: 'test-runner',
        settings: {
          ratePerJob: 2,
          ratePerProcess: 100,
          maxJobs: 100,
          leaseMs: 5_000,
          pollMs: 100,
          historyRetentionMs: api.gateway.config.webhook.historyRetentionMs,
        },
        logger: pino({ level: 'silent' }),
      });
      const stop = new AbortController();
      const running = runner.run(stop.signal);
      try {
        const done = await waitFor(async () => {
          const read = await hooks('GET', `/ReplayJobs/${job.id}`);
          return read.body.status === 'completed' ? read.body : undefined;
        }, 'the job to complete');
        expect(done).toMatchObject({ matched: 3, queued: 3, skipped: 0, finishedAt: expect.stringMatching(ISO_MS) });
      } finally {
        stop.abort();
        await running;
      }

      expect(published.map((record) => record.replayOf).sort()).toEqual(
        abandoned.map(({ delivery }) => delivery.id).sort(),
      );
      for (const { delivery, envelope } of abandoned) {
        const replayId = replayIdFor(job.id, delivery.id);
        const record = published.find((entry) => entry.deliveryId === replayId)!;
        expect(record).toMatchObject({ eventId: delivery.eventId, signature: delivery.signature, replayJobId: job.id });
        expect(record.envelope.equals(envelope)).toBe(true);
        const row = await call<DeliveryView>(api.base, 'GET', `${WEBHOOKS}/Deliveries/${replayId}`, { token: tokenA });
        expect(row.body).toMatchObject({ status: 'queued', replayOf: delivery.id, eventId: delivery.eventId });
      }

      // The dispatcher counts the replays' ends; the job shows them.
      await store.countOutcome(tenantA, job.id, 'delivered');
      await store.countOutcome(tenantA, job.id, 'failed');
      expect((await hooks('GET', `/ReplayJobs/${job.id}`)).body).toMatchObject({ delivered: 1, failed: 1 });
      expectProblem(await hooks('POST', `/ReplayJobs/${job.id}/cancel`), 409);
    });
  });
});
