import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import type { Catalogue } from '../core/catalogue.ts';
import type { Delivery, StoredEvent } from '../core/deliveries/delivery.ts';
import type { DeliveryRecord } from '../core/deliveries/delivery-record.ts';
import type { DeliveryStore } from '../core/deliveries/delivery-store.ts';
import type { SubscriptionStore } from '../core/subscriptions/subscription-store.ts';
import { blankSubscription } from '../core/subscriptions/subscription.ts';
import { buildGateway } from './gateway.ts';
import type { WebhookRoutesOptions } from './webhook-routes.ts';

// The replay route with its stores faked: what it writes, and in which order with the Kafka send.

const TENANT = 'tenant-a';
const event: StoredEvent = {
  tenantId: TENANT,
  eventId: 'evt-1',
  eventType: 'purchaseOrder.validated',
  occurredAt: '2026-11-23T10:00:00.000Z',
  entityId: 'po-1',
  reference: 'PO-1',
  resourceUrl: '/CorePurchase/REST/PurchaseOrders/po-1',
  payload: Buffer.from('{"id":"po-1"}'),
};
const original: Delivery = {
  tenantId: TENANT,
  id: 'del-1',
  eventId: 'evt-1',
  eventType: 'purchaseOrder.validated',
  subscriptionId: 'sub-1',
  entityId: 'po-1',
  status: 'abandoned',
  attemptCount: 3,
  lastStatusCode: 500,
  lastErrorMessage: 'HTTP 500',
  abandonReason: 'delivery lifetime exceeded',
  nextRetryAt: null,
  queuedAt: new Date('2026-11-23T10:00:01.000Z'),
  occurredAt: event.occurredAt,
  replayOf: null,
  signature: 'c2ln',
};

async function gateway(enqueue: (record: DeliveryRecord) => Promise<void>) {
  const log: string[] = [];
  const deliveries = {
    get: async (_tenantId: string, id: string) => (id === original.id ? original : undefined),
    getEvent: async () => event,
    insertDelivery: async (delivery: Delivery) => {
      log.push(`insert ${delivery.replayOf ?? ''}`);
    },
  } as unknown as DeliveryStore;
  const options = {
    subscriptions: { get: async () => blankSubscription(TENANT, 'sub-1', new Date()) } as unknown as SubscriptionStore,
    deliveries,
    catalogue: { caughtUp: true, names: () => [], list: () => [] } as unknown as Catalogue,
    rules: { allowHttp: true, allowedCidrs: [] },
    historyRetentionMs: 86_400_000,
    dependencyTimeoutMs: 300,
    enqueue: async (record: DeliveryRecord) => {
      log.push('enqueue');
      await enqueue(record);
    },
    idempotency: { claim: async () => undefined, release: async () => undefined },
  } as unknown as WebhookRoutesOptions;
  const app = await buildGateway({
    logger: pino({ level: 'silent' }),
    verifier: { verify: async () => ({ clientId: 'client', tenantId: TENANT, subject: 'client@clients' }) },
    integrators: { registrationOf: async () => ({ tenantId: TENANT, access: 'read-write' }) },
    webhook: options,
    readiness: [],
  });
  const replay = () =>
    app.inject({
      method: 'POST',
      url: '/CoreWebhook/REST/Webhooks/Deliveries/del-1/replay',
      headers: { authorization: 'Bearer token' },
    });
  return { app, log, replay };
}

describe('POST /Deliveries/{id}/replay', () => {
  it('sends the replay to Kafka before it stores its row', async () => {
    const { app, log, replay } = await gateway(async () => undefined);
    const answer = await replay();
    expect(answer.statusCode).toBe(202);
    expect(log).toEqual(['enqueue', 'insert del-1']);
    await app.close();
  });

  it('a failed send leaves no row that nothing would ever send, and answers with a problem', async () => {
    const { app, log, replay } = await gateway(async () => Promise.reject(new Error('broker unavailable')));
    const answer = await replay();
    expect(answer.statusCode).toBeGreaterThanOrEqual(500);
    expect(answer.headers['content-type']).toMatch(/application\/problem\+json/);
    expect(log).toEqual(['enqueue']);
    await app.close();
  });

  it('answers 503 with Retry-After, without hanging, while Kafka does not take the record', async () => {
    const { app, log, replay } = await gateway(() => new Promise<void>(() => undefined));
    const answer = await replay();
    expect(answer.statusCode).toBe(503);
    expect(answer.headers['retry-after']).toBe('2');
    expect(answer.json()).toMatchObject({
      status: 503,
      title: 'Service unavailable',
      detail: expect.stringMatching(/Kafka/),
    });
    expect(log).toEqual(['enqueue']);
    await app.close();
  });
});
