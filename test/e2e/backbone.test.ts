// One purchase-order event end to end on the real path: purchase API → outbox → Kafka (Avro via the registry) →
// router → deliveries topic → dispatcher → a real HTTP receiver, recorded as acknowledged in Cassandra.
import { createHmac } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, startIdentityProvider, startReceiver, startServices, testEnv, waitFor } from '../support/harness.ts';

type Idp = Awaited<ReturnType<typeof startIdentityProvider>>;
type Receiver = Awaited<ReturnType<typeof startReceiver>>;

describe('backbone: one event from validation to the subscriber', () => {
  let idp: Idp;
  let receiver: Receiver;
  let stack: Awaited<ReturnType<typeof startServices>>;
  let base: string;
  let token: string;
  let gatewayMetrics: number;

  beforeAll(async () => {
    const env = { ...testEnv() };
    idp = await startIdentityProvider(env);
    receiver = await startReceiver();
    base = `http://127.0.0.1:${await freePort()}`;
    Object.assign(env, {
      AUTH_URL: idp.url,
      GATEWAY_BASE_URL: base,
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    });
    gatewayMetrics = await freePort();
    stack = await startServices(env, ['gateway', 'router', 'dispatcher'], {
      gateway: { METRICS_PORT: String(gatewayMetrics) },
    });
    token = await idp.token(await idp.client('tenant-e2e'));
  });

  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
    await idp?.close();
  });

  const call = async (method: string, path: string, body?: unknown, bearer = token) => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${bearer}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, text: await response.text(), headers: response.headers };
  };

  it('delivers purchaseOrder.validated with the spec headers, field order, signature and the GET body as payload', async () => {
    // The catalogue reaches the webhook API through Kafka: creation succeeds once the purchase service declared it.
    const subscription = await waitFor(async () => {
      const created = await call('POST', '/CoreWebhook/REST/Webhooks/Subscriptions', {
        url: receiver.url,
        eventTypes: ['purchaseOrder.*'],
        authenticationMode: 'Hmac',
      });
      return created.status === 201 ? (JSON.parse(created.text) as { id: string; hmacSecret: string }) : undefined;
    }, 'the subscription to be accepted');
    expect(subscription.hmacSecret).toMatch(/^[A-Za-z0-9+/]{43}=$/);

    const item = await call('POST', '/CorePurchase/REST/Items', {
      code: 'BOLT-1',
      name: 'Bolt ½" “inox”',
      unitPrice: '0.125',
    });
    expect(item.status).toBe(201);
    const itemId = (JSON.parse(item.text) as { id: string }).id;
    const order = await call('POST', '/CorePurchase/REST/PurchaseOrders', {
      supplierName: 'Acme',
      currency: 'EUR',
      rows: [{ itemId, quantity: '3', description: 'emoji 🚀 and "quotes" \\ backslash' }],
    });
    expect(order.status).toBe(201);
    const orderId = (JSON.parse(order.text) as { id: string }).id;

    // Wait one router cache period so the new subscription is visible to the router (DESIGN §10).
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const validated = await call('POST', `/CorePurchase/REST/PurchaseOrders/${orderId}/validate`);
    expect(validated.status).toBe(200);
    const get = await call('GET', `/CorePurchase/REST/PurchaseOrders/${orderId}`);
    expect(get.text).toBe(validated.text);
    expect(JSON.parse(get.text)).toMatchObject({
      status: 'Validated',
      totalAmount: '0.375',
      reference: expect.stringMatching(/^PO-\d{6}$/),
    });

    const delivery = await waitFor(() => receiver.received[0], 'the receiver to be called', 60_000);
    const headers = delivery.headers;
    expect(headers['content-type']).toBe('application/json');
    expect(headers['x-webhook-event-type']).toBe('purchaseOrder.validated');
    expect(headers['x-webhook-subscription-id']).toBe(subscription.id);
    expect(headers['x-webhook-attempt']).toBe('1');
    expect(headers['x-webhook-event-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(headers['x-webhook-delivery-id']).toMatch(/^[0-9a-f-]{36}$/);
    const expectedSignature = createHmac('sha256', subscription.hmacSecret).update(delivery.body).digest('base64');
    expect(headers['x-webhook-signature']).toBe(expectedSignature);

    const text = delivery.body.toString('utf8');
    const envelope = JSON.parse(text) as Record<string, unknown>;
    expect(Object.keys(envelope)).toEqual([
      'eventId',
      'eventType',
      'occurredAt',
      'entityId',
      'reference',
      'resourceUrl',
      'subscriptionId',
      'payload',
      'payloadOmitted',
    ]);
    expect(envelope).toMatchObject({
      eventId: headers['x-webhook-event-id'],
      eventType: 'purchaseOrder.validated',
      entityId: orderId,
      reference: JSON.parse(get.text).reference,
      resourceUrl: `/CorePurchase/REST/PurchaseOrders/${orderId}`,
      subscriptionId: subscription.id,
      payloadOmitted: false,
    });
    // Byte for byte: the payload is the GET body exactly as served at that moment.
    expect(text).toContain(`"payload":${get.text},"payloadOmitted":false}`);

    const deliveryId = String(headers['x-webhook-delivery-id']);
    const recorded = await waitFor(async () => {
      const answer = await call('GET', `/CoreWebhook/REST/Webhooks/Deliveries/${deliveryId}`);
      const body =
        answer.status === 200 ? (JSON.parse(answer.text) as { status: string; attempts: unknown[] }) : undefined;
      return body?.status === 'acknowledged' ? body : undefined;
    }, 'the delivery to be recorded as acknowledged');
    expect(recorded).toMatchObject({
      id: deliveryId,
      eventId: headers['x-webhook-event-id'],
      subscriptionId: subscription.id,
      attemptCount: 1,
      lastStatusCode: 204,
      attempts: [{ attempt: 1, statusCode: 204, errorMessage: null }],
    });
  });

  it("serves the gateway's request durations and the purchase service's stages on METRICS_PORT, not on the API's port", async () => {
    const item = await call('POST', '/CorePurchase/REST/Items', { code: 'NUT-1', name: 'Nut', unitPrice: '0.5' });
    const itemId = (JSON.parse(item.text) as { id: string }).id;
    const order = await call('POST', '/CorePurchase/REST/PurchaseOrders', {
      supplierName: 'Acme',
      currency: 'EUR',
      rows: [{ itemId, quantity: '1' }],
    });
    const orderId = (JSON.parse(order.text) as { id: string }).id;
    expect((await call('POST', `/CorePurchase/REST/PurchaseOrders/${orderId}/validate`)).status).toBe(200);
    expect((await call('POST', `/CorePurchase/REST/PurchaseOrders/${orderId}/validate`)).status).toBe(409);

    const scrape = () => fetch(`http://127.0.0.1:${gatewayMetrics}/metrics`).then((response) => response.text());
    // The event's way to the topic is recorded once Kafka acknowledged it, a moment after the answer.
    const text = await waitFor(async () => {
      const current = await scrape();
      return /webhook_stage_seconds_count\{[^}]*stage="commit_to_topic"[^}]*\} [1-9]/.test(current)
        ? current
        : undefined;
    }, 'the published event in the gateway metrics');
    // A series' value by its name and some of its labels (in any order: prom-client puts the default label anywhere).
    const value = (name: string, labels: Record<string, string>) =>
      text
        .split('\n')
        .filter((line) => line.startsWith(`${name}{`))
        .filter((line) => Object.entries(labels).every(([key, wanted]) => line.includes(`${key}="${wanted}"`)))
        .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
    const requests = (route: string, status: string) =>
      value('gateway_request_duration_seconds_count', { method: 'POST', route, status, service: 'gateway' });
    expect(requests('/CorePurchase/REST/PurchaseOrders/:id/validate', '200')).toBeGreaterThanOrEqual(1);
    expect(requests('/CorePurchase/REST/PurchaseOrders/:id/validate', '409')).toBeGreaterThanOrEqual(1);
    expect(requests('/CorePurchase/REST/Items', '201')).toBeGreaterThanOrEqual(1);
    const stages = [
      'transition_read',
      'transition_reference',
      'transition_commit',
      'commit_to_publish',
      'outbox_publish',
    ];
    for (const stage of stages) {
      expect(value('webhook_stage_seconds_count', { stage, service: 'gateway' }), stage).toBeGreaterThanOrEqual(1);
    }
    expect(value('purchase_events_published_total', { path: 'nudge' })).toBeGreaterThanOrEqual(1);
    // No id in any label: the route's template only.
    expect(text).not.toContain(orderId);
    expect(await (await fetch(`http://127.0.0.1:${gatewayMetrics}/ready`)).json()).toEqual({ status: 'ready' });
    expect((await fetch(`${base}/metrics`)).status).toBe(404);
  });

  it('refuses requests without a token (401) and from a client not registered on the API (403)', async () => {
    const anonymous = await fetch(`${base}/CoreWebhook/REST/Webhooks/Subscriptions`);
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect(anonymous.headers.get('content-type')).toContain('application/problem+json');

    const purchaseOnly = await idp.token(await idp.client('tenant-e2e', ['purchase']));
    expect((await call('GET', '/CoreWebhook/REST/Webhooks/Subscriptions', undefined, purchaseOnly)).status).toBe(403);
    expect((await call('GET', '/CorePurchase/REST/Items', undefined, purchaseOnly)).status).toBe(200);
  });
});
