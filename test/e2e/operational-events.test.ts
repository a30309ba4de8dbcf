// Operational events on the real path, with shortened timings: a tenant's subscription to `subscription.*` and
// `delivery.abandoned` receives what the service raises about the tenant's other subscriptions (created, failing,
// abandoned, recovered, updated, disabled, deleted), each delivered like any event (signed, in the history) and each
// payload valid against the schema the catalogue declares for its type. Deliveries of operational events raise no
// failing, recovered or abandoned themselves (a subscription to them whose endpoint fails is only disabled in the
// end), a second failing within the hour is kept quiet, and a `*.*` subscription receives business events only.
import { createHmac } from 'node:crypto';
import { Ajv2020 } from 'ajv/dist/2020.js';
import formats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventPublisher } from '../support/events.ts';
import { startReceiver, waitFor, type ReceivedRequest } from '../support/harness.ts';
import { startPipeline } from '../support/pipeline.ts';

interface Envelope {
  eventId: string;
  eventType: string;
  entityId: string;
  resourceUrl: string;
  subscriptionId: string;
  payload: Record<string, unknown> & { subscription?: { id: string }; subscriptionId?: string };
}

describe('operational events', () => {
  let pipeline: Awaited<ReturnType<typeof startPipeline>>;
  let events: Awaited<ReturnType<typeof eventPublisher>>;
  let tenantId: string;
  const receivers: Awaited<ReturnType<typeof startReceiver>>[] = [];

  beforeAll(async () => {
    pipeline = await startPipeline('ops', {
      WEBHOOK_RETRY_DELAYS: '1s,2s',
      WEBHOOK_DELIVERY_LIFETIME: '4s',
      WEBHOOK_FAILURE_DAY: '3s',
      WEBHOOK_AUTO_DISABLE_AFTER_DAYS: '2',
    });
    tenantId = pipeline.tenantId;
    events = await eventPublisher(pipeline.env);
  });

  afterAll(async () => {
    await pipeline?.stop();
    await events?.close();
    await Promise.all(receivers.map((receiver) => receiver.close()));
  });

  const api = async (method: string, path: string, body?: unknown) => {
    const answer = await pipeline.api(method, `/CoreWebhook/REST/Webhooks${path}`, body);
    return { status: answer.status, body: answer.text ? (JSON.parse(answer.text) as Record<string, unknown>) : {} };
  };

  const receiver = async (respond?: (request: ReceivedRequest) => number) => {
    const started = await startReceiver(respond);
    receivers.push(started);
    return started;
  };

  const subscribe = async (url: string, eventTypes: string[], extra: Record<string, unknown> = {}) => {
    const created = await waitFor(async () => {
      const answer = await api('POST', '/Subscriptions', { url, eventTypes, ...extra });
      return answer.status === 201 ? answer.body : undefined;
    }, 'the subscription to be created');
    await new Promise((resolve) => setTimeout(resolve, 400)); // two router cache periods: the subscription seen
    return created as { id: string; hmacSecret?: string };
  };

  const envelopes = (received: ReceivedRequest[]) =>
    received.map((request) => JSON.parse(request.body.toString()) as Envelope);
  const about = (envelope: Envelope) => envelope.payload.subscription?.id ?? envelope.payload.subscriptionId;

  it('tells a subscribed tenant what happens to its subscriptions and deliveries, each payload as its schema says', async () => {
    const ops = await receiver();
    const opsSubscription = await subscribe(ops.url, ['subscription.*', 'delivery.abandoned'], {
      authenticationMode: 'Hmac',
    });
    // A subscription to operational events whose endpoint always fails: its own deliveries raise nothing.
    const broken = await receiver(() => 500);
    const brokenSubscription = await subscribe(broken.url, ['delivery.abandoned']);
    // Every business event, with `*.*`: no operational event reaches it.
    const all = await receiver();
    const allSubscription = await subscribe(all.url, ['*.*']);

    let answer = 500;
    const flaky = await receiver(() => answer);
    const flakySubscription = await subscribe(flaky.url, ['purchaseOrder.*']);
    const seen = (eventType: string, count = 1) =>
      waitFor(
        () => {
          const found = envelopes(ops.received).filter(
            (envelope) => envelope.eventType === eventType && about(envelope) === flakySubscription.id,
          );
          return found.length >= count ? found : undefined;
        },
        `${count} ${eventType} of the flaky subscription`,
        30_000,
      );

    const created = (await seen('subscription.created'))[0]!;
    expect(created).toMatchObject({
      entityId: flakySubscription.id,
      resourceUrl: `/CoreWebhook/REST/Webhooks/Subscriptions/${flakySubscription.id}`,
      subscriptionId: opsSubscription.id,
      payload: { subscription: { id: flakySubscription.id, url: flaky.url, status: 'enabled' } },
    });

    // Fails: failing at its first failed attempt, abandoned once its 4 s lifetime runs out (failure day 1 of 2).
    const [failedEventId] = await events.publish([{ tenantId, eventType: 'purchaseOrder.validated' }]);
    const failing = (await seen('subscription.failing'))[0]!;
    expect(failing.payload.failure).toMatchObject({ eventId: failedEventId, attempt: 1, statusCode: 500 });
    const abandoned = (await seen('delivery.abandoned'))[0]!;
    expect(abandoned.payload).toMatchObject({
      eventId: failedEventId,
      eventType: 'purchaseOrder.validated',
      reason: expect.stringMatching(/lifetime|retries/),
      lastAttempt: { statusCode: 500 },
      suppressed: 0,
    });

    // Answers again: recovered, with when it started failing.
    answer = 204;
    await events.publish([{ tenantId, eventType: 'purchaseOrder.validated' }]);
    const recovered = (await seen('subscription.recovered'))[0]!;
    expect(recovered.payload).toMatchObject({ failingSince: failing.payload.failingSince });

    // An update names what changed.
    expect((await api('PATCH', `/Subscriptions/${flakySubscription.id}`, { description: 'ERP' })).status).toBe(200);
    const updated = (await seen('subscription.updated'))[0]!;
    expect(updated.payload).toMatchObject({ changes: ['description'], subscription: { description: 'ERP' } });

    // Fails again on two failure days (3 s windows): disabled. Its going failing again within the hour is quiet.
    answer = 500;
    await events.publish([{ tenantId, eventType: 'purchaseOrder.validated' }]);
    await seen('delivery.abandoned', 2);
    await events.publish([{ tenantId, eventType: 'purchaseOrder.validated' }]);
    const disabled = (await seen('subscription.disabled'))[0]!;
    expect(disabled.payload).toMatchObject({ failureDays: 2, subscription: { status: 'disabled' } });

    expect((await api('DELETE', `/Subscriptions/${flakySubscription.id}`)).status).toBe(204);
    await seen('subscription.deleted');

    // The broken subscription's deliveries of delivery.abandoned were themselves abandoned and raised neither a
    // delivery.abandoned nor a subscription.failing. (Their failure days count like any, the endpoint fails: it may
    // be disabled by now, and that is announced once.)
    const brokenHistory = await waitFor(
      async () => {
        const items = (await api('GET', `/Deliveries?subscriptionId=${brokenSubscription.id}`)).body.items as {
          status: string;
          attemptCount: number;
        }[];
        return items.length > 0 && items.every((item) => item.status === 'abandoned') ? items : undefined;
      },
      // Of the three delivery.abandoned: those routed before it was disabled, if it was.
      "the broken subscription's deliveries to be abandoned",
      30_000,
    );
    expect(brokenHistory.some((item) => item.attemptCount > 1)).toBe(true); // retried like any delivery
    const received = envelopes(ops.received);
    const aboutBroken = received.filter((envelope) => about(envelope) === brokenSubscription.id);
    expect(aboutBroken.map((envelope) => envelope.eventType)).toEqual(expect.arrayContaining(['subscription.created']));
    expect(
      aboutBroken.filter((envelope) => !['subscription.created', 'subscription.disabled'].includes(envelope.eventType)),
    ).toEqual([]);
    expect(received.filter((envelope) => envelope.eventType === 'subscription.failing')).toHaveLength(1);
    expect(envelopes(all.received).every((envelope) => envelope.eventType.startsWith('purchaseOrder.'))).toBe(true);
    expect(envelopes(all.received).length).toBeGreaterThanOrEqual(4);

    // Each payload valid against its catalogue schema; each request signed; each in the history.
    const ajv = new Ajv2020({ strict: false });
    formats.default(ajv);
    for (const envelope of received) {
      const type = await api('GET', `/EventTypes/${envelope.eventType}`);
      expect(type.status).toBe(200);
      const validate = ajv.compile(type.body.payloadSchema as object);
      expect(validate(envelope.payload), `${envelope.eventType}: ${JSON.stringify(validate.errors)}`).toBe(true);
    }
    for (const request of ops.received) {
      const expected = createHmac('sha256', opsSubscription.hmacSecret!).update(request.body).digest('base64');
      expect(request.headers['x-webhook-signature']).toBe(expected);
    }
    const history = (await api('GET', `/Deliveries?subscriptionId=${opsSubscription.id}`)).body.items as {
      eventType: string;
    }[];
    expect(new Set(history.map((item) => item.eventType))).toEqual(
      new Set([
        'subscription.created',
        'subscription.failing',
        'delivery.abandoned',
        'subscription.recovered',
        'subscription.updated',
        'subscription.disabled',
        'subscription.deleted',
      ]),
    );
    expect(allSubscription.id).toBeDefined();
  }, 120_000);
});
