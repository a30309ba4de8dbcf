// The delivery engine on the real path with shortened timings: retries through tiered topics, timeouts,
// abandonment, auto-disable and re-enable, replay, supersede, payload omission, wildcards, tenant isolation and a
// slow receiver beside a fast one.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { loadConfig } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { eventPublisher } from '../support/events.ts';
import {
  freePort,
  startIdentityProvider,
  startReceiver,
  startServices,
  testEnv,
  waitFor,
  type ReceivedRequest,
} from '../support/harness.ts';

type Receiver = Awaited<ReturnType<typeof startReceiver>>;

describe('delivery engine', () => {
  let env: Record<string, string>;
  let idp: Awaited<ReturnType<typeof startIdentityProvider>>;
  let stack: Awaited<ReturnType<typeof startServices>>;
  let events: Awaited<ReturnType<typeof eventPublisher>>;
  let base: string;
  const tokens = new Map<string, string>();
  let metricsPorts: { router: number; dispatcher: number };
  const receivers: Receiver[] = [];

  beforeAll(async () => {
    const run = randomUUID().slice(0, 8);
    env = {
      ...testEnv(),
      KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}engine${run}.`,
      WEBHOOK_RETRY_DELAYS: '1s,2s',
      WEBHOOK_DELIVERY_LIFETIME: '10s',
      WEBHOOK_ATTEMPT_TIMEOUT: '6s',
      WEBHOOK_AUTO_DISABLE_AFTER_DAYS: '1',
      WEBHOOK_PAYLOAD_LIMIT_BYTES: '2000',
      WEBHOOK_SUBSCRIPTION_CACHE_TTL: '200ms',
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
    };
    await provision(loadConfig(env), createLogger('test', 'warn'));
    idp = await startIdentityProvider(env);
    base = `http://127.0.0.1:${await freePort()}`;
    Object.assign(env, { AUTH_URL: idp.url, GATEWAY_BASE_URL: base });
    metricsPorts = { router: await freePort(), dispatcher: await freePort() };
    stack = await startServices(env, ['gateway', 'router', 'dispatcher'], {
      router: { METRICS_PORT: String(metricsPorts.router) },
      dispatcher: { METRICS_PORT: String(metricsPorts.dispatcher) },
    });
    for (const tenant of ['tenant-a', 'tenant-b']) tokens.set(tenant, await idp.token(await idp.client(tenant)));
    events = await eventPublisher(env);
  });

  afterAll(async () => {
    await stack?.stop();
    await events?.close();
    await Promise.all(receivers.map((receiver) => receiver.close()));
    await idp?.close();
    // The keyspace is the run's and is dropped by the global teardown; these topics are this file's own.
    await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  });

  const api = async (tenant: string, method: string, path: string, body?: unknown) => {
    const response = await fetch(`${base}/CoreWebhook/REST/Webhooks${path}`, {
      method,
      headers: {
        authorization: `Bearer ${tokens.get(tenant)}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
  };

  const receiver = async (respond?: (request: ReceivedRequest) => number | Promise<number>) => {
    const started = await startReceiver(respond);
    receivers.push(started);
    return started;
  };

  /** Creates a subscription (retrying until the catalogue has reached the API) and waits out the router cache. */
  const subscribe = async (tenant: string, url: string, extra: Record<string, unknown> = {}) => {
    const created = await waitFor(async () => {
      const answer = await api(tenant, 'POST', '/Subscriptions', { url, eventTypes: ['purchaseOrder.*'], ...extra });
      return answer.status === 201 ? answer.body : undefined;
    }, 'the subscription to be created');
    await new Promise((resolve) => setTimeout(resolve, 300)); // one router cache period (DESIGN §10)
    return created as { id: string; hmacSecret?: string };
  };

  const deliveriesOf = async (tenant: string, subscriptionId: string) =>
    (await api(tenant, 'GET', `/Deliveries?subscriptionId=${subscriptionId}`)).body.items as Record<string, unknown>[];

  const deliveryWithStatus = (tenant: string, subscriptionId: string, status: string, timeoutMs = 30_000) =>
    waitFor(
      async () => (await deliveriesOf(tenant, subscriptionId)).find((delivery) => delivery.status === status),
      `a ${status} delivery of ${subscriptionId}`,
      timeoutMs,
    );

  it('retries on the schedule with the same event id, delivery id, body and signature, counting attempts', async () => {
    let calls = 0;
    const target = await receiver(() => (++calls <= 2 ? 500 : 204));
    const subscription = await subscribe('tenant-a', target.url, { authenticationMode: 'Hmac' });
    const [eventId] = await events.publish([{ tenantId: 'tenant-a', eventType: 'purchaseOrder.validated' }]);

    await waitFor(() => target.received.length >= 3, 'three attempts', 20_000);
    const [first, second, third] = target.received as [ReceivedRequest, ReceivedRequest, ReceivedRequest];
    expect([first, second, third].map((request) => request.headers['x-webhook-attempt'])).toEqual(['1', '2', '3']);
    for (const request of [second, third]) {
      expect(request.headers['x-webhook-event-id']).toBe(eventId);
      expect(request.headers['x-webhook-delivery-id']).toBe(first.headers['x-webhook-delivery-id']);
      expect(request.headers['x-webhook-signature']).toBe(first.headers['x-webhook-signature']);
      expect(request.body.equals(first.body)).toBe(true);
    }
    // Never early: 1 s before the second attempt, then 2 s before the third.
    expect(second.at - first.at).toBeGreaterThanOrEqual(1_000);
    expect(third.at - second.at).toBeGreaterThanOrEqual(2_000);

    const delivery = await deliveryWithStatus('tenant-a', subscription.id, 'acknowledged');
    const detail = (await api('tenant-a', 'GET', `/Deliveries/${String(delivery.id)}`)).body;
    expect(detail).toMatchObject({ attemptCount: 3, lastStatusCode: 204, nextRetryAt: null });
    expect((detail.attempts as { statusCode: number }[]).map((attempt) => attempt.statusCode)).toEqual([500, 500, 204]);
  });

  it('treats no answer within the attempt timeout as a failure and retries', async () => {
    let calls = 0;
    const target = await receiver(async () => {
      if (++calls === 1) await new Promise((resolve) => setTimeout(resolve, 7_000));
      return 200;
    });
    const subscription = await subscribe('tenant-a', target.url);
    await events.publish([{ tenantId: 'tenant-a', eventType: 'purchaseOrder.cancelled' }]);
    const delivery = await deliveryWithStatus('tenant-a', subscription.id, 'acknowledged');
    const detail = (await api('tenant-a', 'GET', `/Deliveries/${String(delivery.id)}`)).body;
    const attempts = detail.attempts as { statusCode: number | null; errorMessage: string | null }[];
    expect(attempts).toHaveLength(2);
    expect(attempts[0]).toMatchObject({
      statusCode: null,
      errorMessage: expect.stringMatching(/no answer within 6000 ms/),
    });
    expect(attempts[1]).toMatchObject({ statusCode: 200, errorMessage: null });
  });

  it('abandons at the lifetime, counts the failure day, disables; re-enable resets and replay re-sends', async () => {
    let healthy = false;
    const target = await receiver(() => (healthy ? 204 : 503));
    const subscription = await subscribe('tenant-a', target.url, { authenticationMode: 'Hmac' });
    const [eventId] = await events.publish([{ tenantId: 'tenant-a', eventType: 'purchaseOrder.validated' }]);

    const abandoned = await deliveryWithStatus('tenant-a', subscription.id, 'abandoned', 30_000);
    // Abandonment hides the cause no more: the receiver's answer stays the last error, the reason has its own field.
    expect(abandoned).toMatchObject({
      eventId,
      lastStatusCode: 503,
      lastErrorMessage: 'HTTP 503',
      abandonReason: 'delivery lifetime exceeded',
      nextRetryAt: null,
    });
    const queuedAt = Date.parse(String(abandoned.queuedAt));
    const attemptTimes = target.received.map((request) => request.at);
    expect(attemptTimes.length).toBeGreaterThanOrEqual(4);
    expect(Math.max(...attemptTimes)).toBeLessThan(queuedAt + 10_000); // no attempt after the deadline

    // WEBHOOK_AUTO_DISABLE_AFTER_DAYS=1 here: one failure day disables the subscription.
    const disabled = await waitFor(async () => {
      const current = (await api('tenant-a', 'GET', `/Subscriptions/${subscription.id}`)).body;
      return current.status === 'disabled' ? current : undefined;
    }, 'the subscription to be disabled');
    expect(disabled.failureDays).toBe(1);

    // Disabled: new events produce no delivery.
    const before = target.received.length;
    await events.publish([{ tenantId: 'tenant-a', eventType: 'purchaseOrder.validated' }]);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(await deliveriesOf('tenant-a', subscription.id)).toHaveLength(1);

    const enabled = await api('tenant-a', 'PATCH', `/Subscriptions/${subscription.id}/status`, { status: 'enabled' });
    expect(enabled.body).toMatchObject({ status: 'enabled', failureDays: 0 });

    healthy = true;
    const replay = await api('tenant-a', 'POST', `/Deliveries/${String(abandoned.id)}/replay`);
    expect(replay.status).toBe(202);
    expect(replay.body).toMatchObject({ replayOf: abandoned.id, eventId, status: 'queued' });
    expect(replay.body.id).not.toBe(abandoned.id);
    await waitFor(() => target.received.length > before, 'the replayed delivery');
    const replayed = target.received.at(-1)!;
    const original = target.received[0]!;
    expect(replayed.headers['x-webhook-delivery-id']).toBe(replay.body.id);
    expect(replayed.headers['x-webhook-event-id']).toBe(eventId);
    expect(replayed.headers['x-webhook-attempt']).toBe('1');
    expect(replayed.headers['x-webhook-signature']).toBe(original.headers['x-webhook-signature']);
    expect(replayed.body.equals(original.body)).toBe(true);
    await waitFor(async () => {
      const answer = await api('tenant-a', 'GET', `/Deliveries/${String(replay.body.id)}`);
      return answer.body.status === 'acknowledged';
    }, 'the replay to be acknowledged');
  });

  it('refuses to replay a delivery that is still pending', async () => {
    const target = await receiver(() => 500);
    const subscription = await subscribe('tenant-b', target.url);
    await events.publish([{ tenantId: 'tenant-b', eventType: 'purchaseOrder.validated' }]);
    const retrying = await deliveryWithStatus('tenant-b', subscription.id, 'retrying');
    const replay = await api('tenant-b', 'POST', `/Deliveries/${String(retrying.id)}/replay`);
    expect(replay.status).toBe(409);
  });

  it('abandons the pending deliveries of a subscription disabled by its owner, at their next due time', async () => {
    const target = await receiver(() => 500);
    const subscription = await subscribe('tenant-b', target.url);
    await events.publish([{ tenantId: 'tenant-b', eventType: 'purchaseOrder.validated' }]);
    const retrying = await deliveryWithStatus('tenant-b', subscription.id, 'retrying');
    const disabled = await api('tenant-b', 'PATCH', `/Subscriptions/${subscription.id}/status`, { status: 'disabled' });
    expect(disabled.body).toMatchObject({ status: 'disabled' });
    const attemptsBefore = target.received.length;
    const abandoned = await deliveryWithStatus('tenant-b', subscription.id, 'abandoned');
    expect(abandoned).toMatchObject({
      id: retrying.id,
      abandonReason: 'subscription disabled',
      lastErrorMessage: 'HTTP 500',
    });
    expect(target.received.length).toBeLessThanOrEqual(attemptsBefore + 1); // at most one attempt already under way
  });

  it('supersedes a pending delivery when a newer one of the same entity is queued', async () => {
    let calls = 0;
    const target = await receiver(() => (++calls === 1 ? 500 : 204));
    const subscription = await subscribe('tenant-a', target.url, { supersedePendingDeliveries: true });
    const entityId = randomUUID();
    const [older] = await events.publish([{ tenantId: 'tenant-a', eventType: 'purchaseOrder.validated', entityId }]);
    await waitFor(() => target.received.length === 1, 'the first attempt');
    const [newer] = await events.publish([{ tenantId: 'tenant-a', eventType: 'purchaseOrder.cancelled', entityId }]);

    const superseded = await deliveryWithStatus('tenant-a', subscription.id, 'superseded');
    expect(superseded.eventId).toBe(older);
    const acknowledged = await deliveryWithStatus('tenant-a', subscription.id, 'acknowledged');
    expect(acknowledged.eventId).toBe(newer);
    expect(target.received.map((request) => request.headers['x-webhook-event-id'])).toEqual([older, newer]);
  });

  it('omits payloads above the limit, matches single-segment wildcards and never crosses tenants', async () => {
    const a = await receiver();
    const b = await receiver();
    await subscribe('tenant-a', a.url);
    await subscribe('tenant-b', b.url);
    // 1,001 two-byte characters: about 1,000 characters but over the 2,000-byte limit (the limit counts UTF-8 bytes).
    const big = JSON.stringify({ note: 'é'.repeat(1_001) });
    const huge = JSON.stringify({ rows: 'x'.repeat(20_000_000) }); // a 20 MB event, far above a fetch's default size
    const [large, nested, small, enormous] = await events.publish([
      { tenantId: 'tenant-a', eventType: 'purchaseOrder.validated', payload: big },
      { tenantId: 'tenant-a', eventType: 'purchaseOrder.row.added' },
      { tenantId: 'tenant-a', eventType: 'purchaseOrder.cancelled', payload: '{"small":true}' },
      { tenantId: 'tenant-a', eventType: 'purchaseOrder.validated', payload: huge },
    ]);
    await waitFor(() => a.received.length >= 3, 'three deliveries to tenant a');
    const byEvent = new Map(a.received.map((request) => [request.headers['x-webhook-event-id'], request]));
    expect(JSON.parse(byEvent.get(large)!.body.toString())).toMatchObject({ payload: null, payloadOmitted: true });
    expect(byEvent.get(small)!.body.toString()).toContain('"payload":{"small":true},"payloadOmitted":false}');
    expect(JSON.parse(byEvent.get(enormous)!.body.toString())).toMatchObject({ payload: null, payloadOmitted: true });
    expect(byEvent.has(nested)).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(a.received).toHaveLength(3);
    expect(b.received).toHaveLength(0);
  });

  it('keeps delivering to a fast receiver while a slow one holds its requests for seconds', async () => {
    const slowAnswers: number[] = [];
    const slow = await receiver(async () => {
      await new Promise((resolve) => setTimeout(resolve, 5_000));
      slowAnswers.push(Date.now());
      return 204;
    });
    const fast = await receiver();
    await subscribe('tenant-b', slow.url);
    await subscribe('tenant-b', fast.url);
    // Every event matches both subscriptions: the slow receiver holds its share for 5 s each while the fast one
    // must get all of its deliveries before the slow receiver has answered even once (no head-of-line blocking).
    await events.publish(
      Array.from({ length: 40 }, () => ({ tenantId: 'tenant-b', eventType: 'purchaseOrder.validated' })),
    );
    await waitFor(() => fast.received.length >= 40, 'the fast receiver to get all 40', 20_000);
    expect(slowAnswers).toHaveLength(0);
    expect(slow.received.length).toBeGreaterThan(0);
  });

  it('exposes Prometheus metrics on the router and the dispatcher', async () => {
    let calls = 0;
    const target = await receiver(() => (++calls === 1 ? 500 : 204));
    const subscription = await subscribe('tenant-b', target.url);
    await events.publish([{ tenantId: 'tenant-b', eventType: 'purchaseOrder.validated' }]);
    await deliveryWithStatus('tenant-b', subscription.id, 'acknowledged');
    const dispatcher = await (await fetch(`http://127.0.0.1:${metricsPorts.dispatcher}/metrics`)).text();
    const acknowledged = /webhook_deliveries_total\{[^}]*outcome="acknowledged"[^}]*\} (\d+)/.exec(dispatcher);
    expect(Number(acknowledged?.[1])).toBeGreaterThan(0);
    expect(dispatcher).toMatch(/webhook_deliveries_total\{[^}]*outcome="retrying"/);
    expect(dispatcher).toMatch(/webhook_attempt_duration_seconds_bucket\{/);
    expect(dispatcher).toMatch(/webhook_consumer_lag\{/);
    expect(dispatcher).toMatch(/webhook_records_in_flight/);
    // Where the time goes, stage by stage.
    for (const stage of ['queue_to_dispatch', 'attempt', 'event_to_answer']) {
      expect(dispatcher).toMatch(new RegExp(`webhook_stage_seconds_count\\{[^}]*stage="${stage}"[^}]*\\} [1-9]`));
    }
    const router = await (await fetch(`http://127.0.0.1:${metricsPorts.router}/metrics`)).text();
    expect(Number(/webhook_events_routed_total\{[^}]*kind="event"[^}]*\} (\d+)/.exec(router)?.[1])).toBeGreaterThan(0);
    for (const stage of ['event_to_routed', 'routing', 'routing_write', 'routing_publish']) {
      expect(router).toMatch(new RegExp(`webhook_stage_seconds_count\\{[^}]*stage="${stage}"[^}]*\\} [1-9]`));
    }
  });

  it('authenticates with an API key header, and with an OAuth2 token refreshed once after a 401', async () => {
    const keyed = await receiver((request) => (request.headers['x-api-key'] === 'key-123' ? 204 : 401));
    await subscribe('tenant-a', keyed.url, {
      authenticationMode: 'ApiKey',
      apiKey: { headerName: 'X-Api-Key', value: 'key-123' },
    });

    // The token endpoint hands out tok-1, tok-2, …; the receiver only takes tok-2, as if tok-1 had been revoked.
    const tokenRequests: URLSearchParams[] = [];
    const tokenServer = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        tokenRequests.push(new URLSearchParams(Buffer.concat(chunks).toString('utf8')));
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(
          JSON.stringify({ access_token: `tok-${tokenRequests.length}`, token_type: 'Bearer', expires_in: 3600 }),
        );
      });
    });
    await new Promise<void>((resolve) => tokenServer.listen(0, '127.0.0.1', resolve));
    onTestFinished(() => void tokenServer.close());
    const tokenUrl = `http://127.0.0.1:${(tokenServer.address() as AddressInfo).port}/oauth/token`;
    const guarded = await receiver((request) => (request.headers.authorization === 'Bearer tok-2' ? 204 : 401));
    const oauth = await subscribe('tenant-a', guarded.url, {
      authenticationMode: 'OAuth2',
      oauth2: { tokenUrl, clientId: 'hook-client', clientSecret: 'hook-secret', scope: 'hooks' },
    });

    await events.publish([{ tenantId: 'tenant-a', eventType: 'purchaseOrder.validated' }]);
    await waitFor(() => keyed.received.length >= 1, 'the API-key delivery');
    expect(keyed.received[0]!.headers['x-api-key']).toBe('key-123');
    const delivery = await deliveryWithStatus('tenant-a', oauth.id, 'acknowledged');
    expect(delivery.attemptCount).toBe(1);
    expect(guarded.received.map((request) => request.headers.authorization)).toEqual(['Bearer tok-1', 'Bearer tok-2']);
    expect(guarded.received.map((request) => request.headers['x-webhook-attempt'])).toEqual(['1', '1']);
    expect(tokenRequests).toHaveLength(2);
    expect(Object.fromEntries(tokenRequests[0]!)).toEqual({
      grant_type: 'client_credentials',
      client_id: 'hook-client',
      client_secret: 'hook-secret',
      scope: 'hooks',
    });
  });
});
