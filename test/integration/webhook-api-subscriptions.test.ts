// The subscription endpoints of the webhook API (DESIGN §7) through an in-process gateway on real Cassandra and
// Kafka: response shapes, the write-only secrets (in answers and at rest), Idempotency-Key, rotation and status.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { types } from 'cassandra-driver';
import { createKafka, partitionOf } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { topicNames } from '../../core/topics.ts';
import { codecFor, createRegistry } from '../../core/registry.ts';
import { waitFor } from '../support/harness.ts';
import {
  call,
  expectProblem,
  ISO_MS,
  PUBLIC_URL,
  startWebhookApi,
  subscriptionBody,
  uniqueTenant,
  WEBHOOKS,
  type Answer,
  type Page,
  type SubscriptionView,
  type WebhookApi,
} from '../support/webhook-api.ts';

const VIEW_KEYS = [
  'apiKey',
  'authenticationMode',
  'createdAt',
  'description',
  'eventTypes',
  'failureDays',
  'filter',
  'id',
  'maxDeliveriesPerSecond',
  'oauth2',
  'ordering',
  'signatureHeaderName',
  'status',
  'supersedePendingDeliveries',
  'updatedAt',
  'url',
];

describe('webhook API: subscriptions', () => {
  let api: WebhookApi;
  let tenant: string;
  let token: string;
  let otherToken: string;

  const hooks = (method: string, path: string, body?: unknown, headers?: Record<string, string>, bearer = token) =>
    call<SubscriptionView>(api.base, method, `${WEBHOOKS}${path}`, { token: bearer, body, headers });
  const create = async (body: Record<string, unknown>, headers?: Record<string, string>) => {
    const answer = await hooks('POST', '/Subscriptions', body, headers);
    expect(answer.status, answer.text).toBe(201);
    return answer;
  };
  /** POST …/secret/rotate: the new secret in its body. */
  const rotate = (id: string) =>
    call<{ hmacSecret: string }>(api.base, 'POST', `${WEBHOOKS}/Subscriptions/${id}/secret/rotate`, { token });
  const list = async (bearer = token) =>
    call<Page<SubscriptionView>>(api.base, 'GET', `${WEBHOOKS}/Subscriptions`, { token: bearer });

  beforeAll(async () => {
    api = await startWebhookApi();
    tenant = uniqueTenant('subs');
    token = await api.tokenFor(tenant);
    otherToken = await api.tokenFor(uniqueTenant('subs-other'));
  });

  afterAll(async () => {
    await api?.close();
  });

  it('creates a subscription: 201, Location, the documented shape with defaults, no secret for None', async () => {
    const created = await create(subscriptionBody({ description: 'orders to the ERP' }));
    const view = created.body;
    expect(Object.keys(view).sort()).toEqual(VIEW_KEYS);
    expect(view).toEqual({
      id: expect.any(String),
      url: PUBLIC_URL,
      eventTypes: ['purchaseOrder.*'],
      authenticationMode: 'None',
      signatureHeaderName: 'X-Webhook-Signature',
      apiKey: null,
      oauth2: null,
      supersedePendingDeliveries: false,
      ordering: 'none',
      description: 'orders to the ERP',
      maxDeliveriesPerSecond: null,
      filter: null,
      status: 'enabled',
      failureDays: 0,
      createdAt: expect.stringMatching(ISO_MS),
      updatedAt: view.createdAt,
    });
    expect(created.headers.get('content-type')).toMatch(/^application\/json/);

    const location = created.headers.get('location');
    expect(location).toBeTruthy();
    const target = new URL(location!, created.url);
    expect(target.pathname).toBe(`${WEBHOOKS}/Subscriptions/${view.id}`);
    const fetched = await call<SubscriptionView>(api.base, 'GET', target.pathname, { token });
    expect(fetched.status).toBe(200);
    expect(fetched.body).toEqual(view);
  });

  it('lists only the caller tenant subscriptions, with nextCursor null', async () => {
    const mine = await create(subscriptionBody());
    const theirs = await hooks('POST', '/Subscriptions', subscriptionBody(), undefined, otherToken);
    expect(theirs.status).toBe(201);

    const page = await list();
    expect(page.status).toBe(200);
    expect(Object.keys(page.body).sort()).toEqual(['items', 'nextCursor']);
    expect(page.body.nextCursor).toBeNull();
    const ids = page.body.items.map((item) => item.id);
    expect(ids).toContain(mine.body.id);
    expect(ids).not.toContain(theirs.body.id);
    expect(page.body.items.find((item) => item.id === mine.body.id)).toEqual(mine.body);
    const otherIds = (await list(otherToken)).body.items.map((item) => item.id);
    expect(otherIds).toContain(theirs.body.id);
    expect(otherIds).not.toContain(mine.body.id);
  });

  it('updates any request field with PATCH and keeps id and createdAt', async () => {
    const created = (await create(subscriptionBody())).body;
    const patched = await hooks('PATCH', `/Subscriptions/${created.id}`, {
      url: 'https://93.184.216.35/other',
      eventTypes: ['purchaseOrder.validated', 'purchaseOrder.cancelled', 'purchaseOrder.validated'],
      supersedePendingDeliveries: true,
      description: 'changed',
      signatureHeaderName: 'X-Signature',
    });
    expect(patched.status, patched.text).toBe(200);
    expect(patched.body).toEqual({
      ...created,
      url: 'https://93.184.216.35/other',
      eventTypes: ['purchaseOrder.validated', 'purchaseOrder.cancelled'],
      supersedePendingDeliveries: true,
      description: 'changed',
      signatureHeaderName: 'X-Signature',
      updatedAt: expect.stringMatching(ISO_MS),
    });
    expect(Date.parse(patched.body.updatedAt)).toBeGreaterThanOrEqual(Date.parse(created.updatedAt));
    expect((await hooks('GET', `/Subscriptions/${created.id}`)).body).toEqual(patched.body);

    const cleared = await hooks('PATCH', `/Subscriptions/${created.id}`, { description: null });
    expect(cleared.status).toBe(200);
    expect(cleared.body.description).toBeNull();
    expect(cleared.body.url).toBe('https://93.184.216.35/other');
  });

  it('deletes with 204 and an empty body; the subscription is then gone (404 on every id route)', async () => {
    const created = (await create(subscriptionBody())).body;
    const deleted = await hooks('DELETE', `/Subscriptions/${created.id}`);
    expect(deleted.status).toBe(204);
    expect(deleted.text).toBe('');
    expectProblem(await hooks('GET', `/Subscriptions/${created.id}`), 404);
    expectProblem(await hooks('DELETE', `/Subscriptions/${created.id}`), 404);
    expectProblem(await hooks('PATCH', `/Subscriptions/${created.id}`, { description: 'x' }), 404);
    expectProblem(await hooks('PATCH', `/Subscriptions/${created.id}/status`, { status: 'enabled' }), 404);
    expectProblem(await hooks('POST', `/Subscriptions/${created.id}/secret/rotate`), 404);
    expect((await list()).body.items.map((item) => item.id)).not.toContain(created.id);
    expect(await api.gateway.subscriptions.get(tenant, created.id)).toBeUndefined();
  });

  it('puts a marker for the tenant on the events topic before it answers each change (routers read it in order)', async () => {
    const markers: { key: string; offset: bigint; inPlace: boolean }[] = [];
    const kafka = createKafka(
      api.gateway.config.kafka.brokers,
      `markers-${randomUUID()}`,
      createLogger('test', 'warn'),
    );
    const consumer = kafka.consumer({ groupId: `markers-${randomUUID()}`, maxWaitTimeInMs: 100 });
    const topic = topicNames(api.gateway.config).purchaseEvents;
    const admin = kafka.admin();
    await admin.connect();
    /** The topic's end in the tenant's partition: a marker published before an answer lies below it afterwards. */
    const partition = partitionOf(
      tenant,
      (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0]!.partitions.length,
    );
    const endOfPartition = async () =>
      BigInt((await admin.fetchTopicOffsets(topic)).find((entry) => entry.partition === partition)!.high);
    try {
      await consumer.connect();
      await consumer.subscribe({ topics: [topic], fromBeginning: true });
      await consumer.run({
        eachMessage: async ({ partition: from, message }) => {
          if (message.headers?.['subscriptions-changed'] === undefined) return;
          const key = message.key!.toString('utf8');
          // Checked here, recorded for the test body: an assertion thrown inside kafkajs is only logged and retried.
          const inPlace = message.value === null && (key !== tenant || from === partition);
          markers.push({ key, offset: BigInt(message.offset), inPlace });
        },
      });
      const start = await endOfPartition();
      const ends: bigint[] = [];
      const created = (await create(subscriptionBody({ authenticationMode: 'Hmac' }))).body;
      ends.push(await endOfPartition());
      expect((await hooks('PATCH', `/Subscriptions/${created.id}`, { description: 'marked' })).status).toBe(200);
      ends.push(await endOfPartition());
      expect((await hooks('PATCH', `/Subscriptions/${created.id}/status`, { status: 'disabled' })).status).toBe(200);
      ends.push(await endOfPartition());
      expect((await hooks('POST', `/Subscriptions/${created.id}/secret/rotate`)).status).toBe(200);
      ends.push(await endOfPartition());
      expect((await hooks('DELETE', `/Subscriptions/${created.id}`)).status).toBe(204);
      ends.push(await endOfPartition());
      const ours = () => markers.filter((marker) => marker.key === tenant && marker.offset >= start);
      await waitFor(() => ours().length >= 5, 'five markers', 20_000);
      expect(ours()).toHaveLength(5);
      expect(ours().every((marker) => marker.inPlace)).toBe(true); // no value, in the tenant's partition
      // Each change's marker was in the partition when its answer came: every later event lies behind it.
      ours().forEach((marker, index) => expect(marker.offset).toBeLessThan(ends[index]!));
    } finally {
      await consumer.disconnect();
      await admin.disconnect();
    }
  });

  it("serves the event type catalogue with the producing service of each, the service's own events included", async () => {
    const answer = await call<Page<Record<string, string>>>(api.base, 'GET', `${WEBHOOKS}/EventTypes`, { token });
    expect(answer.status).toBe(200);
    expect(answer.body.nextCursor).toBeNull();
    expect(answer.body.items.map((item) => `${item.service} ${item.eventType}`)).toEqual([
      'webhooks delivery.abandoned',
      'purchase purchaseOrder.cancelled',
      'purchase purchaseOrder.sent',
      'purchase purchaseOrder.validated',
      'webhooks subscription.created',
      'webhooks subscription.deleted',
      'webhooks subscription.disabled',
      'webhooks subscription.failing',
      'webhooks subscription.recovered',
      'webhooks subscription.updated',
    ]);
    for (const item of answer.body.items) {
      expect(Object.keys(item).sort()).toEqual(['description', 'eventType', 'example', 'payloadSchema', 'service']);
      expect(item.description).not.toBe('');
      expect(item.payloadSchema).toMatchObject({ $schema: 'https://json-schema.org/draft/2020-12/schema' });
    }
  });

  it('raises subscription.created, .updated and .deleted on the events topic before it answers each change', async () => {
    const kafka = createKafka(api.gateway.config.kafka.brokers, `ops-${randomUUID()}`, createLogger('test', 'warn'));
    const topic = topicNames(api.gateway.config).purchaseEvents;
    const codec = await codecFor<{ eventType: string; tenantId: string; entityId: string; payload: Buffer }>(
      createRegistry(api.gateway.config.schemaRegistryUrl),
      'integrationEvent',
      topic,
    );
    const raised: { eventType: string; entityId: string; payload: Record<string, unknown>; text: string }[] = [];
    const consumer = kafka.consumer({ groupId: `ops-${randomUUID()}`, maxWaitTimeInMs: 100 });
    try {
      await consumer.connect();
      await consumer.subscribe({ topics: [topic], fromBeginning: true });
      await consumer.run({
        eachMessage: async ({ message }) => {
          if (message.value === null || message.key?.toString('utf8') !== tenant) return;
          const event = await codec.decode(message.value);
          if (!event.eventType.startsWith('subscription.')) return;
          const text = event.payload.toString('utf8');
          raised.push({ eventType: event.eventType, entityId: event.entityId, payload: JSON.parse(text), text });
        },
      });
      const created = (await create(subscriptionBody({ authenticationMode: 'Hmac' }))).body;
      const ofCreated = () => raised.filter((event) => event.entityId === created.id);
      await waitFor(() => ofCreated().length === 1, 'subscription.created', 20_000);
      expect((await hooks('PATCH', `/Subscriptions/${created.id}`, { description: 'told' })).status).toBe(200);
      expect((await hooks('PATCH', `/Subscriptions/${created.id}/status`, { status: 'disabled' })).status).toBe(200);
      expect((await hooks('PATCH', `/Subscriptions/${created.id}/status`, { status: 'disabled' })).status).toBe(200);
      expect((await rotate(created.id)).status).toBe(200);
      expect((await hooks('DELETE', `/Subscriptions/${created.id}`)).status).toBe(204);
      await waitFor(() => ofCreated().length >= 5, 'five operational events', 20_000);
      await new Promise((resolve) => setTimeout(resolve, 300)); // nothing more comes (the no-op status change)
      expect(ofCreated().map((event) => [event.eventType, event.payload.changes ?? null])).toEqual([
        ['subscription.created', null],
        ['subscription.updated', ['description']],
        ['subscription.updated', ['status']],
        ['subscription.updated', ['secrets']],
        ['subscription.deleted', null],
      ]);
      expect(ofCreated()[1]!.payload.subscription).toMatchObject({ id: created.id, description: 'told' });
      for (const event of ofCreated()) expect(event.text).not.toContain(created.hmacSecret);
    } finally {
      await consumer.disconnect();
    }
  });

  describe('filter', () => {
    const filter = {
      eventType: 'purchaseOrder.validated',
      'payload.totalAmount': { $gte: '10000' },
      $or: [{ 'payload.supplierName': 'Acme Supplies' }, { 'payload.rows.itemCode': { $startsWith: 'TONER-' } }],
    };

    it('is set at creation, shown by GET and the list, replaced and cleared (null) by PATCH', async () => {
      const created = (await create(subscriptionBody({ filter }))).body;
      expect(created.filter).toEqual(filter);
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body.filter).toEqual(filter);
      expect((await list()).body.items.find((item) => item.id === created.id)?.filter).toEqual(filter);
      const narrower = { ...filter, 'payload.currency': 'EUR' };
      const changed = await hooks('PATCH', `/Subscriptions/${created.id}`, { filter: narrower });
      expect(changed.status, changed.text).toBe(200);
      expect(changed.body.filter).toEqual(narrower);
      const cleared = await hooks('PATCH', `/Subscriptions/${created.id}`, { filter: null });
      expect(cleared.body.filter).toBeNull();
      expect((await create(subscriptionBody())).body.filter).toBeNull();
    });

    it('answers 400 naming the place of each mistake, and a path no subscribed type has; nothing changed', async () => {
      expectProblem(
        await hooks('POST', '/Subscriptions', subscriptionBody({ filter: { 'payload.totalAmount': { $gtee: 1 } } })),
        400,
        'filter/payload.totalAmount/$gtee',
      );
      expectProblem(
        await hooks('POST', '/Subscriptions', subscriptionBody({ filter: { $or: [{ 'payload.totalAmont': '1' }] } })),
        400,
        'filter/$or/0/payload.totalAmont',
        /none of the subscribed event types/,
      );
      expectProblem(await hooks('POST', '/Subscriptions', subscriptionBody({ filter: ['not', 'an object'] })), 400);
      const created = (await create(subscriptionBody({ filter }))).body;
      const refused = await hooks('PATCH', `/Subscriptions/${created.id}`, { filter: { 'payload.nope': 1 } });
      expectProblem(refused, 400, 'filter/payload.nope');
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body.filter).toEqual(filter);
    });
  });

  describe('ordering', () => {
    it("is 'none' by default, 'entity' when set at creation (stored, in GET and the list), switched by PATCH", async () => {
      expect((await create(subscriptionBody())).body.ordering).toBe('none');
      const created = (await create(subscriptionBody({ ordering: 'entity' }))).body;
      expect(created.ordering).toBe('entity');
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body.ordering).toBe('entity');
      expect((await list()).body.items.find((item) => item.id === created.id)?.ordering).toBe('entity');
      expect((await api.gateway.subscriptions.get(tenant, created.id))?.ordering).toBe('entity');

      // A PATCH without the field keeps it.
      const other = await hooks('PATCH', `/Subscriptions/${created.id}`, { description: 'kept ordering' });
      expect(other.body.ordering).toBe('entity');
      const unordered = await hooks('PATCH', `/Subscriptions/${created.id}`, { ordering: 'none' });
      expect(unordered.status, unordered.text).toBe(200);
      expect(unordered.body.ordering).toBe('none');
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body.ordering).toBe('none');
      const ordered = await hooks('PATCH', `/Subscriptions/${created.id}`, { ordering: 'entity' });
      expect(ordered.status, ordered.text).toBe(200);
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body.ordering).toBe('entity');
    });

    it("must be 'none' or 'entity': otherwise 400 naming ordering, nothing created or changed", async () => {
      const marker = uniqueTenant('fifo');
      const body = subscriptionBody({ ordering: 'fifo', description: marker });
      expectProblem(await hooks('POST', '/Subscriptions', body), 400, 'ordering');
      expect((await list()).body.items.filter((item) => item.description === marker)).toHaveLength(0);
      const created = (await create(subscriptionBody({ ordering: 'entity' }))).body;
      for (const value of ['fifo', 'ENTITY', true, null]) {
        const answer = await hooks('PATCH', `/Subscriptions/${created.id}`, { ordering: value });
        expectProblem(answer, 400, 'ordering');
      }
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body).toEqual(created);
    });
  });

  describe('maxDeliveriesPerSecond', () => {
    it('is set at creation, changed and cleared (null) by PATCH, and shown by GET and the list', async () => {
      const created = (await create(subscriptionBody({ maxDeliveriesPerSecond: 5 }))).body;
      expect(created.maxDeliveriesPerSecond).toBe(5);
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body.maxDeliveriesPerSecond).toBe(5);

      const raised = await hooks('PATCH', `/Subscriptions/${created.id}`, { maxDeliveriesPerSecond: 10_000 });
      expect(raised.status, raised.text).toBe(200);
      expect(raised.body.maxDeliveriesPerSecond).toBe(10_000);
      // A PATCH without the field keeps it.
      const other = await hooks('PATCH', `/Subscriptions/${created.id}`, { description: 'kept limit' });
      expect(other.body.maxDeliveriesPerSecond).toBe(10_000);

      const cleared = await hooks('PATCH', `/Subscriptions/${created.id}`, { maxDeliveriesPerSecond: null });
      expect(cleared.status, cleared.text).toBe(200);
      expect(cleared.body.maxDeliveriesPerSecond).toBeNull();
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body.maxDeliveriesPerSecond).toBeNull();
      const listed = (await list()).body.items.find((item) => item.id === created.id);
      expect(listed?.maxDeliveriesPerSecond).toBeNull();

      const unlimited = (await create(subscriptionBody({ maxDeliveriesPerSecond: null }))).body;
      expect(unlimited.maxDeliveriesPerSecond).toBeNull();
    });

    it('must be an integer from 1 to 10,000 or null: otherwise 400 naming the field, nothing changed', async () => {
      for (const value of [0, -1, 10_001, 2.5, '5', true, {}]) {
        expectProblem(await hooks('POST', '/Subscriptions', subscriptionBody({ maxDeliveriesPerSecond: value })), 400);
      }
      const created = (await create(subscriptionBody({ maxDeliveriesPerSecond: 7 }))).body;
      for (const value of [0, 10_001, 1.5, 'unlimited']) {
        const answer = await hooks('PATCH', `/Subscriptions/${created.id}`, { maxDeliveriesPerSecond: value });
        const problem = expectProblem(answer, 400);
        expect(JSON.stringify(problem)).toMatch(/maxDeliveriesPerSecond/);
      }
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body.maxDeliveriesPerSecond).toBe(7);
    });
  });

  describe('Hmac secret', () => {
    it('is generated (32 random bytes, base64) and returned only at creation, never by GET or the list', async () => {
      const first = (await create(subscriptionBody({ authenticationMode: 'Hmac' }))).body;
      const second = (await create(subscriptionBody({ authenticationMode: 'Hmac' }))).body;
      for (const created of [first, second]) {
        expect(created.hmacSecret).toMatch(/^[A-Za-z0-9+/]{43}=$/);
        expect(Buffer.from(created.hmacSecret!, 'base64')).toHaveLength(32);
        expect(Object.keys(created).sort()).toEqual([...VIEW_KEYS, 'hmacSecret'].sort());
      }
      expect(first.hmacSecret).not.toBe(second.hmacSecret);
      expect((await api.gateway.subscriptions.get(tenant, first.id))?.secrets.hmacSecret).toBe(first.hmacSecret);

      const fetched = await hooks('GET', `/Subscriptions/${first.id}`);
      expect(fetched.body).not.toHaveProperty('hmacSecret');
      expect(fetched.text).not.toContain(first.hmacSecret);
      const { hmacSecret: _secret, ...rest } = first;
      expect(fetched.body).toEqual(rest);
      const listed = await list();
      expect(listed.text).not.toContain(first.hmacSecret);
      expect(listed.text).not.toContain(second.hmacSecret);
      for (const item of listed.body.items) expect(item).not.toHaveProperty('hmacSecret');
      const patched = await hooks('PATCH', `/Subscriptions/${first.id}`, { description: 'no secret here' });
      expect(patched.status).toBe(200);
      expect(patched.body).not.toHaveProperty('hmacSecret');
    });

    it('takes a supplied secret and a custom signature header name', async () => {
      const secret = 'my-own-shared-secret-of-some-length';
      const created = (
        await create(subscriptionBody({ authenticationMode: 'Hmac', hmacSecret: secret, signatureHeaderName: 'X-Sig' }))
      ).body;
      expect(created.signatureHeaderName).toBe('X-Sig');
      expect((await api.gateway.subscriptions.get(tenant, created.id))?.secrets.hmacSecret).toBe(secret);
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).text).not.toContain(secret);
    });

    it('is rotated: 200 {hmacSecret} with a new generated secret, stored, and still never returned by GET', async () => {
      const created = (await create(subscriptionBody({ authenticationMode: 'Hmac' }))).body;
      const rotated = await rotate(created.id);
      expect(rotated.status, rotated.text).toBe(200);
      expect(Object.keys(rotated.body)).toEqual(['hmacSecret']);
      expect(rotated.body.hmacSecret).toMatch(/^[A-Za-z0-9+/]{43}=$/);
      expect(Buffer.from(rotated.body.hmacSecret, 'base64')).toHaveLength(32);
      expect(rotated.body.hmacSecret).not.toBe(created.hmacSecret);
      expect((await api.gateway.subscriptions.get(tenant, created.id))?.secrets.hmacSecret).toBe(
        rotated.body.hmacSecret,
      );
      const fetched = await hooks('GET', `/Subscriptions/${created.id}`);
      expect(fetched.text).not.toContain(rotated.body.hmacSecret);
      expect(fetched.body).not.toHaveProperty('hmacSecret');
    });

    it('cannot be rotated on a subscription that does not use Hmac (409)', async () => {
      const created = (await create(subscriptionBody())).body;
      expectProblem(await hooks('POST', `/Subscriptions/${created.id}/secret/rotate`), 409);
      expect((await api.gateway.subscriptions.get(tenant, created.id))?.secrets.hmacSecret).toBeUndefined();
    });

    it('is generated and returned once when PATCH switches a subscription to Hmac without supplying one', async () => {
      const created = (await create(subscriptionBody())).body;
      const patched = await hooks('PATCH', `/Subscriptions/${created.id}`, { authenticationMode: 'Hmac' });
      expect(patched.status, patched.text).toBe(200);
      expect(patched.body.authenticationMode).toBe('Hmac');
      expect(patched.body.hmacSecret).toMatch(/^[A-Za-z0-9+/]{43}=$/);
      expect((await api.gateway.subscriptions.get(tenant, created.id))?.secrets.hmacSecret).toBe(
        patched.body.hmacSecret,
      );
      // A later PATCH keeps the secret and does not return it.
      const again = await hooks('PATCH', `/Subscriptions/${created.id}`, { description: 'later' });
      expect(again.body).not.toHaveProperty('hmacSecret');
      expect((await api.gateway.subscriptions.get(tenant, created.id))?.secrets.hmacSecret).toBe(
        patched.body.hmacSecret,
      );
    });
  });

  describe('StandardWebhooks secret', () => {
    const WHSEC = /^whsec_[A-Za-z0-9+/]{43}=$/;

    it('is generated as whsec_ and 32 random bytes, returned only at creation; a supplied one must be whsec_', async () => {
      const created = (await create(subscriptionBody({ authenticationMode: 'StandardWebhooks' }))).body;
      expect(created.authenticationMode).toBe('StandardWebhooks');
      expect(created.hmacSecret).toMatch(WHSEC);
      expect(Buffer.from(created.hmacSecret!.slice(6), 'base64')).toHaveLength(32);
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).text).not.toContain(created.hmacSecret);

      const own = `whsec_${Buffer.alloc(24, 9).toString('base64')}`;
      const supplied = (await create(subscriptionBody({ authenticationMode: 'StandardWebhooks', hmacSecret: own })))
        .body;
      expect((await api.gateway.subscriptions.get(tenant, supplied.id))?.secrets.hmacSecret).toBe(own);

      const refused = await hooks(
        'POST',
        '/Subscriptions',
        subscriptionBody({ authenticationMode: 'StandardWebhooks', hmacSecret: 'a-plain-secret-of-some-length' }),
      );
      expectProblem(refused, 400);
      expect(refused.text).toContain('hmacSecret');
      expect(refused.text).toContain('must start with whsec_');
    });

    it('is generated when PATCH switches an Hmac subscription to StandardWebhooks (its secret is no whsec_ one)', async () => {
      const created = (await create(subscriptionBody({ authenticationMode: 'Hmac' }))).body;
      const patched = await hooks('PATCH', `/Subscriptions/${created.id}`, { authenticationMode: 'StandardWebhooks' });
      expect(patched.status, patched.text).toBe(200);
      expect(patched.body.hmacSecret).toMatch(WHSEC);
      expect((await api.gateway.subscriptions.get(tenant, created.id))?.secrets.hmacSecret).toBe(
        patched.body.hmacSecret,
      );
      // A plain secret for it later, without the mode in the request: a conflict with its stored mode, nothing changed.
      const conflicting = await hooks('PATCH', `/Subscriptions/${created.id}`, {
        hmacSecret: 'plain-secret-0123456789',
      });
      expectProblem(conflicting, 409);
      expect(conflicting.text).toContain('must start with whsec_');
      expect((await api.gateway.subscriptions.get(tenant, created.id))?.secrets.hmacSecret).toBe(
        patched.body.hmacSecret,
      );
    });

    it('is rotated to a new whsec_ secret, the previous one kept to sign beside it for 24 hours', async () => {
      const created = (await create(subscriptionBody({ authenticationMode: 'StandardWebhooks' }))).body;
      const before = Date.now();
      const rotated = await rotate(created.id);
      expect(rotated.status, rotated.text).toBe(200);
      expect(rotated.body.hmacSecret).toMatch(WHSEC);
      const { secrets } = (await api.gateway.subscriptions.get(tenant, created.id))!;
      expect(secrets).toMatchObject({ hmacSecret: rotated.body.hmacSecret, previousHmacSecret: created.hmacSecret });
      expect(secrets.previousHmacSecretUntil).toBeGreaterThanOrEqual(before + 24 * 3_600_000);
      expect(secrets.previousHmacSecretUntil).toBeLessThanOrEqual(Date.now() + 24 * 3_600_000);
      const fetched = await hooks('GET', `/Subscriptions/${created.id}`);
      expect(fetched.text).not.toContain(rotated.body.hmacSecret);
      expect(fetched.text).not.toContain(created.hmacSecret);
    });
  });

  describe('ApiKey and OAuth2 settings', () => {
    it('never return the API key value or the OAuth2 client secret', async () => {
      const apiKeyValue = `api-key-${uniqueTenant('value')}`;
      const clientSecret = `client-secret-${uniqueTenant('value')}`;
      const withKey = await create(
        subscriptionBody({ authenticationMode: 'ApiKey', apiKey: { headerName: 'X-Api-Key', value: apiKeyValue } }),
      );
      expect(withKey.body.apiKey).toEqual({ headerName: 'X-Api-Key' });
      expect(withKey.body).not.toHaveProperty('hmacSecret');
      const withOAuth = await create(
        subscriptionBody({
          authenticationMode: 'OAuth2',
          oauth2: {
            tokenUrl: 'https://93.184.216.34/oauth/token',
            clientId: 'receiver-client',
            clientSecret,
            audience: 'receiver',
            scope: 'hooks:write',
          },
        }),
      );
      expect(withOAuth.body.oauth2).toEqual({
        tokenUrl: 'https://93.184.216.34/oauth/token',
        clientId: 'receiver-client',
        audience: 'receiver',
        scope: 'hooks:write',
      });

      const answers: Answer<unknown>[] = [
        withKey,
        withOAuth,
        await hooks('GET', `/Subscriptions/${withKey.body.id}`),
        await hooks('GET', `/Subscriptions/${withOAuth.body.id}`),
        await list(),
        await hooks('PATCH', `/Subscriptions/${withKey.body.id}`, { description: 'x' }),
        await hooks('PATCH', `/Subscriptions/${withOAuth.body.id}`, { description: 'x' }),
        await hooks('PATCH', `/Subscriptions/${withOAuth.body.id}/status`, { status: 'disabled' }),
      ];
      for (const answer of answers) {
        expect(answer.status).toBeLessThan(300);
        expect(answer.text).not.toContain(apiKeyValue);
        expect(answer.text).not.toContain(clientSecret);
      }
      const stored = await api.gateway.subscriptions.get(tenant, withKey.body.id);
      expect(stored?.secrets.apiKey).toBe(apiKeyValue);
      expect((await api.gateway.subscriptions.get(tenant, withOAuth.body.id))?.secrets.oauth2ClientSecret).toBe(
        clientSecret,
      );
    });
  });

  describe('secrets at rest', () => {
    /** Every way a secret could sit in a column: as text, its UTF-8/base64/hex forms, or its decoded bytes. */
    function secretForms(secret: string): Buffer[] {
      const forms = [Buffer.from(secret, 'utf8'), Buffer.from(Buffer.from(secret).toString('base64'), 'utf8')];
      forms.push(Buffer.from(Buffer.from(secret).toString('hex'), 'utf8'));
      const decoded = Buffer.from(secret, 'base64');
      // A generated Hmac secret is base64 of 32 random bytes: the raw key must not be stored either.
      if (decoded.toString('base64') === secret && decoded.length >= 16) forms.push(decoded);
      return forms;
    }

    function expectNowhere(row: types.Row, secrets: string[]) {
      for (const column of row.keys()) {
        const value: unknown = row.get(column);
        const bytes = Buffer.isBuffer(value)
          ? value
          : Buffer.from(value === null || value === undefined ? '' : JSON.stringify(value) + String(value), 'utf8');
        const texts = Buffer.isBuffer(value)
          ? [value.toString('utf8'), value.toString('latin1'), value.toString('base64'), value.toString('hex')]
          : [String(value), JSON.stringify(value) ?? ''];
        for (const secret of secrets) {
          for (const form of secretForms(secret)) expect(bytes.indexOf(form), `${column} holds a secret`).toBe(-1);
          for (const text of texts) expect(text.includes(secret), `${column} holds a secret`).toBe(false);
        }
      }
    }

    it('stores the hmac secret, API key and OAuth2 client secret only sealed (AES-GCM), in no column in clear', async () => {
      const apiKeyValue = `sk_live_${uniqueTenant('k')}`;
      const clientSecret = `oauth-${uniqueTenant('cs')}`;
      const suppliedHmac = `supplied-hmac-${uniqueTenant('h')}`;
      const hmac = (await create(subscriptionBody({ authenticationMode: 'Hmac' }))).body;
      const supplied = (await create(subscriptionBody({ authenticationMode: 'Hmac', hmacSecret: suppliedHmac }))).body;
      const apiKey = (
        await create(
          subscriptionBody({ authenticationMode: 'ApiKey', apiKey: { headerName: 'X-Key', value: apiKeyValue } }),
        )
      ).body;
      const oauth = (
        await create(
          subscriptionBody({
            authenticationMode: 'OAuth2',
            oauth2: { tokenUrl: 'https://93.184.216.34/token', clientId: 'c', clientSecret },
          }),
        )
      ).body;
      const secrets = [hmac.hmacSecret!, suppliedHmac, apiKeyValue, clientSecret];

      const db = api.gateway.platform.db;
      for (const id of [hmac.id, supplied.id, apiKey.id, oauth.id]) {
        const row = (
          await db.execute('SELECT * FROM subscriptions WHERE tenant_id = ? AND id = ?', [tenant, id])
        ).first();
        expect(row).toBeTruthy();
        expect(Buffer.isBuffer(row.get('secrets'))).toBe(true);
        expect((row.get('secrets') as Buffer).length).toBeGreaterThan(28); // IV + tag + ciphertext
        expect(row.get('secrets_key_id')).toBe('k1');
        expectNowhere(row, secrets);
      }
      // The sealed blobs do hold them: the store opens each one with the configured key.
      expect((await api.gateway.subscriptions.get(tenant, hmac.id))?.secrets.hmacSecret).toBe(hmac.hmacSecret);
      expect((await api.gateway.subscriptions.get(tenant, supplied.id))?.secrets.hmacSecret).toBe(suppliedHmac);
      expect((await api.gateway.subscriptions.get(tenant, apiKey.id))?.secrets.apiKey).toBe(apiKeyValue);
      expect((await api.gateway.subscriptions.get(tenant, oauth.id))?.secrets.oauth2ClientSecret).toBe(clientSecret);

      // After a rotation the new secret is sealed too.
      const rotated = await rotate(hmac.id);
      const row = (
        await db.execute('SELECT * FROM subscriptions WHERE tenant_id = ? AND id = ?', [tenant, hmac.id])
      ).first();
      expectNowhere(row, [rotated.body.hmacSecret, hmac.hmacSecret!]);
    });
  });

  describe('Idempotency-Key', () => {
    it('answers the same subscription for the same key and body, creating one', async () => {
      const key = uniqueTenant('idem');
      const body = subscriptionBody({ description: key });
      const first = await create(body, { 'idempotency-key': key });
      const second = await create(body, { 'idempotency-key': key });
      expect(second.body).toEqual(first.body);
      expect(second.headers.get('location')).toBe(first.headers.get('location'));
      expect((await list()).body.items.filter((item) => item.description === key)).toHaveLength(1);
    });

    it('answers 409 for the same key with a different body, creating nothing', async () => {
      const key = uniqueTenant('idem');
      await create(subscriptionBody({ description: key }), { 'idempotency-key': key });
      const conflict = await hooks('POST', '/Subscriptions', subscriptionBody({ description: `${key}-changed` }), {
        'idempotency-key': key,
      });
      expectProblem(conflict, 409);
      const items = (await list()).body.items;
      expect(items.filter((item) => item.description === `${key}-changed`)).toHaveLength(0);
      expect(items.filter((item) => item.description === key)).toHaveLength(1);
    });

    it('creates one subscription when the same request is sent concurrently', async () => {
      const key = uniqueTenant('idem');
      const body = subscriptionBody({ description: key });
      const answers = await Promise.all(
        Array.from({ length: 6 }, () => hooks('POST', '/Subscriptions', body, { 'idempotency-key': key })),
      );
      const items = (await list()).body.items.filter((item) => item.description === key);
      expect(items).toHaveLength(1);
      // Each answer is the one subscription, or a 409 telling the client the first request is still in progress.
      for (const answer of answers) {
        if (answer.status === 201) expect(answer.body.id).toBe(items[0]!.id);
        else expectProblem(answer, 409);
      }
      expect(answers.some((answer) => answer.status === 201)).toBe(true);
      // Once the first request finished, a retry gets the subscription.
      expect((await create(body, { 'idempotency-key': key })).body.id).toBe(items[0]!.id);
    });

    it('is not held by a refused request: the corrected request with the same key creates the subscription', async () => {
      const key = uniqueTenant('idem');
      const refused = await hooks('POST', '/Subscriptions', subscriptionBody({ eventTypes: ['nope.*'] }), {
        'idempotency-key': key,
      });
      expectProblem(refused, 400, 'eventTypes.0');
      const created = await create(subscriptionBody({ description: key }), { 'idempotency-key': key });
      expect((await create(subscriptionBody({ description: key }), { 'idempotency-key': key })).body.id).toBe(
        created.body.id,
      );
    });

    it('is scoped to the tenant: another tenant using the same key gets its own subscription', async () => {
      const key = uniqueTenant('idem');
      const body = subscriptionBody({ description: key });
      const mine = await create(body, { 'idempotency-key': key });
      const theirs = await hooks('POST', '/Subscriptions', body, { 'idempotency-key': key }, otherToken);
      expect(theirs.status).toBe(201);
      expect(theirs.body.id).not.toBe(mine.body.id);
    });

    it('returns the Hmac secret again on an idempotent replay of the creation', async () => {
      const key = uniqueTenant('idem');
      const body = subscriptionBody({ authenticationMode: 'Hmac', description: key });
      const first = await create(body, { 'idempotency-key': key });
      const replay = await create(body, { 'idempotency-key': key });
      expect(replay.body.hmacSecret).toBe(first.body.hmacSecret);
      expect(replay.body.id).toBe(first.body.id);
    });
  });

  describe('status', () => {
    it('disables, then re-enabling resets failureDays to 0', async () => {
      const created = (await create(subscriptionBody())).body;
      const store = api.gateway.subscriptions;
      for (const window of [1_000, 2_000, 3_000]) await store.recordFailureDay(tenant, created.id, window, 10);
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body).toMatchObject({
        status: 'enabled',
        failureDays: 3,
      });

      const disabled = await hooks('PATCH', `/Subscriptions/${created.id}/status`, { status: 'disabled' });
      expect(disabled.status, disabled.text).toBe(200);
      expect(disabled.body).toMatchObject({ id: created.id, status: 'disabled', failureDays: 3 });
      expect(Object.keys(disabled.body).sort()).toEqual(VIEW_KEYS);
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body.status).toBe('disabled');

      const enabled = await hooks('PATCH', `/Subscriptions/${created.id}/status`, { status: 'enabled' });
      expect(enabled.status).toBe(200);
      expect(enabled.body).toMatchObject({ status: 'enabled', failureDays: 0 });
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body).toMatchObject({
        status: 'enabled',
        failureDays: 0,
      });
      // The window bookkeeping was reset too: the next failure day counts from one again.
      expect(await store.recordFailureDay(tenant, created.id, 3_000, 10)).toEqual({
        failureDays: 1,
        disabled: false,
        disabledNow: false,
      });
    });

    it('re-enables a subscription auto-disabled after the failure days', async () => {
      const created = (await create(subscriptionBody())).body;
      const store = api.gateway.subscriptions;
      for (const window of [1, 2]) await store.recordFailureDay(tenant, created.id, window, 2);
      expect((await hooks('GET', `/Subscriptions/${created.id}`)).body).toMatchObject({
        status: 'disabled',
        failureDays: 2,
      });
      const enabled = await hooks('PATCH', `/Subscriptions/${created.id}/status`, { status: 'enabled' });
      expect(enabled.body).toMatchObject({ status: 'enabled', failureDays: 0 });
    });
  });
});
