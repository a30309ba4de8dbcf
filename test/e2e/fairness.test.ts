// Fairness between tenants on the real path: one tenant's backlog of deliveries to hanging endpoints must not delay
// another tenant's first delivery (issue 27, parts 3 and 4). The dispatcher is given 20 slots so that the backlog
// outnumbers them within a second of test.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../support/harness.ts';
import { startStack, type Stack } from '../support/stack.ts';

describe('fairness between tenants', () => {
  let stack: Stack;
  const tenants = { busy: '', quiet: '' };
  const tokens = new Map<string, string>();

  beforeAll(async () => {
    stack = await startStack('fair', { DISPATCHER_MAX_IN_FLIGHT: '20' });
    tenants.busy = `tenant-busy-${stack.run}`;
    tenants.quiet = `tenant-quiet-${stack.run}`;
    for (const tenant of Object.values(tenants)) tokens.set(tenant, await stack.tokenFor(tenant));
  });

  afterAll(async () => {
    await stack?.close();
  });

  const subscribe = async (tenant: string, url: string) =>
    waitFor(async () => {
      const answer = await fetch(`${stack.base}/CoreWebhook/REST/Webhooks/Subscriptions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${tokens.get(tenant)}`, 'content-type': 'application/json' },
        body: JSON.stringify({ url, eventTypes: ['purchaseOrder.*'] }),
      });
      return answer.status === 201;
    }, 'the subscription to be created');

  it("delivers a quiet tenant's first event at once while a busy tenant's backlog hangs on its endpoints", async () => {
    // The busy tenant: three subscriptions to an endpoint that does not answer (within the 30 s attempt timeout),
    // 60 events (180 deliveries). Their lanes let 60 attempts start (20 each), three times the dispatcher's 20 slots.
    let answer: () => void = () => undefined;
    const hangUp = new Promise<void>((resolve) => (answer = resolve));
    const hanging = await stack.receiver(async () => {
      await hangUp;
      return 503;
    });
    const fast = await stack.receiver();
    const open = () => hanging.received.length;
    for (let index = 0; index < 3; index += 1) await subscribe(tenants.busy, hanging.url);
    await subscribe(tenants.quiet, fast.url);
    await new Promise((resolve) => setTimeout(resolve, 300)); // the router's subscription cache

    await stack.events.publish(
      Array.from({ length: 60 }, () => ({ tenantId: tenants.busy, eventType: 'purchaseOrder.validated' })),
    );
    // The backlog has taken hold: the endpoint holds as many requests as the dispatcher has slots.
    await waitFor(() => open() >= 20, 'the hanging endpoint to hold 20 requests', 20_000);
    try {
      const sent = Date.now();
      await stack.events.publish([{ tenantId: tenants.quiet, eventType: 'purchaseOrder.validated' }]);
      // Before slots were shared in turn and given back while waiting on a receiver, this waited for the hanging
      // requests' timeout (30 s), behind them.
      await waitFor(() => fast.received.length === 1, "the quiet tenant's delivery", 10_000);
      expect(fast.received[0]!.at - sent).toBeLessThan(10_000);
      // Waiting on a receiver holds no slot: the busy tenant's lanes have more requests open than there are slots.
      await waitFor(() => open() > 20, 'more hanging requests than slots', 10_000);
      expect(open()).toBeLessThanOrEqual(60); // and no more than their lanes allow
    } finally {
      answer();
    }
  });
});
