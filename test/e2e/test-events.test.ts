// The typed catalogue and test events on the real path: GET /EventTypes with payload schemas and examples (checked
// against payloads the purchase service really sends), and POST /Subscriptions/{id}/test through router, dispatcher
// and history to a real receiver.
import { createHmac } from 'node:crypto';
import { Ajv2020 } from 'ajv/dist/2020.js';
import formats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, startIdentityProvider, startReceiver, startServices, testEnv, waitFor } from '../support/harness.ts';

type Idp = Awaited<ReturnType<typeof startIdentityProvider>>;
type Receiver = Awaited<ReturnType<typeof startReceiver>>;
interface EventType {
  eventType: string;
  service: string;
  description: string;
  payloadSchema: Record<string, unknown> | null;
  example: unknown;
}
interface Envelope {
  eventId: string;
  eventType: string;
  entityId: string;
  reference: string | null;
  subscriptionId: string;
  payload: unknown;
  payloadOmitted: boolean;
}

const WEBHOOKS = '/CoreWebhook/REST/Webhooks';
// ajv-formats is CommonJS: its plugin is the default export's `default`.
const addFormats = formats.default;
/** A JSON Schema 2020-12 validator that checks formats (date-time) too. */
const strictAjv = () => addFormats(new Ajv2020({ strict: false, allErrors: true }));

describe('typed catalogue and test events', () => {
  let idp: Idp;
  let receiver: Receiver;
  let other: Receiver;
  let stack: Awaited<ReturnType<typeof startServices>>;
  let base: string;
  let token: string;
  let outsider: string;

  beforeAll(async () => {
    const env = { ...testEnv() };
    idp = await startIdentityProvider(env);
    receiver = await startReceiver();
    other = await startReceiver();
    base = `http://127.0.0.1:${await freePort()}`;
    Object.assign(env, {
      AUTH_URL: idp.url,
      GATEWAY_BASE_URL: base,
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    });
    stack = await startServices(env, ['gateway', 'router', 'dispatcher']);
    token = await idp.token(await idp.client('tenant-test-events'));
    outsider = await idp.token(await idp.client('tenant-test-events-outsider'));
  });

  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
    await other?.close();
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
    const text = await response.text();
    return { status: response.status, text, headers: response.headers, json: <T>() => JSON.parse(text) as T };
  };
  const subscribe = (url: string, eventTypes: string[]) =>
    waitFor(async () => {
      const created = await call('POST', `${WEBHOOKS}/Subscriptions`, { url, eventTypes, authenticationMode: 'Hmac' });
      return created.status === 201 ? created.json<{ id: string; hmacSecret: string }>() : undefined;
    }, 'the subscription to be accepted (catalogue loaded)');
  const catalogue = async () =>
    waitFor(async () => {
      const answer = await call('GET', `${WEBHOOKS}/EventTypes`);
      const items = answer.json<{ items: EventType[] }>().items;
      return items.length >= 3 ? items : undefined;
    }, 'the catalogue');

  it('lists every event type with its payload schema and example, and answers one by name', async () => {
    const items = await catalogue();
    const ajv = strictAjv();
    for (const name of ['purchaseOrder.validated', 'purchaseOrder.cancelled', 'purchaseOrder.sent']) {
      const entry = items.find((item) => item.eventType === name);
      expect(entry, name).toMatchObject({ service: 'purchase', description: expect.any(String) });
      expect(entry!.payloadSchema).toMatchObject({ title: 'PurchaseOrder', type: 'object' });
      // The example is valid by its own schema.
      const validate = ajv.compile(entry!.payloadSchema!);
      expect(validate(entry!.example), JSON.stringify(validate.errors)).toBe(true);

      const one = await call('GET', `${WEBHOOKS}/EventTypes/${name}`);
      expect(one.status).toBe(200);
      expect(one.json()).toEqual(entry);
    }
    const unknown = await call('GET', `${WEBHOOKS}/EventTypes/purchaseOrder.teleported`);
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(unknown.json<{ detail: string }>().detail).toMatch(/purchaseOrder\.teleported/);
  });

  it('the payloads the purchase service really sends match the declared schemas', async () => {
    const items = await catalogue();
    const subscription = await subscribe(receiver.url, ['purchaseOrder.*']);
    await new Promise((resolve) => setTimeout(resolve, 1_100)); // one router cache period (DESIGN §10)
    const item = await call('POST', '/CorePurchase/REST/Items', { code: 'PEN-1', name: 'Pen', unitPrice: '1.25' });
    const itemId = item.json<{ id: string }>().id;
    const orders = [];
    for (const rows of [
      [{ itemId, quantity: '3', description: 'blue' }],
      [
        { itemId, quantity: '0.5', description: null },
        { itemId, quantity: '12' },
      ],
    ]) {
      const order = await call('POST', '/CorePurchase/REST/PurchaseOrders', {
        supplierName: 'Acme',
        currency: 'EUR',
        rows,
      });
      expect(order.status, order.text).toBe(201);
      orders.push(order.json<{ id: string }>().id);
    }
    for (const id of orders)
      expect((await call('POST', `/CorePurchase/REST/PurchaseOrders/${id}/validate`)).status).toBe(200);
    expect((await call('POST', `/CorePurchase/REST/PurchaseOrders/${orders[0]}/cancel`)).status).toBe(200);

    const received = await waitFor(() => {
      const mine = receiver.received
        .map((request) => JSON.parse(request.body.toString('utf8')) as Envelope)
        .filter((envelope) => envelope.subscriptionId === subscription.id);
      return mine.length >= 3 ? mine : undefined;
    }, 'two validations and a cancellation');
    const ajv = strictAjv();
    expect(received.map((envelope) => envelope.eventType).sort()).toEqual([
      'purchaseOrder.cancelled',
      'purchaseOrder.validated',
      'purchaseOrder.validated',
    ]);
    for (const envelope of received) {
      const schema = items.find((entry) => entry.eventType === envelope.eventType)!.payloadSchema!;
      const validate = ajv.compile(schema);
      expect(validate(envelope.payload), JSON.stringify(validate.errors)).toBe(true);
    }
    // The schema is strict enough to catch a payload that drifts from it.
    const validate = ajv.compile(items[0]!.payloadSchema!);
    expect(validate({ ...(received[0]!.payload as object), totalAmount: 12.5 })).toBe(false);
    expect(validate({ ...(received[0]!.payload as object), surprise: true })).toBe(false);
  });

  it('POST /Subscriptions/{id}/test sends the example through the pipeline, marked as a test, to that subscription only', async () => {
    const items = await catalogue();
    // The tested subscription does not subscribe to the type it is tested with; a sibling that does gets nothing.
    const tested = await subscribe(receiver.url, ['purchaseOrder.sent']);
    const sibling = await subscribe(other.url, ['purchaseOrder.*']);
    await new Promise((resolve) => setTimeout(resolve, 1_100)); // one router cache period (DESIGN §10)

    const sent = await call('POST', `${WEBHOOKS}/Subscriptions/${tested.id}/test`, {
      eventType: 'purchaseOrder.cancelled',
    });
    expect(sent.status, sent.text).toBe(202);
    const answer = sent.json<{ eventId: string; deliveryId: string; eventType: string; subscriptionId: string }>();
    expect(answer).toMatchObject({ eventType: 'purchaseOrder.cancelled', subscriptionId: tested.id });
    expect(sent.headers.get('location')).toBe(`../../Deliveries/${answer.deliveryId}`);

    const request = await waitFor(
      () => receiver.received.find((entry) => entry.headers['x-webhook-event-id'] === answer.eventId),
      'the test delivery',
    );
    expect(request.headers['x-webhook-test']).toBe('true');
    expect(request.headers['x-webhook-delivery-id']).toBe(answer.deliveryId);
    expect(request.headers['x-webhook-event-type']).toBe('purchaseOrder.cancelled');
    expect(request.headers['x-webhook-signature']).toBe(
      createHmac('sha256', tested.hmacSecret).update(request.body).digest('base64'),
    );
    const envelope = JSON.parse(request.body.toString('utf8')) as Envelope;
    const example = items.find((entry) => entry.eventType === 'purchaseOrder.cancelled')!.example as { id: string };
    expect(envelope).toMatchObject({
      eventId: answer.eventId,
      subscriptionId: tested.id,
      entityId: example.id,
      payload: example,
      payloadOmitted: false,
    });

    // In the history, acknowledged and marked as a test.
    const history = await waitFor(async () => {
      const got = await call('GET', `${WEBHOOKS}/Deliveries/${answer.deliveryId}`);
      const delivery =
        got.status === 200 ? got.json<{ status: string; test: boolean; attempts: unknown[] }>() : undefined;
      return delivery?.status === 'acknowledged' ? delivery : undefined;
    }, 'the test delivery acknowledged in the history');
    expect(history).toMatchObject({ test: true, eventId: answer.eventId, subscriptionId: tested.id });
    expect(history.attempts).toHaveLength(1);
    // Real deliveries are not marked.
    const list = await call('GET', `${WEBHOOKS}/Deliveries?subscriptionId=${tested.id}`);
    expect(list.json<{ items: { id: string; test: boolean }[] }>().items).toEqual([
      expect.objectContaining({ id: answer.deliveryId, test: true }),
    ]);

    // The sibling got nothing: a second test to it arrives there, and only that one.
    const second = await call('POST', `${WEBHOOKS}/Subscriptions/${sibling.id}/test`, {
      eventType: 'purchaseOrder.validated',
    });
    expect(second.status).toBe(202);
    const secondId = second.json<{ eventId: string }>().eventId;
    await waitFor(
      () => other.received.find((entry) => entry.headers['x-webhook-event-id'] === secondId),
      'the sibling test delivery',
    );
    expect(other.received.map((entry) => entry.headers['x-webhook-event-id'])).toEqual([secondId]);
    expect(receiver.received.filter((entry) => entry.headers['x-webhook-event-id'] === secondId)).toEqual([]);
  });

  it('refuses what cannot be tested with a problem saying why', async () => {
    const subscription = await subscribe(receiver.url, ['purchaseOrder.*']);
    const unknown = await call('POST', `${WEBHOOKS}/Subscriptions/${subscription.id}/test`, {
      eventType: 'purchaseOrder.teleported',
    });
    expect(unknown.status).toBe(400);
    expect(unknown.text).toMatch(/unknown event type purchaseOrder\.teleported/);
    expect((await call('POST', `${WEBHOOKS}/Subscriptions/${subscription.id}/test`, {})).status).toBe(400);
    // Another tenant cannot test (nor learn of) this subscription.
    const foreign = await call(
      'POST',
      `${WEBHOOKS}/Subscriptions/${subscription.id}/test`,
      { eventType: 'purchaseOrder.validated' },
      outsider,
    );
    expect(foreign.status).toBe(404);
    // A disabled subscription receives nothing, tests included.
    expect(
      (await call('PATCH', `${WEBHOOKS}/Subscriptions/${subscription.id}/status`, { status: 'disabled' })).status,
    ).toBe(200);
    const disabled = await call('POST', `${WEBHOOKS}/Subscriptions/${subscription.id}/test`, {
      eventType: 'purchaseOrder.validated',
    });
    expect(disabled.status).toBe(409);
    expect(disabled.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(disabled.text).toMatch(/disabled/);
  });
});
