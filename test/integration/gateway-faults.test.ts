// The API under a dependency fault: while Cassandra does not answer (frozen, as by SIGSTOP), requests answer 503
// problem+json with Retry-After at once instead of hanging, and succeed again, without a restart, once it is back.
// While it answers, but slowly, a request that would wait past its budget (GATEWAY_REQUEST_BUDGET, for all its
// Cassandra requests together) answers 503 within it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startIdentityProvider, testEnv, waitFor } from '../support/harness.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';
import { call, startTestGateway, uniqueTenant, WEBHOOKS, type TestGateway } from '../support/webhook-api.ts';

describe('gateway under a Cassandra fault', () => {
  let proxy: Awaited<ReturnType<typeof startTcpProxy>>;
  let idp: Awaited<ReturnType<typeof startIdentityProvider>>;
  let gateway: TestGateway;
  let token: string;

  beforeAll(async () => {
    const [host, port] = testEnv().CASSANDRA_CONTACT_POINTS!.split(',')[0]!.split(':');
    proxy = await startTcpProxy({ host: host!, port: Number(port ?? 9042) });
    idp = await startIdentityProvider(testEnv());
    token = await idp.token(await idp.client(uniqueTenant('faults'), ['webhook', 'purchase']));
    // Only the gateway talks to Cassandra through the proxy.
    gateway = await startTestGateway(
      {
        ...testEnv(),
        AUTH_URL: idp.url,
        CASSANDRA_CONTACT_POINTS: proxy.address,
        GATEWAY_DEPENDENCY_TIMEOUT: '1500ms',
        GATEWAY_REQUEST_BUDGET: '2s',
      },
      { webhook: true, purchase: true },
    );
  });

  afterAll(async () => {
    proxy?.thaw();
    await gateway?.close();
    await idp?.close();
    await proxy?.close();
  });

  const list = () => call(gateway.base, 'GET', `${WEBHOOKS}/Subscriptions`, { token });

  it('answers 503 with Retry-After while Cassandra is frozen, then serves again once it is back', async () => {
    expect((await list()).status).toBe(200);
    proxy.freeze();
    try {
      for (let request = 0; request < 3; request += 1) {
        const started = Date.now();
        const answer = await list();
        const took = Date.now() - started;
        expect(answer.status, answer.text).toBe(503);
        expect(answer.headers.get('content-type')).toMatch(/application\/problem\+json/);
        expect(answer.headers.get('retry-after')).toBe('2');
        expect(answer.body).toMatchObject({ status: 503, detail: expect.stringMatching(/Cassandra/) });
        // Bounded by the dependency timeout (1.5 s), where it used to hang for the driver's 20 s.
        expect(took).toBeLessThan(10_000);
      }
      const ready = await call(gateway.base, 'GET', '/ready');
      expect(ready.status).toBe(503);
    } finally {
      proxy.thaw();
    }
    await waitFor(async () => (await list()).status === 200, 'the API to serve again after Cassandra is back', 30_000);
    expect((await call(gateway.base, 'GET', '/ready')).status).toBe(200);
  });

  it('answers 503 within the budget when Cassandra answers each request in time but the call makes several', async () => {
    const purchase = (method: string, path: string, body?: unknown) =>
      call(gateway.base, method, `/CorePurchase/REST${path}`, { token, body });
    const item = await purchase('POST', '/Items', { code: `C-${Date.now()}`, name: 'Bolt', unitPrice: '2.50' });
    expect(item.status, item.text).toBe(201);
    const order = await purchase('POST', '/PurchaseOrders', {
      supplierName: 'Acme',
      currency: 'EUR',
      rows: [{ itemId: item.body.id, quantity: '3' }],
    });
    expect(order.status, order.text).toBe(201);
    const validate = () => purchase('POST', `/PurchaseOrders/${String(order.body.id)}/validate`);

    // Each answer 1 s late: every Cassandra request of the validation (the order read, the reference, the outbox
    // pointer, the compare-and-set) is within the 1.5 s bound of one call, and all of them past the 2 s budget.
    proxy.slow(1_000);
    let answer: Awaited<ReturnType<typeof validate>>;
    let took: number;
    try {
      const started = Date.now();
      answer = await validate();
      took = Date.now() - started;
    } finally {
      proxy.slow(0);
    }
    expect(answer.status, answer.text).toBe(503);
    expect(answer.headers.get('retry-after')).toBe('2');
    expect(answer.body).toMatchObject({ status: 503, detail: expect.stringMatching(/Cassandra/) });
    // The budget is 2 s; without one the call answered 200 after about 5 s.
    expect(took).toBeLessThan(3_000);

    // A 503 leaves the outcome open (the compare-and-set may still apply): the client's retry settles it, and the
    // order ends validated once, either by the first call (the retry answers 409) or by the retry (200).
    let retried = await validate();
    await waitFor(async () => {
      if (retried.status === 503) retried = await validate();
      return retried.status !== 503;
    }, 'the validation to be retried once Cassandra answers at once again');
    expect([200, 409], retried.text).toContain(retried.status);
    const after = await purchase('GET', `/PurchaseOrders/${String(order.body.id)}`);
    expect(after.body).toMatchObject({ status: 'Validated', reference: expect.any(String) });
  });
});
