// Subscription changes take effect at once (issue 28): once the API has answered a change, every event raised after
// the answer is routed and dispatched with it, while the tenant is busy (a steady stream keeps the router's and the
// dispatcher's caches warm with the state before the change).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signBody } from '../../core/envelope.ts';
import { waitFor, type ReceivedRequest } from '../support/harness.ts';
import { startStack, type Receiver, type Stack } from '../support/stack.ts';

/** The webhook API of `stack()` called with `token()`, and the helpers both blocks use. */
function webhookApi(stack: () => Stack, token: () => string, tenantId: () => string) {
  const api = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${stack().base}/CoreWebhook/REST/Webhooks${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token()}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: (text ? JSON.parse(text) : {}) as Record<string, unknown> };
  };
  return {
    api,
    /** Creates a subscription, retrying only until the catalogue has reached the API; no wait after the answer. */
    subscribe: async (url: string, eventTypes: string[], extra: Record<string, unknown> = {}) =>
      (await waitFor(async () => {
        const answer = await api('POST', '/Subscriptions', { url, eventTypes, ...extra });
        return answer.status === 201 ? answer.body : undefined;
      }, 'the subscription to be created')) as { id: string; hmacSecret?: string },
    cancel: async () =>
      (await stack().events.publish([{ tenantId: tenantId(), eventType: 'purchaseOrder.cancelled' }]))[0]!,
    deliveries: async (subscriptionId: string) =>
      (await api('GET', `/Deliveries?subscriptionId=${subscriptionId}`)).body.items as Record<string, unknown>[],
  };
}

describe('subscription changes take effect at once', () => {
  let stack: Stack;
  let token: string;
  let tenantId: string;
  let background: NodeJS.Timeout | undefined;
  let busy: Receiver;

  beforeAll(async () => {
    // The production cache time (1 s) would hide little here; a long one shows that no change waits for it. Two
    // routers and two dispatchers: each tenant's partition has one owner, which the marker reaches.
    stack = await startStack('changes', { WEBHOOK_SUBSCRIPTION_CACHE_TTL: '60s' }, [
      'gateway',
      'router',
      'router',
      'dispatcher',
      'dispatcher',
    ]);
    tenantId = `tenant-changes-${stack.run}`;
    token = await stack.tokenFor(tenantId);
    // The tenant is busy: a subscription receiving a validation every 50 ms, throughout.
    busy = await stack.receiver();
    await subscribe(busy.url, ['purchaseOrder.validated']);
    background = setInterval(
      () => void stack.events.publish([{ tenantId, eventType: 'purchaseOrder.validated' }]).catch(() => undefined),
      50,
    );
    await waitFor(() => busy.received.length >= 5, 'the background stream to flow', 30_000);
  });

  afterAll(async () => {
    clearInterval(background);
    await stack?.close();
  });

  const { api, subscribe, cancel, deliveries } = webhookApi(
    () => stack,
    () => token,
    () => tenantId,
  );
  /** Resolves once an event raised now has been delivered: the tenant's earlier events have been routed. */
  const routedPast = async () => {
    const [sentinel] = await stack.events.publish([{ tenantId, eventType: 'purchaseOrder.validated' }]);
    await waitFor(
      () => busy.received.some((request) => eventIdOf(request) === sentinel),
      'an event raised later to be delivered',
      30_000,
    );
  };
  const eventIdOf = (request: ReceivedRequest) => request.headers['x-webhook-event-id'];
  const subscriptionOf = (request: ReceivedRequest) => request.headers['x-webhook-subscription-id'];

  it('a filter set by PATCH applies from the next event: only the events it lets through are delivered', async () => {
    const target = await stack.receiver();
    const { id } = await subscribe(target.url, ['purchaseOrder.cancelled']);
    const order = (totalAmount: string) => JSON.stringify({ id: 'po-f', totalAmount, supplierName: 'Acme' });
    const raise = async (totalAmount: string) =>
      (
        await stack.events.publish([{ tenantId, eventType: 'purchaseOrder.cancelled', payload: order(totalAmount) }])
      )[0]!;
    const before = await raise('5.00');
    await waitFor(() => target.received.some((request) => eventIdOf(request) === before), 'the unfiltered event');
    const filtered = await api('PATCH', `/Subscriptions/${id}`, { filter: { 'payload.totalAmount': { $gte: 1000 } } });
    expect(filtered.status).toBe(200);
    const [small, large, exact, tiny] = [
      await raise('999.99'),
      await raise('12500.00'),
      await raise('1000'),
      await raise('7'),
    ];
    await waitFor(
      () => [large, exact].every((eventId) => target.received.some((request) => eventIdOf(request) === eventId)),
      'the events the filter lets through',
      30_000,
    );
    await routedPast();
    const received = target.received.map(eventIdOf);
    expect(received).not.toContain(small);
    expect(received).not.toContain(tiny);
    expect((await deliveries(id)).map((delivery) => delivery.eventId).sort()).toEqual([before, large, exact].sort());
  });

  it('a subscription created and then an event raised at once: 20 of 20 delivered, none abandoned', async () => {
    const target = await stack.receiver();
    const pairs: { subscriptionId: string; eventId: string }[] = [];
    for (let index = 0; index < 20; index += 1) {
      const { id } = await subscribe(target.url, ['purchaseOrder.cancelled']);
      pairs.push({ subscriptionId: id, eventId: await cancel() });
    }
    const got = (pair: (typeof pairs)[number]) =>
      target.received.some(
        (request) => subscriptionOf(request) === pair.subscriptionId && eventIdOf(request) === pair.eventId,
      );
    await waitFor(() => pairs.every(got), 'each new subscription to get the event raised after it', 30_000).catch(
      () => undefined,
    );
    expect(pairs.filter(got)).toHaveLength(20);
    for (const { subscriptionId } of pairs) {
      expect((await deliveries(subscriptionId)).filter((delivery) => delivery.status === 'abandoned')).toEqual([]);
    }
  });

  it('disabled, deleted, enabled again, moved to a new URL, its secret rotated: the next event follows each', async () => {
    const first = await stack.receiver();
    const second = await stack.receiver();
    const subscription = await subscribe(first.url, ['purchaseOrder.cancelled'], { authenticationMode: 'Hmac' });
    const doomed = await subscribe(first.url, ['purchaseOrder.cancelled']);
    const received = (target: Receiver, subscriptionId: string, eventId: string) =>
      target.received.filter((request) => subscriptionOf(request) === subscriptionId && eventIdOf(request) === eventId);
    const arrives = (target: Receiver, subscriptionId: string, eventId: string, what: string) =>
      waitFor(() => received(target, subscriptionId, eventId).length > 0, what, 30_000);

    // Warm: both known to the router and the dispatcher.
    const warm = await cancel();
    await arrives(first, subscription.id, warm, 'the first event');
    await arrives(first, doomed.id, warm, "the doomed subscription's first event");

    expect((await api('PATCH', `/Subscriptions/${subscription.id}/status`, { status: 'disabled' })).status).toBe(200);
    expect((await api('DELETE', `/Subscriptions/${doomed.id}`)).status).toBe(204);
    const whileDisabled = await cancel();
    // A router reads the subscriptions when it routes, not when the event was raised: enabling again before it has
    // routed that event would let the event through. Wait until an event raised after it has been delivered.
    await routedPast();
    expect((await api('PATCH', `/Subscriptions/${subscription.id}/status`, { status: 'enabled' })).status).toBe(200);
    const afterEnabled = await cancel();
    await arrives(first, subscription.id, afterEnabled, 'the event raised after re-enabling');
    expect(received(first, subscription.id, whileDisabled)).toEqual([]);
    expect(received(first, doomed.id, whileDisabled)).toEqual([]);
    expect(received(first, doomed.id, afterEnabled)).toEqual([]);

    expect((await api('PATCH', `/Subscriptions/${subscription.id}`, { url: second.url })).status).toBe(200);
    const afterMove = await cancel();
    await arrives(second, subscription.id, afterMove, 'the event raised after the URL change, at the new URL');
    expect(received(first, subscription.id, afterMove)).toEqual([]);

    const rotated = await api('POST', `/Subscriptions/${subscription.id}/secret/rotate`);
    expect(rotated.status).toBe(200);
    const afterRotation = await cancel();
    await arrives(second, subscription.id, afterRotation, 'the event raised after the rotation');
    const [request] = received(second, subscription.id, afterRotation);
    expect(request!.headers['x-webhook-signature']).toBe(signBody(rotated.body.hmacSecret as string, request!.body));
  });
});

// One dispatcher: the retry is handled by the dispatcher that made the first attempt, whose cache still holds the
// subscription as enabled (with two, the other one may not know it yet and read it afresh anyway).
describe('subscription changes reach deliveries already waiting for a retry', () => {
  let stack: Stack;
  let token: string;
  let tenantId: string;

  beforeAll(async () => {
    stack = await startStack('pending', { WEBHOOK_SUBSCRIPTION_CACHE_TTL: '60s', WEBHOOK_RETRY_DELAYS: '2s,4s' });
    tenantId = `tenant-pending-${stack.run}`;
    token = await stack.tokenFor(tenantId);
  });

  afterAll(async () => {
    await stack?.close();
  });

  const { api, subscribe, cancel, deliveries } = webhookApi(
    () => stack,
    () => token,
    () => tenantId,
  );

  it('a delivery waiting for its retry when its subscription is disabled is abandoned then, not attempted', async () => {
    let calls = 0;
    const flaky = await stack.receiver(() => (++calls === 1 ? 500 : 204));
    const subscription = await subscribe(flaky.url, ['purchaseOrder.cancelled']);
    await cancel();
    await waitFor(() => flaky.received.length === 1, 'the first attempt (answered 500)', 30_000);
    expect((await api('PATCH', `/Subscriptions/${subscription.id}/status`, { status: 'disabled' })).status).toBe(200);
    // Its retry is due 2 s after the first attempt: the dispatcher, told of the change, abandons it then.
    await waitFor(
      async () => (await deliveries(subscription.id)).some((delivery) => delivery.status === 'abandoned'),
      'the pending delivery to be abandoned',
      30_000,
    );
    expect(await deliveries(subscription.id)).toMatchObject([
      { status: 'abandoned', abandonReason: 'subscription disabled', attemptCount: 1 },
    ]);
    expect(flaky.received).toHaveLength(1);
  });
});
