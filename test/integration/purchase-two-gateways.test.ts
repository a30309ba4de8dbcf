// Two gateways, each with its outbox relay, as a platform team deploys them. Each relay's sweep reads, every 100 ms,
// the orders its peer has just committed; it must leave the rows its peer is still publishing to that peer, or most
// events go out twice (and some are delivered twice: see the README's chaos suite section).
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { topicNames } from '../../core/topics.ts';
import { freePort, startIdentityProvider, testEnv, waitFor } from '../support/harness.ts';
import { apiClient, eventsOf, readTopic, startPurchaseGateway, type PublishedEvent } from '../support/purchase.ts';

const ORDERS = '/CorePurchase/REST/PurchaseOrders';
/** Validations, half through each gateway, at VALIDATIONS_PER_SECOND. */
const VALIDATIONS = 200;
const VALIDATIONS_PER_SECOND = 40;

describe('two gateways with their relays', () => {
  let idp: Awaited<ReturnType<typeof startIdentityProvider>>;
  const gateways: Awaited<ReturnType<typeof startPurchaseGateway>>[] = [];
  let events: Awaited<ReturnType<typeof readTopic<PublishedEvent>>>;
  let bases: string[];

  beforeAll(async () => {
    const env = { ...testEnv() };
    idp = await startIdentityProvider(env);
    env.AUTH_URL = idp.url;
    bases = [`http://127.0.0.1:${await freePort()}`, `http://127.0.0.1:${await freePort()}`];
    for (const base of bases) gateways.push(await startPurchaseGateway({ ...env, GATEWAY_BASE_URL: base }));
    events = await readTopic<PublishedEvent>(gateways[0]!.config, topicNames(gateways[0]!.config).purchaseEvents);
  });

  afterAll(async () => {
    await events?.stop();
    await Promise.all(gateways.map((gateway) => gateway.stop()));
    await idp?.close();
  });

  it("publishes each event once: a sweep leaves the rows its peer has just committed to the peer's own relay", async () => {
    const tenantId = `tenant-${randomBytes(4).toString('hex')}`;
    const token = await idp.token(await idp.client(tenantId, ['purchase']));
    const calls = bases.map((base) => apiClient(base, token));
    const item = await calls[0]!('POST', '/CorePurchase/REST/Items', { code: 'T-1', name: 'Bolt', unitPrice: '1' });
    const itemId = item.json<{ id: string }>().id;
    const orderIds: string[] = [];
    for (let index = 0; index < VALIDATIONS; index += 1) {
      const draft = await calls[index % 2]!('POST', ORDERS, {
        supplierName: 'Acme',
        currency: 'EUR',
        rows: [{ itemId, quantity: '1' }],
      });
      orderIds.push(draft.json<{ id: string }>().id);
    }

    const started = Date.now();
    const statuses = await Promise.all(
      orderIds.map(async (orderId, index) => {
        await new Promise((resolve) => setTimeout(resolve, (index * 1000) / VALIDATIONS_PER_SECOND));
        return (await calls[index % 2]!('POST', `${ORDERS}/${orderId}/validate`)).status;
      }),
    );
    expect(statuses.filter((status) => status !== 200)).toEqual([]);
    await waitFor(
      () => orderIds.every((orderId) => eventsOf(events.records, orderId).length > 0),
      'an event for every validation',
    );
    // Long enough for a sweep to publish what it would publish again (its grace is 1 s), with the reader caught up.
    const done = Date.now();
    await waitFor(async () => Date.now() > done + 2_500 && (await events.caughtUp()), 'the reader to catch up');

    const twice = orderIds.filter((orderId) => eventsOf(events.records, orderId).length > 1);
    // Without the grace, 4 % of them went out twice here (20-25 % with the gateways as processes, in the chaos suite).
    // A gateway's own publication that takes longer than the grace (a slow moment of Kafka) still lets a peer's sweep
    // publish it again, as at-least-once allows: none in the runs so far, one or two allowed.
    expect(
      twice.length,
      `${twice.length} of ${VALIDATIONS} published twice in ${Date.now() - started} ms`,
    ).toBeLessThanOrEqual(2);
  });
});
