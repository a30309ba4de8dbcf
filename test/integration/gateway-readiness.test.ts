// Readiness of the gateway (DESIGN §7): the event-type catalogue is followed from a compacted Kafka topic, so a fresh
// gateway must have read that topic up to its end before it calls itself ready or judges a subscription's event types.
// Real Kafka, Cassandra and schema registry; the catalogue entries are published before the gateway starts.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildGateway, type GatewayDeps } from '../../api/gateway.ts';
import { createTokenVerifier } from '../../core/auth/verifier.ts';
import { Catalogue, type EventTypeEntry } from '../../core/catalogue.ts';
import { loadConfig } from '../../core/config.ts';
import { createKafka } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { codecFor, createRegistry } from '../../core/registry.ts';
import { topicNames } from '../../core/topics.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { startIdentityProvider, testEnv, waitFor } from '../support/harness.ts';
import {
  call,
  expectProblem,
  startTestGateway,
  subscriptionBody,
  uniqueTenant,
  WEBHOOKS,
  type Idp,
  type SubscriptionView,
  type TestGateway,
} from '../support/webhook-api.ts';

describe('gateway readiness waits for the event-type catalogue', () => {
  let idp: Idp;
  let token: string;
  const gateways: TestGateway[] = [];
  // Types only this file publishes: no other gateway of the run announces them.
  const service = `readiness${randomBytes(3).toString('hex')}`;
  const types = Array.from({ length: 200 }, (_, index) => `${service}.happened${index}`);
  const last = types.at(-1)!;

  // Topics of this file's own: the 200 types published here must not show in the catalogue other files read.
  const env = { ...testEnv(), KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}${service}.` };

  beforeAll(async () => {
    const config = loadConfig(env);
    await provision(config, createLogger('test', 'warn'));
    idp = await startIdentityProvider(env);
    token = await idp.token(await idp.client(uniqueTenant('readiness'), ['webhook']));
    // The catalogue topic already holds the entries when the gateways start (the producing service ran before).
    const topic = topicNames(config).eventTypes;
    const codec = await codecFor<EventTypeEntry>(createRegistry(config.schemaRegistryUrl), 'eventType', topic);
    const producer = createKafka(config.kafka.brokers, 'readiness-test', createLogger('test', 'warn')).producer();
    await producer.connect();
    try {
      const messages = await Promise.all(
        types.map(async (eventType) => ({
          key: eventType,
          value: await codec.encode({ eventType, service, description: 'published before the gateway started' }),
        })),
      );
      await producer.send({ topic, acks: -1, messages });
    } finally {
      await producer.disconnect();
    }
  });

  afterAll(async () => {
    for (const gateway of gateways) await gateway.close();
    await idp?.close();
    await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  });

  /** A gateway serving only the webhook API, so that nothing of its own start-up publishes to the catalogue. */
  async function startGateway() {
    const gateway = await startTestGateway(
      { ...env, AUTH_URL: idp.url, WEBHOOK_ALLOW_HTTP: 'true', PURCHASE_OUTBOX_RELAY: 'false' },
      { webhook: true, purchase: false },
    );
    gateways.push(gateway);
    return gateway;
  }

  const subscribe = (base: string, eventTypes: string[]) =>
    call<SubscriptionView>(base, 'POST', `${WEBHOOKS}/Subscriptions`, {
      token,
      body: subscriptionBody({ eventTypes }),
    });

  it('answers GET /ready 200 {"status":"ready"} once caught up; the next request accepts a catalogued type', async () => {
    const gateway = await startGateway();
    const ready = await waitFor(async () => {
      const answer = await call(gateway.base, 'GET', '/ready');
      return answer.status === 200 && answer;
    }, 'GET /ready to answer 200');
    expect(ready.headers.get('content-type')).toMatch(/^application\/json/);
    expect(ready.body).toEqual({ status: 'ready' });
    const created = await subscribe(gateway.base, [last, `${service}.*`]);
    expect(created.status, created.text).toBe(201);
    expect(created.body.eventTypes).toEqual([last, `${service}.*`]);
  });

  it('never refuses a catalogued type as unknown, even on its very first request', async () => {
    const gateway = await startGateway();
    const first = await subscribe(gateway.base, [last]);
    if (first.status === 503) {
      // Still catching up: the gateway says so, and when to come back, instead of a misleading 400.
      expect(first.headers.get('retry-after')).toMatch(/^\d+$/);
      expectProblem(first, 503);
    } else {
      expect(first.status, first.text).toBe(201);
    }
    // Unknown types are still refused once caught up.
    expectProblem(await subscribe(gateway.base, [`${service}.never`]), 400, 'eventTypes.0');
  });

  it('answers GET /ready 503 problem+json naming Cassandra when it does not answer', async () => {
    const gateway = await startGateway();
    await waitFor(async () => (await call(gateway.base, 'GET', '/ready')).status === 200, 'GET /ready to answer 200');
    // The gateway's own Cassandra session goes away (the last resource closed; close() shuts it down again harmlessly).
    await gateway.platform.db.shutdown();
    const answer = await call(gateway.base, 'GET', '/ready');
    const problem = expectProblem(answer, 503);
    expect(problem.detail).toMatch(/cassandra/i);
    expect(problem.detail).not.toMatch(/catalogue/i);
  });

  it('while the catalogue catches up, /ready names it and subscription writes answer 503 with Retry-After', async () => {
    const config = loadConfig(env);
    const topic = topicNames(config).eventTypes;
    const catalogue = new Catalogue(
      await codecFor<EventTypeEntry>(createRegistry(config.schemaRegistryUrl), 'eventType', topic),
    );
    // Only the catalogue matters here: the guard answers before authentication, and no store is reached.
    const unused = new Proxy({}, { get: () => () => Promise.reject(new Error('not used')) });
    const app = await buildGateway({
      logger: createLogger('readiness-test', 'error'),
      verifier: createTokenVerifier(config.auth),
      integrators: { registrationOf: async () => undefined },
      webhook: { catalogue, rules: {}, subscriptions: unused, deliveries: unused } as unknown as GatewayDeps['webhook'],
      readiness: [
        { name: 'cassandra', ready: () => true },
        { name: 'catalogue', ready: () => catalogue.caughtUp },
      ],
    });
    try {
      const ready = await app.inject({ method: 'GET', url: '/ready' });
      expect(ready.statusCode).toBe(503);
      expect(ready.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(ready.json()).toMatchObject({ status: 503, detail: expect.stringMatching(/catalogue/) });
      expect(ready.json().detail).not.toMatch(/cassandra/);
      for (const [method, url] of [
        ['POST', `${WEBHOOKS}/Subscriptions`],
        ['PATCH', `${WEBHOOKS}/Subscriptions/some-id`],
      ] as const) {
        const answer = await app.inject({ method, url, payload: subscriptionBody({ eventTypes: [last] }) });
        expect(answer.statusCode, `${method} ${url}`).toBe(503);
        expect(answer.headers['retry-after']).toBe('1');
        expect(answer.json()).toMatchObject({ status: 503, title: expect.any(String), detail: expect.any(String) });
      }
      // Other routes are not held up: they reach authentication as usual.
      expect((await app.inject({ method: 'GET', url: `${WEBHOOKS}/Subscriptions` })).statusCode).toBe(401);

      catalogue.expect([{ partition: 0, start: '0', end: '0' }]);
      expect((await app.inject({ method: 'GET', url: '/ready' })).json()).toEqual({ status: 'ready' });
      const after = await app.inject({ method: 'POST', url: `${WEBHOOKS}/Subscriptions`, payload: subscriptionBody() });
      expect(after.statusCode).toBe(401);
    } finally {
      await app.close();
    }
  });
});
