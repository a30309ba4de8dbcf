// The API under a dependency fault: while Cassandra does not answer (frozen, as by SIGSTOP), requests answer 503
// problem+json with Retry-After at once instead of hanging, and succeed again, without a restart, once it is back.
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
    token = await idp.token(await idp.client(uniqueTenant('faults'), ['webhook']));
    // Only the gateway talks to Cassandra through the proxy.
    gateway = await startTestGateway(
      {
        ...testEnv(),
        AUTH_URL: idp.url,
        CASSANDRA_CONTACT_POINTS: proxy.address,
        GATEWAY_DEPENDENCY_TIMEOUT: '1500ms',
      },
      { webhook: true, purchase: false },
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
});
