// Adaptive concurrency per subscription on the real path (issue 13, item 1): the router and the dispatcher as processes,
// real Kafka and Cassandra, real receivers on 127.0.0.1. One subscription's endpoint answers 429 with Retry-After: 1
// for a while, beside fast endpoints of another subscription of its tenant and of another tenant.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig, requireSecrets } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { SubscriptionStore } from '../../core/subscriptions/subscription-store.ts';
import { blankSubscription, type Subscription } from '../../core/subscriptions/subscription.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import { eventPublisher } from '../support/events.ts';
import { freePort, startReceiver, startServices, testEnv, waitFor } from '../support/harness.ts';

/** One request as the throttling receiver saw it: when it came and was answered, and how many were open then. */
interface Seen {
  deliveryId: string;
  attempt: number;
  at: number;
  answeredAt: number;
  status: number;
  /** Requests open at this receiver when this one arrived, itself included. */
  concurrent: number;
}

/**
 * A receiver that answers 429 with Retry-After: 1 until `healthy`, then 200; it holds every request 30 ms first, so
 * what the dispatcher lets through at once shows as requests open at once here.
 */
async function throttlingReceiver() {
  const seen: Seen[] = [];
  let open = 0;
  const state = { healthy: false };
  const server = createServer((request, response) => {
    open += 1;
    const entry: Seen = {
      deliveryId: String(request.headers['x-webhook-delivery-id']),
      attempt: Number(request.headers['x-webhook-attempt']),
      at: Date.now(),
      answeredAt: 0,
      status: 0,
      concurrent: open,
    };
    seen.push(entry);
    response.on('close', () => {
      open -= 1;
    });
    request.resume();
    request.on('end', () => {
      const answer = (status: number, headers: Record<string, string> = {}) => {
        entry.status = status;
        entry.answeredAt = Date.now();
        response.writeHead(status, headers).end();
      };
      const healthy = state.healthy;
      setTimeout(() => (healthy ? answer(200) : answer(429, { 'retry-after': '1' })), 30);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`,
    seen,
    state,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const maxConcurrent = (requests: Seen[]) => Math.max(0, ...requests.map((request) => request.concurrent));

describe('adaptive concurrency per subscription', () => {
  let env: Record<string, string>;
  let db: CassandraClient;
  let subscriptions: SubscriptionStore;
  let stack: Awaited<ReturnType<typeof startServices>>;
  let events: Awaited<ReturnType<typeof eventPublisher>>;
  let metricsPort: number;
  const closers: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    env = {
      ...testEnv(),
      KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}adaptive${randomUUID().slice(0, 8)}.`,
      // Without Retry-After a first failure would come back after 500 ms: Retry-After: 1 must make it a second.
      WEBHOOK_RETRY_DELAYS: '500ms,1s,2s',
      WEBHOOK_DELIVERY_LIFETIME: '5m',
      WEBHOOK_SUBSCRIPTION_CACHE_TTL: '200ms',
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
      DISPATCHER_MAX_IN_FLIGHT_PER_SUBSCRIPTION: '20',
      LOG_LEVEL: 'warn',
    };
    const config = loadConfig(env);
    await provision(config, createLogger('test', 'warn'));
    db = await connectCassandra(config);
    subscriptions = new SubscriptionStore(db, requireSecrets(config));
    metricsPort = await freePort();
    stack = await startServices(env, ['router', 'dispatcher'], { dispatcher: { METRICS_PORT: String(metricsPort) } });
    events = await eventPublisher(env);
  });

  afterAll(async () => {
    await stack?.stop();
    await events?.close();
    for (const close of closers) await close();
    await db?.shutdown();
    await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  });

  const subscribe = async (tenantId: string, url: string, eventTypes: string[]) => {
    const subscription: Subscription = { ...blankSubscription(tenantId, randomUUID(), new Date()), url, eventTypes };
    await subscriptions.save(subscription);
    return subscription;
  };

  const scrape = async () => (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const metric = (text: string, pattern: string) => Number(new RegExp(`^${pattern} (\\S+)$`, 'm').exec(text)?.[1]);

  it('a 429 endpoint is held at one request at a time and retried no earlier than Retry-After, the others keep their pace; healthy again, it grows back', async () => {
    const tenantA = `tenant-${randomUUID().slice(0, 8)}`;
    const tenantB = `tenant-${randomUUID().slice(0, 8)}`;
    const throttled = await throttlingReceiver();
    closers.push(throttled.close);
    const sameTenant = await startReceiver();
    const otherTenant = await startReceiver();
    closers.push(sameTenant.close, otherTenant.close);
    const slow = await subscribe(tenantA, throttled.url, ['purchaseOrder.cancelled']);
    await subscribe(tenantA, sameTenant.url, ['purchaseOrder.validated']);
    await subscribe(tenantB, otherTenant.url, ['purchaseOrder.*']);
    await new Promise((resolve) => setTimeout(resolve, 400)); // two router cache periods

    const backlog = 300;
    await events.publish(
      Array.from({ length: backlog }, () => ({ tenantId: tenantA, eventType: 'purchaseOrder.cancelled' })),
    );
    await waitFor(() => throttled.seen.length >= 20, 'the throttling receiver to answer its first 429s', 30_000);
    const throttlingSince = Date.now();

    // The fast subscriptions' events, paced, while the other one is being throttled.
    const publishedAt = new Map<string, number>();
    for (let batch = 0; batch < 10; batch += 1) {
      const ids = await events.publish([
        ...Array.from({ length: 10 }, () => ({ tenantId: tenantA, eventType: 'purchaseOrder.validated' })),
        ...Array.from({ length: 10 }, () => ({ tenantId: tenantB, eventType: 'purchaseOrder.validated' })),
      ]);
      for (const id of ids) publishedAt.set(id, Date.now());
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await waitFor(
      () => sameTenant.received.length >= 100 && otherTenant.received.length >= 100,
      'the fast subscriptions to get their 100 deliveries each',
      20_000,
    );
    expect(throttled.state.healthy).toBe(false); // all of it arrived while the 429s went on
    const latencies = [...sameTenant.received, ...otherTenant.received]
      .map((request) => request.at - publishedAt.get(String(request.headers['x-webhook-event-id']))!)
      .sort((a, b) => a - b);
    const p99 = latencies[Math.ceil(latencies.length * 0.99) - 1]!;
    console.log(`fast subscriptions beside a 429 one: p50 ${latencies[latencies.length >> 1]} ms, p99 ${p99} ms`);
    expect(p99).toBeLessThan(2_000);

    // Hold the 429s for 8 s in all; meanwhile the dispatcher shows the subscription held at the floor.
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, throttlingSince + 8_000 - Date.now())));
    const during = await scrape();
    expect(metric(during, `webhook_subscription_concurrency_limit\\{[^}]*subscription_id="${slow.id}"[^}]*\\}`)).toBe(
      1,
    );
    expect(metric(during, 'webhook_subscriptions_retry_after_held\\{[^}]*\\}')).toBeGreaterThanOrEqual(1);
    expect(metric(during, 'webhook_throttled_attempts_total\\{[^}]*reason="429"[^}]*\\}')).toBeGreaterThanOrEqual(20);
    expect(metric(during, 'webhook_retry_after_deferrals_total\\{[^}]*\\}')).toBeGreaterThanOrEqual(1);
    expect(metric(during, 'webhook_concurrency_limit_subscriptions\\{[^}]*le="1"[^}]*\\}')).toBeGreaterThanOrEqual(1);

    throttled.state.healthy = true;
    const healthySince = Date.now();
    const throttledPhase = throttled.seen.filter((request) => request.status === 429);
    const settled = throttledPhase.filter((request) => request.at >= throttlingSince + 2_000);
    console.log(
      `429 phase: ${throttledPhase.length} requests, max ${maxConcurrent(throttledPhase)} at once at first, ` +
        `${maxConcurrent(settled)} after its first 2 s (lane limit 20)`,
    );
    expect(settled.length).toBeGreaterThan(10);
    expect(maxConcurrent(settled)).toBeLessThanOrEqual(2);

    // Healthy: every delivery ends acknowledged, and the subscription is let through more than one at a time again.
    await waitFor(
      () => new Set(throttled.seen.filter((r) => r.status === 200).map((r) => r.deliveryId)).size >= backlog,
      `all ${backlog} deliveries of the recovered subscription to be acknowledged`,
      45_000,
    );
    const recovered = throttled.seen.filter((request) => request.at >= healthySince);
    console.log(`healthy phase: ${recovered.length} requests, max ${maxConcurrent(recovered)} at once`);
    expect(maxConcurrent(recovered)).toBeGreaterThanOrEqual(4);

    // No retry came earlier than the Retry-After of the 429 before it; without it, a first failure retries after 500 ms.
    const byDelivery = new Map<string, Seen[]>();
    for (const request of throttled.seen)
      byDelivery.set(request.deliveryId, [...(byDelivery.get(request.deliveryId) ?? []), request]);
    let retriesAfter429 = 0;
    for (const series of byDelivery.values()) {
      series.sort((a, b) => a.attempt - b.attempt);
      for (let i = 1; i < series.length; i += 1) {
        const previous = series[i - 1]!;
        expect(series[i]!.attempt).toBe(previous.attempt + 1);
        if (previous.status !== 429) continue;
        retriesAfter429 += 1;
        expect(series[i]!.at - previous.answeredAt).toBeGreaterThanOrEqual(1_000);
      }
    }
    expect(retriesAfter429).toBeGreaterThan(30);
  });

  it('a 503 whose Retry-After (an HTTP date) lies past every tier is retried no earlier than that date, and only then', async () => {
    const tenantId = `tenant-${randomUUID().slice(0, 8)}`;
    const seen: { at: number; attempt: number }[] = [];
    let notBefore = 0;
    const server = createServer((request, response) => {
      seen.push({ at: Date.now(), attempt: Number(request.headers['x-webhook-attempt']) });
      request.resume();
      request.on('end', () => {
        if (seen.length > 1) return void response.writeHead(204).end();
        // A whole second at least 4 s ahead: longer than the longest tier (2 s), in the HTTP-date form.
        notBefore = Math.ceil((Date.now() + 4_000) / 1_000) * 1_000;
        response.writeHead(503, { 'retry-after': new Date(notBefore).toUTCString() }).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    closers.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
    await subscribe(tenantId, url, ['purchaseOrder.validated']);
    await new Promise((resolve) => setTimeout(resolve, 400));
    const [eventId] = await events.publish([{ tenantId, eventType: 'purchaseOrder.validated' }]);

    await waitFor(() => seen.length >= 1, 'the first attempt', 30_000);
    const cells = (
      await db.execute('SELECT deliveries FROM events WHERE tenant_id = ? AND event_id = ?', [tenantId, eventId])
    ).first()?.deliveries as Record<string, Date> | undefined;
    const deliveryId = Object.keys(cells ?? {})[0]!;
    const row = await waitFor(async () => {
      const found = (
        await db.execute('SELECT status, next_retry_at FROM deliveries WHERE tenant_id = ? AND id = ?', [
          tenantId,
          deliveryId,
        ])
      ).rows[0];
      return found?.status === 'retrying' ? found : undefined;
    }, 'the delivery to be retrying');
    // The history announces the retry at the date asked, not at a tier's due time.
    expect((row.next_retry_at as Date).getTime()).toBe(notBefore);
    await waitFor(() => seen.length >= 2, 'the retry', 30_000);
    expect(seen[1]!.attempt).toBe(2);
    expect(seen[1]!.at).toBeGreaterThanOrEqual(notBefore);
    // Held through the 2 s tier and beyond without an attempt: two requests in all, the second acknowledged.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(seen).toHaveLength(2);
  });
});
