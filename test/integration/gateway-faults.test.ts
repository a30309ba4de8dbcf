// The API under a dependency fault: while Cassandra does not answer (frozen, as by SIGSTOP), requests answer 503
// problem+json with Retry-After at once instead of hanging, and succeed again, without a restart, once it is back.
// While it answers, but slowly, a request that would wait past its budget (GATEWAY_REQUEST_BUDGET, for all its
// Cassandra requests together) answers 503 within it.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startIdentityProvider, testEnv, waitFor } from '../support/harness.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';
import { call, startTestGateway, uniqueTenant, WEBHOOKS, type TestGateway } from '../support/webhook-api.ts';

/** A gateway whose Cassandra connections pass through a proxy the test can freeze or slow, and a token for it. */
async function gatewayBehindProxy(tenant: string, env: Record<string, string>) {
  const [host, port] = testEnv().CASSANDRA_CONTACT_POINTS!.split(',')[0]!.split(':');
  const proxy = await startTcpProxy({ host: host!, port: Number(port ?? 9042) });
  const idp = await startIdentityProvider(testEnv());
  const token = await idp.token(await idp.client(uniqueTenant(tenant), ['webhook', 'purchase']));
  // Only the gateway talks to Cassandra through the proxy.
  const gateway = await startTestGateway(
    { ...testEnv(), AUTH_URL: idp.url, CASSANDRA_CONTACT_POINTS: proxy.address, ...env },
    { webhook: true, purchase: true },
  );
  return {
    proxy,
    gateway,
    token,
    close: async () => {
      proxy.thaw();
      proxy.slow(0);
      await gateway.close();
      await idp.close();
      await proxy.close();
    },
  };
}

describe('gateway under a Cassandra fault', () => {
  let setup: Awaited<ReturnType<typeof gatewayBehindProxy>>;
  let proxy: typeof setup.proxy;
  let gateway: TestGateway;
  let token: string;

  beforeAll(async () => {
    setup = await gatewayBehindProxy('faults', { GATEWAY_DEPENDENCY_TIMEOUT: '1500ms', GATEWAY_REQUEST_BUDGET: '2s' });
    ({ proxy, gateway, token } = setup);
  });

  afterAll(async () => {
    await setup?.close();
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

// Cassandra losing its quorum and getting it back: nodes restarting answer, but slowly, and a call that makes several
// requests used to take up to its whole budget (10 s) before its 503 or its 200. While a dependency has failed within
// GATEWAY_DEGRADED_WINDOW, requests get GATEWAY_DEGRADED_BUDGET instead: the API answers fast while it recovers.
describe('gateway while Cassandra recovers from a failure', () => {
  let setup: Awaited<ReturnType<typeof gatewayBehindProxy>>;
  let proxy: typeof setup.proxy;
  let gateway: TestGateway;
  let token: string;

  beforeAll(async () => {
    // The production request budget (10 s); the degraded one and its window short enough for a test.
    setup = await gatewayBehindProxy('recovery', {
      GATEWAY_DEPENDENCY_TIMEOUT: '1500ms',
      GATEWAY_DEGRADED_BUDGET: '1s',
      GATEWAY_DEGRADED_WINDOW: '5s',
    });
    ({ proxy, gateway, token } = setup);
  });

  afterAll(async () => {
    await setup?.close();
  });

  const purchase = (method: string, path: string, body?: unknown) =>
    call(gateway.base, method, `/CorePurchase/REST${path}`, { token, body });
  const draftOrder = async (): Promise<string> => {
    const item = await purchase('POST', '/Items', { code: `R-${randomUUID()}`, name: 'Nut', unitPrice: '0.50' });
    expect(item.status, item.text).toBe(201);
    const order = await purchase('POST', '/PurchaseOrders', {
      supplierName: 'Acme',
      currency: 'EUR',
      rows: [{ itemId: item.body.id, quantity: '4' }],
    });
    expect(order.status, order.text).toBe(201);
    return String(order.body.id);
  };
  const timed = async (work: () => ReturnType<typeof purchase>) => {
    const started = Date.now();
    const answer = await work();
    return { answer, took: Date.now() - started };
  };

  it('answers within 2 s while Cassandra has just failed, and gives slow calls their whole budget once it has not for a while', async () => {
    const [warm, first, second] = [await draftOrder(), await draftOrder(), await draftOrder()];
    // Every statement of a validation prepared first: a statement prepared for the first time while answers are late
    // costs a round trip more, which this test is not about.
    const validated = await purchase('POST', `/PurchaseOrders/${warm}/validate`);
    expect(validated.status, validated.text).toBe(200);
    // The failure: nothing answers; requests answer 503 (after their one call's bound, then at once while the driver
    // reconnects) until Cassandra is back.
    const list = () => call(gateway.base, 'GET', `${WEBHOOKS}/Subscriptions`, { token });
    proxy.freeze();
    try {
      expect((await list()).status).toBe(503);
    } finally {
      proxy.thaw();
    }
    await waitFor(async () => (await list()).status === 200, 'the API to serve again after Cassandra is back', 30_000);
    // Back, but each answer 0.5 s late (a node restarting): the validation's several requests (and their statements'
    // preparation on new connections) no longer take their time: the API answers within the degraded budget.
    proxy.slow(500);
    try {
      const { answer, took } = await timed(() => purchase('POST', `/PurchaseOrders/${first}/validate`));
      expect(took, `${answer.status} ${answer.text}`).toBeLessThan(2_000);
      expect(answer.status, answer.text).toBe(503);
      expect(answer.headers.get('retry-after')).toBe('2');
    } finally {
      proxy.slow(0);
    }
    // No failure for longer than the window: a slow call has its whole budget again and succeeds.
    await new Promise((resolve) => setTimeout(resolve, 5_500));
    proxy.slow(500);
    try {
      const { answer, took } = await timed(() => purchase('POST', `/PurchaseOrders/${second}/validate`));
      expect(answer.status, answer.text).toBe(200);
      // Three round trips of 0.5 s at least (the order's read beside its pointer, the batch, the reference): longer than
      // the degraded budget (1 s) would have allowed.
      expect(took).toBeGreaterThan(1_000);
    } finally {
      proxy.slow(0);
    }
  });
});
