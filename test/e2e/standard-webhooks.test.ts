// authenticationMode StandardWebhooks on real deliveries: a purchaseOrder.validated raised through the purchase API,
// routed and posted by the real router and dispatcher, carries webhook-id, webhook-timestamp and webhook-signature,
// which the official Standard Webhooks libraries verify (npm `standardwebhooks`, and PyPI `standardwebhooks` in a
// venv); the same capture replayed past their tolerance, or tampered, is refused by both; after a rotation both the
// new and the previous secret verify the next delivery.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { waitFor } from '../support/harness.ts';
import { startPipeline, type Answer } from '../support/pipeline.ts';
import { verifyWithPython } from '../support/python-verifier.ts';

interface Capture {
  headers: Record<string, string>;
  body: Buffer;
}

/** A receiver on 127.0.0.1 that answers 204 and keeps each request's headers and raw body. */
async function capturingReceiver() {
  const captures: Capture[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      captures.push({ headers: flat(request.headers), body: Buffer.concat(chunks) });
      response.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
  return { url, captures, close: () => new Promise((resolve) => server.close(resolve)) };
}

const flat = (headers: IncomingHttpHeaders): Record<string, string> =>
  Object.fromEntries(Object.entries(headers).map(([name, value]) => [name, String(value)]));

/** What the npm library says of a capture, verified `laterSeconds` after now. */
function verifyWithNpm(secret: string, capture: Capture, laterSeconds = 0): string {
  if (laterSeconds > 0) vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + laterSeconds * 1000 });
  try {
    const envelope = new Webhook(secret).verify(capture.body, capture.headers) as { eventId: string };
    return `ok ${envelope.eventId}`;
  } catch (error) {
    return `refused: ${(error as Error).message}`;
  } finally {
    vi.useRealTimers();
  }
}

describe('authenticationMode StandardWebhooks on real deliveries', () => {
  let pipeline: Awaited<ReturnType<typeof startPipeline>>;
  let receiver: Awaited<ReturnType<typeof capturingReceiver>>;

  beforeAll(async () => {
    pipeline = await startPipeline('stdwh');
    receiver = await capturingReceiver();
  });

  afterAll(async () => {
    await pipeline?.stop();
    await receiver?.close();
  });

  const api = (method: string, path: string, body?: unknown) => pipeline.api(method, path, body);
  const json = <T>(answer: Answer, status: number): T => pipeline.json<T>(answer, status);

  /** Validates a new purchase order through the purchase API: one purchaseOrder.validated event. */
  const validateOrder = async () => {
    const item = json<{ id: string }>(
      await api('POST', '/CorePurchase/REST/Items', {
        code: `B-${randomUUID().slice(0, 6)}`,
        name: 'Boulon “inox”',
        unitPrice: '0.125',
      }),
      201,
    );
    const order = json<{ id: string }>(
      await api('POST', '/CorePurchase/REST/PurchaseOrders', {
        supplierName: 'Société Acme',
        currency: 'EUR',
        rows: [{ itemId: item.id, quantity: '3' }],
      }),
      201,
    );
    json(await api('POST', `/CorePurchase/REST/PurchaseOrders/${order.id}/validate`), 200);
  };

  it('signs real deliveries as the official libraries verify them, refuses replays past the tolerance, and rotates', async () => {
    const subscription = await waitFor(async () => {
      const created = await api('POST', '/CoreWebhook/REST/Webhooks/Subscriptions', {
        url: receiver.url,
        eventTypes: ['purchaseOrder.validated'],
        authenticationMode: 'StandardWebhooks',
      });
      return created.status === 201 ? (JSON.parse(created.text) as { id: string; hmacSecret: string }) : undefined;
    }, 'the subscription to be created');
    expect(subscription.hmacSecret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    await new Promise((resolve) => setTimeout(resolve, 400)); // two router cache periods: the subscription seen

    await validateOrder();
    const first = await waitFor(() => receiver.captures[0], 'the first delivery', 60_000);
    const eventId = first.headers['x-webhook-event-id']!;
    expect(first.headers).toMatchObject({ 'webhook-id': eventId, 'x-webhook-event-type': 'purchaseOrder.validated' });
    expect(Math.abs(Number(first.headers['webhook-timestamp']) - Date.now() / 1000)).toBeLessThan(60);
    expect(first.headers).not.toHaveProperty('x-webhook-signature');
    expect(first.headers).not.toHaveProperty('traceparent'); // tracing is off unless configured

    const tampered = { ...first, body: Buffer.concat([first.body, Buffer.from(' ')]) }; // one byte more
    expect([
      verifyWithNpm(subscription.hmacSecret, first),
      verifyWithNpm(subscription.hmacSecret, first, 600),
      verifyWithNpm(subscription.hmacSecret, tampered),
    ]).toEqual([`ok ${eventId}`, 'refused: Message timestamp too old', 'refused: No matching signature found']);
    const python = await verifyWithPython([
      { secret: subscription.hmacSecret, ...first },
      { secret: subscription.hmacSecret, ...first, laterSeconds: 600 },
      { secret: subscription.hmacSecret, ...tampered },
    ]);
    expect(python).toEqual([
      { ok: true, eventId },
      { ok: false, error: 'WebhookVerificationError: Message timestamp too old' },
      { ok: false, error: 'WebhookVerificationError: No matching signature found' },
    ]);

    // A rotation: the next delivery is signed with both secrets, so a receiver still on the previous one verifies it.
    const { hmacSecret: rotated } = json<{ hmacSecret: string }>(
      await api('POST', `/CoreWebhook/REST/Webhooks/Subscriptions/${subscription.id}/secret/rotate`),
      200,
    );
    expect(rotated).toMatch(/^whsec_/);
    expect(rotated).not.toBe(subscription.hmacSecret);
    await new Promise((resolve) => setTimeout(resolve, 400)); // the dispatcher's cache sees the new secrets
    await validateOrder();
    const second = await waitFor(() => receiver.captures[1], 'the delivery after the rotation', 60_000);
    const secondId = second.headers['x-webhook-event-id']!;
    expect(second.headers['webhook-signature']!.split(' ')).toHaveLength(2);
    expect([verifyWithNpm(rotated, second), verifyWithNpm(subscription.hmacSecret, second)]).toEqual([
      `ok ${secondId}`,
      `ok ${secondId}`,
    ]);
    expect(
      await verifyWithPython([
        { secret: rotated, ...second },
        { secret: subscription.hmacSecret, ...second },
      ]),
    ).toEqual([
      { ok: true, eventId: secondId },
      { ok: true, eventId: secondId },
    ]);
  });
});
