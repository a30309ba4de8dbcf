// Bulk replay on the real stack (gateway, router, dispatcher as processes; a real receiver): deliveries abandoned
// against a receiver answering 500 are replayed by one POST /Deliveries/replay once the receiver is fixed, each
// original event arriving exactly once more, as a new delivery with the same event, body and signature; a paced job is
// cancelled midway; a router killed mid-job and started again resumes it without sending any delivery twice.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import { deliveryIdFor } from '../../core/ids.ts';
import { createLogger } from '../../core/log.ts';
import { repoRoot } from '../../infra/processes.ts';
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

/** The lines of a service's test log (.local/logs/tests) that mention `text`. */
const logLines = (file: string, text: string): string[] => {
  try {
    return readFileSync(path.join(repoRoot, '.local', 'logs', 'tests', file), 'utf8')
      .split('\n')
      .filter((line) => line.includes(text));
  } catch (error) {
    return [`${file}: ${String(error)}`];
  }
};

type Receiver = Awaited<ReturnType<typeof startReceiver>>;
type Stack = Awaited<ReturnType<typeof startServices>>;

interface JobView {
  id: string;
  status: string;
  matched: number;
  queued: number;
  skipped: number;
  delivered: number;
  failed: number;
}

/** One tenant's world: a subscription (Hmac) whose receiver fails until fixed, and the events raised for it. */
interface Scenario {
  tenant: string;
  token: string;
  receiver: Receiver;
  fix(): void;
  subscriptionId: string;
  eventIds: string[];
}

/** Replays per job: REPLAY_RATE 5/s makes a job of 30 to 40 last 6 to 8 s, long enough to act on it midway. */
const RATE = 5;

describe('bulk replay', () => {
  let env: Record<string, string>;
  let idp: Awaited<ReturnType<typeof startIdentityProvider>>;
  let base: string;
  const stacks: Stack[] = [];
  let metricsPorts: { router: number; dispatcher: number };
  const scenarios = new Map<string, Scenario>();

  const api = async <T = Record<string, unknown>>(token: string, method: string, path: string, body?: unknown) => {
    const response = await fetch(`${base}/CoreWebhook/REST/Webhooks${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: (text ? JSON.parse(text) : {}) as T };
  };

  /** A tenant with a receiver failing until fixed, subscribed (Hmac) to every purchase-order event. */
  const scenario = async (name: string): Promise<Scenario> => {
    const tenant = `bulk-${name}-${randomUUID().slice(0, 8)}`;
    const token = await idp.token(await idp.client(tenant));
    let healthy = false;
    const receiver = await startReceiver(() => (healthy ? 204 : 500));
    const created = await waitFor(async () => {
      const answer = await api<{ id: string }>(token, 'POST', '/Subscriptions', {
        url: receiver.url,
        eventTypes: ['purchaseOrder.*'],
        authenticationMode: 'Hmac',
      });
      return answer.status === 201 ? answer.body : undefined;
    }, 'the subscription to be created');
    return {
      tenant,
      token,
      receiver,
      fix: () => (healthy = true),
      subscriptionId: created.id,
      eventIds: [],
    };
  };

  const job = async (s: Scenario, id: string) => (await api<JobView>(s.token, 'GET', `/ReplayJobs/${id}`)).body;

  /** The requests a receiver got for replays: those whose delivery id is not the original series' own. */
  const replays = (s: Scenario): ReceivedRequest[] =>
    s.receiver.received.filter(
      (request) =>
        request.headers['x-webhook-delivery-id'] !==
        deliveryIdFor(String(request.headers['x-webhook-event-id']), s.subscriptionId),
    );

  /** Replays by original event id: how many times each event arrived again. */
  const replaysByEvent = (s: Scenario) => {
    const counts = new Map<string, number>();
    for (const request of replays(s)) {
      const eventId = String(request.headers['x-webhook-event-id']);
      counts.set(eventId, (counts.get(eventId) ?? 0) + 1);
    }
    return counts;
  };

  beforeAll(async () => {
    env = {
      ...testEnv(),
      KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}bulk${randomUUID().slice(0, 8)}.`,
      WEBHOOK_RETRY_DELAYS: '1s',
      WEBHOOK_DELIVERY_LIFETIME: '5s',
      // Every original is attempted (the replays are compared with what the receiver got): no circuit breaker, which
      // would defer the deliveries of the failing receiver unsent.
      DISPATCHER_CIRCUIT_FAILURES: '0',
      WEBHOOK_ATTEMPT_TIMEOUT: '3s',
      WEBHOOK_SUBSCRIPTION_CACHE_TTL: '200ms',
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOWED_CIDRS: '127.0.0.1/32',
      REPLAY_RATE: String(RATE),
      REPLAY_POLL_INTERVAL: '300ms',
      REPLAY_LEASE: '3s',
    };
    await provision(loadConfig(env), createLogger('test', 'warn'));
    idp = await startIdentityProvider(env);
    base = `http://127.0.0.1:${await freePort()}`;
    Object.assign(env, { AUTH_URL: idp.url, GATEWAY_BASE_URL: base });
    metricsPorts = { router: await freePort(), dispatcher: await freePort() };
    stacks.push(
      await startServices(env, ['gateway', 'router', 'dispatcher'], {
        router: { METRICS_PORT: String(metricsPorts.router) },
        dispatcher: { METRICS_PORT: String(metricsPorts.dispatcher) },
      }),
    );
    for (const [name, count] of [
      ['main', 32],
      ['cancel', 40],
      ['restart', 30],
    ] as const) {
      scenarios.set(name, { ...(await scenario(name)), eventIds: new Array<string>(count).fill('') });
    }
    await new Promise((resolve) => setTimeout(resolve, 400)); // two router cache periods (DESIGN §10)
    const events = await eventPublisher(env);
    try {
      for (const s of scenarios.values()) {
        s.eventIds = await events.publish(
          s.eventIds.map(() => ({ tenantId: s.tenant, eventType: 'purchaseOrder.validated' })),
        );
      }
    } finally {
      await events.close();
    }
    // Every delivery abandoned at its 5 s lifetime, after a few attempts answered 500.
    for (const s of scenarios.values()) {
      let seen = 'nothing read yet';
      await waitFor(
        async () => {
          const page = await api<{ items: { status: string }[] }>(
            s.token,
            'GET',
            `/Deliveries?subscriptionId=${s.subscriptionId}&limit=500`,
          );
          const statuses = new Map<string, number>();
          for (const { status } of page.body.items) statuses.set(status, (statuses.get(status) ?? 0) + 1);
          seen = `${JSON.stringify(Object.fromEntries(statuses))}, ${s.receiver.received.length} requests received`;
          if (statuses.get('abandoned') !== s.eventIds.length) return false;
          // The status filter finds the same deliveries.
          const filtered = await api<{ items: unknown[] }>(
            s.token,
            'GET',
            `/Deliveries?subscriptionId=${s.subscriptionId}&status=abandoned&limit=500`,
          );
          return filtered.body.items.length === s.eventIds.length;
        },
        `the ${s.eventIds.length} deliveries of ${s.tenant} to be abandoned`,
        45_000,
      ).catch((error: Error) => {
        // What the services did for this tenant: the timeout alone says nothing of where the deliveries stopped.
        const lines = ['router', 'dispatcher'].flatMap((name) =>
          logLines(`${name}-${env.CASSANDRA_KEYSPACE}.log`, s.tenant)
            .slice(-8)
            .map((line) => line.slice(0, 400)),
        );
        throw new Error(`${error.message}; deliveries by status: ${seen}; last log lines:\n${lines.join('\n')}`);
      });
    }
  });

  afterAll(async () => {
    await Promise.all(stacks.map((stack) => stack.stop()));
    await Promise.all([...scenarios.values()].map((s) => s.receiver.close()));
    await idp?.close();
    await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  });

  it('replays every abandoned delivery once after the receiver is fixed: new id, same event, body and signature', async () => {
    const s = scenarios.get('main')!;
    const originals = new Map(s.receiver.received.map((request) => [request.headers['x-webhook-event-id'], request]));
    expect(replays(s)).toHaveLength(0);
    s.fix();
    const created = await api<JobView>(s.token, 'POST', '/Deliveries/replay', {
      subscriptionId: s.subscriptionId,
      status: 'abandoned',
    });
    expect(created.status).toBe(202);
    const started = Date.now();
    const done = await waitFor(
      async () => {
        const current = await job(s, created.body.id);
        return current.status === 'completed' && current.delivered === s.eventIds.length ? current : undefined;
      },
      'the job to complete with every replay delivered',
      60_000,
    );
    const n = s.eventIds.length;
    expect(done).toMatchObject({ matched: n, queued: n, skipped: 0, delivered: n, failed: 0 });

    await new Promise((resolve) => setTimeout(resolve, 1_000)); // nothing more comes
    const again = replaysByEvent(s);
    expect([...again.keys()].sort()).toEqual([...s.eventIds].sort());
    expect([...again.values()].every((count) => count === 1)).toBe(true);
    for (const request of replays(s)) {
      const original = originals.get(request.headers['x-webhook-event-id'])!;
      expect(request.headers['x-webhook-delivery-id']).not.toBe(original.headers['x-webhook-delivery-id']);
      expect(request.headers['x-webhook-attempt']).toBe('1');
      expect(request.headers['x-webhook-signature']).toBe(original.headers['x-webhook-signature']);
      expect(request.body.equals(original.body)).toBe(true);
    }
    // Paced: after a first page of 5, the other 27 at 5 per second take more than 5 s (a margin below: 4 s).
    const arrivals = replays(s).map((request) => request.at);
    expect(Math.max(...arrivals) - Math.min(...arrivals)).toBeGreaterThanOrEqual(4_000);
    expect(Math.min(...arrivals)).toBeGreaterThanOrEqual(started - 1_000);

    // Each replay is in the history as a new delivery of the same event, replayOf the original.
    const sample = replays(s)[0]!;
    const history = await api<Record<string, unknown>>(
      s.token,
      'GET',
      `/Deliveries/${String(sample.headers['x-webhook-delivery-id'])}`,
    );
    expect(history.body).toMatchObject({
      eventId: sample.headers['x-webhook-event-id'],
      replayOf: deliveryIdFor(String(sample.headers['x-webhook-event-id']), s.subscriptionId),
      status: 'acknowledged',
    });

    const router = await (await fetch(`http://127.0.0.1:${metricsPorts.router}/metrics`)).text();
    const dispatcher = await (await fetch(`http://127.0.0.1:${metricsPorts.dispatcher}/metrics`)).text();
    const counter = (text: string, stage: string) =>
      Number(new RegExp(`webhook_replay_deliveries_total\\{[^}]*stage="${stage}"[^}]*\\} (\\d+)`).exec(text)?.[1]);
    expect(counter(router, 'queued')).toBeGreaterThanOrEqual(n);
    expect(counter(router, 'matched')).toBeGreaterThanOrEqual(n);
    expect(counter(dispatcher, 'delivered')).toBeGreaterThanOrEqual(n);
    expect(router).toMatch(/webhook_replay_jobs_running\{[^}]*\} \d+/);
  });

  it('stops a paced job midway when it is cancelled', async () => {
    const s = scenarios.get('cancel')!;
    s.fix();
    const created = await api<JobView>(s.token, 'POST', '/Deliveries/replay', {
      subscriptionId: s.subscriptionId,
      status: 'abandoned',
    });
    expect(created.status).toBe(202);
    await waitFor(async () => (await job(s, created.body.id)).queued >= 10, 'ten replays queued', 30_000);
    const cancelled = await api<JobView>(s.token, 'POST', `/ReplayJobs/${created.body.id}/cancel`);
    expect(cancelled.status).toBe(200);
    expect(cancelled.body.status).toBe('cancelled');

    // Whatever was queued is delivered, and nothing more: at most the page being published when the cancel came.
    const settled = await waitFor(
      async () => {
        const current = await job(s, created.body.id);
        return current.delivered === current.queued && replays(s).length === current.queued ? current : undefined;
      },
      'the queued replays to be delivered',
      30_000,
    );
    await new Promise((resolve) => setTimeout(resolve, 2_000)); // a paced job would have queued 10 more by now
    const final = await job(s, created.body.id);
    expect(final).toMatchObject({ status: 'cancelled', queued: settled.queued });
    expect(final.queued).toBeLessThanOrEqual(cancelled.body.queued + RATE);
    expect(final.queued).toBeLessThan(s.eventIds.length);
    expect(replays(s)).toHaveLength(final.queued);
    expect(Math.max(...replaysByEvent(s).values())).toBe(1);
    const again = await api(s.token, 'POST', `/ReplayJobs/${created.body.id}/cancel`);
    expect(again.status).toBe(409);
  });

  it('resumes a job after its router is killed mid-job, sending no delivery twice', async () => {
    const s = scenarios.get('restart')!;
    s.fix();
    const created = await api<JobView>(s.token, 'POST', '/Deliveries/replay', {
      subscriptionId: s.subscriptionId,
      status: 'abandoned',
    });
    expect(created.status).toBe(202);
    await waitFor(async () => (await job(s, created.body.id)).queued >= 10, 'ten replays queued', 30_000);
    // Killed inside a page if it can be caught there: once the job's row says a page is being published (a page takes
    // some tens of milliseconds of a paced second), before its cursor moves on.
    const db = await connectCassandra(loadConfig(env));
    const pageStarted = async () =>
      (
        await db.execute('SELECT page_queued_at FROM replay_jobs WHERE tenant_id = ? AND id = ?', [
          s.tenant,
          created.body.id,
        ])
      ).first()?.page_queued_at instanceof Date;
    const router = stacks[0]!.services.find((service) => service.name === 'router')!;
    try {
      for (const deadline = Date.now() + 5_000; Date.now() < deadline && !(await pageStarted()););
      router.child.kill('SIGKILL');
      await router.exited;
      console.log(`router killed ${(await pageStarted()) ? 'inside a page' : 'between pages'}`);
    } finally {
      await db.shutdown();
    }
    const atKill = await job(s, created.body.id);
    expect(atKill.status).toBe('running');
    expect(atKill.queued).toBeLessThan(s.eventIds.length);

    stacks.push(await startServices(env, ['router']));
    const n = s.eventIds.length;
    const done = await waitFor(
      async () => {
        const current = await job(s, created.body.id);
        return current.status === 'completed' && current.delivered >= n ? current : undefined;
      },
      'the resumed job to complete with every replay delivered',
      60_000,
    );
    await new Promise((resolve) => setTimeout(resolve, 1_000)); // nothing more comes
    expect(done).toMatchObject({ matched: n, queued: n, skipped: 0, delivered: n, failed: 0 });
    const again = replaysByEvent(s);
    expect([...again.keys()].sort()).toEqual([...s.eventIds].sort());
    expect([...again.entries()].filter(([, count]) => count !== 1)).toEqual([]);
  });
});
