// The delivery history and replay of the webhook API (DESIGN §7 §10) on real Cassandra and Kafka: history rows are
// written through DeliveryStore for two tenants, read back newest first through every filter and cursor page; a
// replay answers 202 and puts a new series on the deliveries topic with the original envelope and signature.
import { randomUUID } from 'node:crypto';
import type { Consumer } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeliveryRecord } from '../../core/deliveries/delivery-record.ts';
import type { Delivery, DeliveryStatus, StoredEvent } from '../../core/deliveries/delivery.ts';
import { buildEnvelope, signBody } from '../../core/envelope.ts';
import { newId } from '../../core/ids.ts';
import { createKafka } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { createRegistry } from '../../core/registry.ts';
import { topicNames } from '../../core/topics.ts';
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

const HOUR = 3_600_000;
const STATUSES: DeliveryStatus[] = ['acknowledged', 'abandoned', 'retrying', 'queued', 'superseded'];
const VALIDATED = 'purchaseOrder.validated';
const CANCELLED = 'purchaseOrder.cancelled';

/** How long ago each seeded delivery was queued: ties, several hours, and more than one page's 72-hour scan. */
const AGES = [
  1_000,
  2_000,
  3_000,
  3_000,
  4_000,
  10_000,
  20_000,
  2 * HOUR,
  2 * HOUR + 5,
  5 * HOUR,
  30 * HOUR,
  80 * HOUR,
  100 * HOUR,
  200 * HOUR,
  700 * HOUR,
];

/** Newest first: queuedAt descending, then id descending (the index tables' clustering order). */
const newestFirst = (a: Delivery, b: Delivery) =>
  b.queuedAt.getTime() - a.queuedAt.getTime() || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0);

function view(delivery: Delivery): DeliveryView {
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

describe('webhook API: deliveries', () => {
  let api: WebhookApi;
  const tenantA = uniqueTenant('history-a');
  const tenantB = uniqueTenant('history-b');
  let tokenA: string;
  let tokenB: string;
  let subA1: SubscriptionView;
  let subA2: SubscriptionView;
  const seededA: Delivery[] = [];
  const seededB: Delivery[] = [];
  const eventsA = Array.from({ length: 4 }, () => newId());

  const hooks = <T = DeliveryView>(method: string, path: string, token = tokenA) =>
    call<T>(api.base, method, `${WEBHOOKS}${path}`, { token });

  function delivery(tenantId: string, fields: Partial<Delivery> & { age: number }): Delivery {
    const queuedAt = new Date(Date.now() - fields.age);
    const status = fields.status ?? 'acknowledged';
    const ended = status !== 'queued';
    return {
      tenantId,
      id: newId(),
      eventId: newId(),
      eventType: VALIDATED,
      subscriptionId: subA1.id,
      entityId: `po-${randomUUID().slice(0, 8)}`,
      status,
      attemptCount: ended ? 2 : 0,
      lastStatusCode: ended ? 500 : null,
      lastErrorMessage: ended ? 'HTTP 500' : null,
      nextRetryAt: status === 'retrying' ? new Date(Date.now() + 60_000) : null,
      queuedAt,
      occurredAt: new Date(queuedAt.getTime() - 250).toISOString(),
      replayOf: null,
      signature: null,
      ...fields,
    };
  }

  /** Every id of a listing, following nextCursor to the end; each page is checked against `limit`. */
  async function collect(query: Record<string, string>, limit?: number, token = tokenA): Promise<string[]> {
    const ids: string[] = [];
    let cursor: string | null = null;
    for (let pages = 0; ; pages += 1) {
      expect(pages, 'pages followed').toBeLessThan(100);
      const params = new URLSearchParams(query);
      if (limit !== undefined) params.set('limit', String(limit));
      if (cursor !== null) params.set('cursor', cursor);
      const page = await hooks<Page<DeliveryView>>('GET', `/Deliveries?${params}`, token);
      expect(page.status, page.text).toBe(200);
      expect(Object.keys(page.body).sort()).toEqual(['items', 'nextCursor']);
      expect(page.body.items.length).toBeLessThanOrEqual(limit ?? 50);
      ids.push(...page.body.items.map((item) => item.id));
      cursor = page.body.nextCursor;
      if (cursor === null) return ids;
    }
  }

  const ids = (deliveries: Delivery[]) => [...deliveries].sort(newestFirst).map((entry) => entry.id);

  beforeAll(async () => {
    api = await startWebhookApi();
    tokenA = await api.tokenFor(tenantA);
    tokenB = await api.tokenFor(tenantB);
    const create = async (token: string, body: Record<string, unknown>) => {
      const answer = await call<SubscriptionView>(api.base, 'POST', `${WEBHOOKS}/Subscriptions`, { token, body });
      expect(answer.status).toBe(201);
      return answer.body;
    };
    subA1 = await create(tokenA, subscriptionBody({ authenticationMode: 'Hmac' }));
    subA2 = await create(tokenA, subscriptionBody());
    const subB = await create(tokenB, subscriptionBody());

    AGES.forEach((age, index) => {
      seededA.push(
        delivery(tenantA, {
          age,
          status: STATUSES[index % STATUSES.length]!,
          subscriptionId: index % 2 === 0 ? subA1.id : subA2.id,
          eventType: index % 3 === 0 ? CANCELLED : VALIDATED,
          eventId: eventsA[index % eventsA.length]!,
        }),
      );
    });
    // Tenant B reuses tenant A's ids as filter values: the tenant, not id uniqueness, keeps them apart.
    AGES.slice(0, 8).forEach((age, index) => {
      seededB.push(
        delivery(tenantB, {
          age,
          status: STATUSES[index % STATUSES.length]!,
          subscriptionId: index % 2 === 0 ? subA1.id : subB.id,
          eventType: index % 3 === 0 ? CANCELLED : VALIDATED,
          eventId: eventsA[index % eventsA.length]!,
        }),
      );
    });
    await Promise.all([...seededA, ...seededB].map((entry) => api.gateway.deliveries.insertDelivery(entry)));
  });

  afterAll(async () => {
    await api?.close();
  });

  describe('GET /Deliveries', () => {
    it('lists the tenant history newest first, each delivery once, in the documented shape', async () => {
      expect(await collect({})).toEqual(ids(seededA));
      const first = await hooks<Page<DeliveryView>>('GET', '/Deliveries');
      const newest = [...seededA].sort(newestFirst)[0]!;
      expect(first.body.items[0]).toEqual(view(newest));
      for (const item of first.body.items) {
        expect(item.queuedAt).toMatch(ISO_MS);
        expect(Object.keys(item).sort()).toEqual(Object.keys(view(newest)).sort());
      }
    });

    it.each([1, 2, 3, 7, 500])(
      'pages with limit=%i and nextCursor, visiting every delivery exactly once',
      async (limit) => {
        const visited = await collect({}, limit);
        expect(visited).toEqual(ids(seededA));
        expect(new Set(visited).size).toBe(visited.length);
      },
    );

    it.each([
      ['subscriptionId', () => ({ subscriptionId: subA1.id }), (d: Delivery) => d.subscriptionId === subA1.id],
      [
        'subscriptionId (the other)',
        () => ({ subscriptionId: subA2.id }),
        (d: Delivery) => d.subscriptionId === subA2.id,
      ],
      ['eventId', () => ({ eventId: eventsA[1]! }), (d: Delivery) => d.eventId === eventsA[1]],
      ['eventType', () => ({ eventType: CANCELLED }), (d: Delivery) => d.eventType === CANCELLED],
      ['status', () => ({ status: 'abandoned' }), (d: Delivery) => d.status === 'abandoned'],
      [
        'subscriptionId + status',
        () => ({ subscriptionId: subA1.id, status: 'acknowledged' }),
        (d: Delivery) => d.subscriptionId === subA1.id && d.status === 'acknowledged',
      ],
      [
        'eventType + status',
        () => ({ eventType: VALIDATED, status: 'retrying' }),
        (d: Delivery) => d.eventType === VALIDATED && d.status === 'retrying',
      ],
      [
        'eventId + subscriptionId',
        () => ({ eventId: eventsA[0]!, subscriptionId: subA1.id }),
        (d: Delivery) => d.eventId === eventsA[0] && d.subscriptionId === subA1.id,
      ],
    ])('filters by %s, newest first, whole and paged', async (_name, query, keep) => {
      const expected = ids(seededA.filter(keep));
      expect(expected.length).toBeGreaterThan(0);
      expect(await collect(query())).toEqual(expected);
      expect(await collect(query(), 2)).toEqual(expected);
      expect(await collect(query(), 1)).toEqual(expected);
    });

    it('filters by a time range of queue times (from inclusive, to exclusive), alone and with other filters', async () => {
      const at = (index: number) => seededA[index]!.queuedAt.getTime();
      const within = (from: number | undefined, to: number | undefined) => (d: Delivery) =>
        (from === undefined || d.queuedAt.getTime() >= from) && (to === undefined || d.queuedAt.getTime() < to);
      const iso = (ms: number) => new Date(ms).toISOString();
      // Ranges inside one hour, across many hours (80 h back to 2 h back), open at either end, and on exact edges.
      const ranges: [number | undefined, number | undefined][] = [
        [at(4), at(1)],
        [at(11), at(8)],
        [at(8), undefined],
        [undefined, at(10)],
        [at(7), at(7) + 1],
        [at(14) - 1, at(13)],
      ];
      for (const [from, to] of ranges) {
        const query = {
          ...(from === undefined ? {} : { from: iso(from) }),
          ...(to === undefined ? {} : { to: iso(to) }),
        };
        const expected = ids(seededA.filter(within(from, to)));
        expect(expected.length, JSON.stringify(query)).toBeGreaterThan(0);
        expect(await collect(query), JSON.stringify(query)).toEqual(expected);
        expect(await collect(query, 2)).toEqual(expected);
        const bySubscription = ids(seededA.filter((d) => within(from, to)(d) && d.subscriptionId === subA1.id));
        expect(await collect({ ...query, subscriptionId: subA1.id })).toEqual(bySubscription);
        const byEvent = ids(seededA.filter((d) => within(from, to)(d) && d.eventId === eventsA[0]));
        expect(await collect({ ...query, eventId: eventsA[0]! }, 1)).toEqual(byEvent);
      }
      expect(await collect({ from: iso(Date.now() + HOUR) })).toEqual([]);
      expect(await collect({ to: iso(at(seededA.length - 1)) })).toEqual([]);
    });

    it('refuses a time range whose to is not after its from, and a from that is no date-time (400 naming it)', async () => {
      const now = new Date().toISOString();
      const equal = await hooks<{ errors: { path: string }[] }>('GET', `/Deliveries?from=${now}&to=${now}`);
      expect(equal.status).toBe(400);
      expect(equal.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(equal.body.errors.map((error) => error.path)).toEqual(['to']);
      const garbled = await hooks<{ errors: { path: string }[] }>('GET', '/Deliveries?from=yesterday');
      expect(garbled.status).toBe(400);
      expect(JSON.stringify(garbled.body.errors)).toContain('from');
    });

    it('answers an empty list for filters that match nothing', async () => {
      const queries: Record<string, string>[] = [
        { subscriptionId: 'none' },
        { eventId: 'none' },
        { eventType: 'nope.x' },
      ];
      for (const query of queries) {
        expect(await collect(query)).toEqual([]);
      }
      const statusQueued = await collect({ subscriptionId: subA2.id, status: 'superseded' });
      expect(statusQueued).toEqual(
        ids(seededA.filter((d) => d.subscriptionId === subA2.id && d.status === 'superseded')),
      );
    });

    it('never shows another tenant deliveries, even under the same filter values', async () => {
      const all = await collect({}, 4, tokenB);
      expect(all).toEqual(ids(seededB));
      const seededIdsA = new Set(seededA.map((d) => d.id));
      for (const id of all) expect(seededIdsA.has(id)).toBe(false);
      expect(await collect({ subscriptionId: subA1.id }, undefined, tokenB)).toEqual(
        ids(seededB.filter((d) => d.subscriptionId === subA1.id)),
      );
      expect(await collect({ eventId: eventsA[0]! }, undefined, tokenB)).toEqual(
        ids(seededB.filter((d) => d.eventId === eventsA[0])),
      );
      expect(await collect({ eventId: eventsA[0]! })).toEqual(ids(seededA.filter((d) => d.eventId === eventsA[0])));
      for (const entry of seededB) expectProblem(await hooks('GET', `/Deliveries/${entry.id}`), 404);
      for (const entry of seededA) expectProblem(await hooks('GET', `/Deliveries/${entry.id}`, tokenB), 404);
    });

    it('pages by 50 when no limit is given', async () => {
      const tenantC = uniqueTenant('history-c');
      const tokenC = await api.tokenFor(tenantC);
      const many = Array.from({ length: 55 }, (_, index) => delivery(tenantC, { age: 1_000 + index * 10 }));
      await Promise.all(many.map((entry) => api.gateway.deliveries.insertDelivery(entry)));
      const first = await hooks<Page<DeliveryView>>('GET', '/Deliveries', tokenC);
      expect(first.body.items).toHaveLength(50);
      expect(first.body.nextCursor).not.toBeNull();
      expect(await collect({}, undefined, tokenC)).toEqual(ids(many));
    });
  });

  describe('GET /Deliveries/{id}', () => {
    it('answers the delivery with its attempts in order', async () => {
      const entry = delivery(tenantA, { age: 30_000, status: 'queued', subscriptionId: subA2.id });
      await api.gateway.deliveries.insertDelivery(entry);
      const first = new Date(Date.now() - 20_000);
      const second = new Date(Date.now() - 10_000);
      const retryAt = new Date(Date.now() + 120_000);
      const store = api.gateway.deliveries;
      const series = { tenantId: tenantA, deliveryId: entry.id, queuedAt: entry.queuedAt.getTime() };
      await store.recordAttempt(
        series,
        { attempt: 1, at: first, statusCode: null, errorMessage: 'timed out after 30000 ms', durationMs: 30_000 },
        { status: 'retrying', nextRetryAt: retryAt },
      );
      await store.recordAttempt(
        series,
        { attempt: 2, at: second, statusCode: 503, errorMessage: 'HTTP 503', durationMs: 12 },
        { status: 'retrying', nextRetryAt: retryAt },
      );
      const answer = await hooks('GET', `/Deliveries/${entry.id}`);
      expect(answer.status).toBe(200);
      expect(answer.body).toEqual({
        ...view(entry),
        status: 'retrying',
        attemptCount: 2,
        lastStatusCode: 503,
        lastErrorMessage: 'HTTP 503',
        nextRetryAt: retryAt.toISOString(),
        attempts: [
          {
            attempt: 1,
            at: first.toISOString(),
            statusCode: null,
            errorMessage: 'timed out after 30000 ms',
            durationMs: 30_000,
          },
          { attempt: 2, at: second.toISOString(), statusCode: 503, errorMessage: 'HTTP 503', durationMs: 12 },
        ],
        // Seeded without its event (as one past retention): the body can no longer be shown.
        envelope: null,
      });
      const fresh = seededA.find((d) => d.status === 'queued')!;
      expect((await hooks('GET', `/Deliveries/${fresh.id}`)).body).toEqual({
        ...view(fresh),
        attempts: [],
        envelope: null,
      });
    });
  });

  describe('POST /Deliveries/{id}/replay', () => {
    let consumer: Consumer;
    const records = new Map<string, { key: string; record: DeliveryRecord }>();
    const payload = Buffer.from('{"id":"po-7",  "total":"1.50", "note":"caf\\u00e9 é \\"q\\""}', 'utf8');

    /** An ended (or pending) delivery of tenant A on subA1 (Hmac), with its event, envelope and signature. */
    async function seedEnded(status: DeliveryStatus, subscriptionId = subA1.id) {
      const event: StoredEvent = {
        tenantId: tenantA,
        eventId: newId(),
        eventType: VALIDATED,
        occurredAt: new Date(Date.now() - 5_000).toISOString(),
        entityId: 'po-7',
        reference: 'PO-000007',
        resourceUrl: '/CorePurchase/REST/PurchaseOrders/po-7',
        payload,
      };
      const envelope = buildEnvelope(
        { ...event, subscriptionId },
        payload,
        api.gateway.config.webhook.payloadLimitBytes,
      );
      const secret = (await api.gateway.subscriptions.get(tenantA, subscriptionId))?.secrets.hmacSecret;
      const original = delivery(tenantA, {
        age: 4_000,
        status,
        subscriptionId,
        eventId: event.eventId,
        entityId: event.entityId,
        occurredAt: event.occurredAt,
        signature: secret ? signBody(secret, envelope) : null,
      });
      await api.gateway.deliveries.createDeliveries(event, [original], Date.now());
      return { event, envelope, original };
    }

    const replay = (id: string, token = tokenA) => hooks('POST', `/Deliveries/${id}/replay`, token);

    beforeAll(async () => {
      const config = api.gateway.config;
      const logger = createLogger('replay-test', 'error');
      const registry = createRegistry(config.schemaRegistryUrl);
      consumer = createKafka(config.kafka.brokers, 'replay-test', logger).consumer({
        groupId: `replay-test-${randomUUID()}`,
        maxWaitTimeInMs: 200,
      });
      await consumer.connect();
      await consumer.subscribe({ topics: [topicNames(config).deliveries], fromBeginning: true });
      await consumer.run({
        eachMessage: async ({ message }) => {
          if (!message.value) return;
          const record = (await registry.decode(message.value)) as DeliveryRecord;
          records.set(record.deliveryId, { key: message.key?.toString('utf8') ?? '', record });
        },
      });
    });

    afterAll(async () => {
      await consumer?.disconnect();
    });

    it.each(['acknowledged', 'abandoned', 'superseded'] as const)(
      'replays a %s delivery: 202, a new series on the deliveries topic with the original envelope and signature',
      async (status) => {
        const { event, envelope, original } = await seedEnded(status);
        expect(original.signature).toMatch(/^[A-Za-z0-9+/]{43}=$/);
        // Rotating the secret changes nothing for the replay: it keeps the signature computed when first queued.
        const rotated = await hooks('POST', `/Subscriptions/${subA1.id}/secret/rotate`);
        expect(rotated.status).toBe(200);

        const answer = await replay(original.id);
        expect(answer.status, answer.text).toBe(202);
        const replayed = answer.body;
        expect(replayed.id).not.toBe(original.id);
        expect(replayed).toEqual({
          ...view(original),
          id: expect.any(String),
          status: 'queued',
          attemptCount: 0,
          lastStatusCode: null,
          lastErrorMessage: null,
          nextRetryAt: null,
          queuedAt: expect.stringMatching(ISO_MS),
          replayOf: original.id,
        });
        expect(Date.parse(replayed.queuedAt)).toBeGreaterThan(original.queuedAt.getTime());

        const location = new URL(answer.headers.get('location')!, answer.url);
        expect(location.pathname).toBe(`${WEBHOOKS}/Deliveries/${replayed.id}`);
        const fetched = await call<DeliveryView>(api.base, 'GET', location.pathname, { token: tokenA });
        expect(fetched.status).toBe(200);
        expect(fetched.body).toEqual({ ...replayed, attempts: [], envelope: envelope.toString('utf8') });

        const published = await waitFor(() => records.get(replayed.id), 'the replay on the deliveries topic');
        expect(published.key).toBe(subA1.id);
        expect(published.record).toMatchObject({
          deliveryId: replayed.id,
          tenantId: tenantA,
          subscriptionId: subA1.id,
          eventId: event.eventId,
          eventType: VALIDATED,
          entityId: event.entityId,
          occurredAt: event.occurredAt,
          attempt: 1,
          signature: original.signature,
          replayOf: original.id,
        });
        expect(published.record.queuedAt).toBe(Date.parse(replayed.queuedAt));
        expect(Buffer.compare(published.record.envelope, envelope)).toBe(0);
        expect(published.record.envelope.includes(payload)).toBe(true);

        // The original is unchanged; the event's history shows both series, the replay first.
        expect((await hooks('GET', `/Deliveries/${original.id}`)).body).toMatchObject(view(original));
        expect(await collect({ eventId: event.eventId })).toEqual([replayed.id, original.id]);
        // The replay is itself pending: replaying it now is refused.
        expectProblem(await replay(replayed.id), 409);
      },
    );

    it('replays exactly the bytes first sent, even after the payload limit was lowered (body and signature agree)', async () => {
      // Routed when the limit was higher: the payload was embedded and signed. The gateway's limit is lower now.
      const big = Buffer.from(
        JSON.stringify({ id: 'po-8', note: 'x'.repeat(api.gateway.config.webhook.payloadLimitBytes) }),
      );
      const event: StoredEvent = {
        tenantId: tenantA,
        eventId: newId(),
        eventType: VALIDATED,
        occurredAt: new Date(Date.now() - 5_000).toISOString(),
        entityId: 'po-8',
        reference: 'PO-000008',
        resourceUrl: '/CorePurchase/REST/PurchaseOrders/po-8',
        payload: big,
      };
      const envelope = buildEnvelope({ ...event, subscriptionId: subA1.id }, big, big.length);
      const secret = (await api.gateway.subscriptions.get(tenantA, subA1.id))!.secrets.hmacSecret!;
      const original = delivery(tenantA, {
        age: 4_000,
        status: 'abandoned',
        subscriptionId: subA1.id,
        eventId: event.eventId,
        entityId: event.entityId,
        occurredAt: event.occurredAt,
        signature: signBody(secret, envelope),
      });
      await api.gateway.deliveries.createDeliveries(event, [original], Date.now());

      const answer = await replay(original.id);
      expect(answer.status, answer.text).toBe(202);
      const published = await waitFor(() => records.get(answer.body.id as string), 'the replay on the topic');
      expect(Buffer.compare(published.record.envelope, envelope)).toBe(0);
      expect(published.record.signature).toBe(signBody(secret, published.record.envelope));
      // The history shows the body as sent: the bytes its signature covers.
      const shown = await hooks<{ envelope: string | null; signature: string }>('GET', `/Deliveries/${original.id}`);
      expect(Buffer.from(shown.body.envelope!, 'utf8').equals(envelope)).toBe(true);
      expect(signBody(secret, Buffer.from(shown.body.envelope!, 'utf8'))).toBe(original.signature);
    });

    it.each(['queued', 'retrying'] as const)(
      'answers 409 while the delivery is %s, creating nothing',
      async (status) => {
        const { event, original } = await seedEnded(status);
        expectProblem(await replay(original.id), 409);
        expect(await collect({ eventId: event.eventId })).toEqual([original.id]);
        expect((await hooks('GET', `/Deliveries/${original.id}`)).body.status).toBe(status);
      },
    );

    it('answers 409 when the subscription was deleted', async () => {
      const doomed = await call<SubscriptionView>(api.base, 'POST', `${WEBHOOKS}/Subscriptions`, {
        token: tokenA,
        body: subscriptionBody(),
      });
      const { event, original } = await seedEnded('abandoned', doomed.body.id);
      expect((await hooks('DELETE', `/Subscriptions/${doomed.body.id}`)).status).toBe(204);
      expectProblem(await replay(original.id), 409);
      expect(await collect({ eventId: event.eventId })).toEqual([original.id]);
    });

    it('answers 404 for another tenant delivery and for an unknown id, creating nothing', async () => {
      const { event, original } = await seedEnded('abandoned');
      expectProblem(await replay(original.id, tokenB), 404);
      expectProblem(await replay('no-such-delivery'), 404);
      expect(await collect({ eventId: event.eventId })).toEqual([original.id]);
      expect(await collect({ eventId: event.eventId }, undefined, tokenB)).toEqual([]);
    });
  });
});
