// The receiver kit (sdk/) against the running system: a real purchaseOrder.validated, raised through the purchase API,
// routed, signed and posted by the real router and dispatcher (Kafka, Cassandra, schema registry), is verified and
// typed by the kit's example receiver; the same bytes tampered, or another secret, are refused with 401; a replay
// (new delivery id, same event id) is acknowledged and kept once.
import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EnvelopeFields as ServiceEnvelopeFields } from '../../core/envelope.ts';
import type { PurchaseOrderDTO as ServiceDTO } from '../../producer/purchase-order.ts';
import { MemoryInbox, type ReceivedEvent } from '../../sdk/examples/memory-inbox.ts';
import { createReceiver, type ReceiverLogEntry } from '../../sdk/examples/receiver.ts';
import { signWebhook, type EnvelopeFields, type PurchaseOrderDTO } from '../../sdk/src/index.ts';
import { waitFor } from '../support/harness.ts';
import { startPipeline, type Answer } from '../support/pipeline.ts';

/** True when A and B are the same type, optional fields and readonly included; else assigning `true` fails `tsc`. */
type Same<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
// The kit copies the service's types (it may import nothing outside sdk/): a field added, removed or retyped on
// either side fails the type check of this file.
const dtoMatches: Same<PurchaseOrderDTO, ServiceDTO> = true;
const envelopeFieldsMatch: Same<EnvelopeFields, ServiceEnvelopeFields> = true;

/** The kit's example receiver on 127.0.0.1 (port 0), recording what it logged and processed. */
async function kitReceiver(options: { secrets: string | string[]; signatureHeader?: string }) {
  const logs: ReceiverLogEntry[] = [];
  const processed: ReceivedEvent[] = [];
  const inbox = new MemoryInbox();
  const server: Server = createReceiver({
    ...options,
    inbox,
    log: (entry) => logs.push(entry),
    onEvent: (event) => void processed.push(event),
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
  return { url, logs, processed, inbox, close: () => new Promise((resolve) => server.close(resolve)) };
}

describe('receiver kit on real deliveries', () => {
  let pipeline: Awaited<ReturnType<typeof startPipeline>>;
  const receivers: { close(): Promise<unknown> }[] = [];

  beforeAll(async () => {
    pipeline = await startPipeline('kit');
  });

  afterAll(async () => {
    await pipeline?.stop();
    await Promise.all(receivers.map((receiver) => receiver.close()));
  });

  const api = (method: string, path: string, body?: unknown) => pipeline.api(method, path, body);
  const json = <T>(answer: Answer, status: number): T => pipeline.json<T>(answer, status);

  /** Creates a subscription (retrying until the catalogue has reached the webhook API). */
  const subscribe = (body: Record<string, unknown>) =>
    waitFor(async () => {
      const created = await api('POST', '/CoreWebhook/REST/Webhooks/Subscriptions', {
        eventTypes: ['purchaseOrder.*'],
        authenticationMode: 'Hmac',
        ...body,
      });
      return created.status === 201
        ? (JSON.parse(created.text) as { id: string; hmacSecret: string; signatureHeaderName: string })
        : undefined;
    }, 'the subscription to be created');

  const deliveriesOf = async (subscriptionId: string) =>
    json<{ items: { id: string; eventId: string; status: string; lastStatusCode: number | null }[] }>(
      await api('GET', `/CoreWebhook/REST/Webhooks/Deliveries?subscriptionId=${subscriptionId}`),
      200,
    ).items;

  it('verifies a real delivery, refuses it tampered or under another secret, and keeps one event on a replay', async () => {
    expect([dtoMatches, envelopeFieldsMatch]).toEqual([true, true]);

    // An integrator subscribes, gets the generated secret once, then deploys the receiver with it and points the
    // subscription at it.
    const subscription = await subscribe({ url: 'http://127.0.0.1:9/hooks' });
    expect(subscription.hmacSecret).toMatch(/^[A-Za-z0-9+/]{43}=$/); // looks like base64; used as text, not decoded
    const kit = await kitReceiver({ secrets: subscription.hmacSecret });
    receivers.push(kit);
    json(await api('PATCH', `/CoreWebhook/REST/Webhooks/Subscriptions/${subscription.id}`, { url: kit.url }), 200);

    // A receiver holding another secret, on a subscription with its own signature header name.
    const stranger = await kitReceiver({
      secrets: 'not-the-secret-of-this-subscription',
      signatureHeader: 'X-Acme-Sig',
    });
    receivers.push(stranger);
    const strangers = await subscribe({ url: stranger.url, signatureHeaderName: 'X-Acme-Sig' });
    expect(strangers.signatureHeaderName).toBe('X-Acme-Sig');
    await new Promise((resolve) => setTimeout(resolve, 400)); // two router cache periods: both subscriptions seen

    // A real event: an order with non-ASCII text, validated through the purchase API.
    const item = json<{ id: string }>(
      await api('POST', '/CorePurchase/REST/Items', { code: 'BOLT-½', name: 'Boulon “inox” 🚀', unitPrice: '0.125' }),
      201,
    );
    const order = json<{ id: string }>(
      await api('POST', '/CorePurchase/REST/PurchaseOrders', {
        supplierName: 'Société Acme',
        currency: 'EUR',
        rows: [{ itemId: item.id, quantity: '3', description: 'é' }],
      }),
      201,
    );
    const validated = await api('POST', `/CorePurchase/REST/PurchaseOrders/${order.id}/validate`);
    const dto = json<ServiceDTO>(validated, 200);

    // The kit verified it (it is processed only once verified) and typed it.
    const event = await waitFor(() => kit.processed[0], 'the kit to verify the delivery', 60_000);
    const { envelope } = event;
    if (envelope.eventType !== 'purchaseOrder.validated' || envelope.payloadOmitted) {
      throw new Error(`expected an embedded purchaseOrder.validated, got ${event.rawBody.toString('utf8')}`);
    }
    const reference: string = envelope.reference; // validated: the reference is a string
    const firstRow = envelope.payload.rows[0]!;
    const amounts: string[] = [firstRow.quantity, firstRow.unitPrice, firstRow.amount, envelope.payload.totalAmount];
    expect({ reference, amounts, status: envelope.payload.status }).toEqual({
      reference: dto.reference,
      amounts: ['3', '0.125', '0.375', '0.375'],
      status: 'Validated',
    });
    expect(envelope.payload).toEqual(dto);
    expect(envelope).toMatchObject({
      entityId: order.id,
      subscriptionId: subscription.id,
      resourceUrl: `/CorePurchase/REST/PurchaseOrders/${order.id}`,
      payloadOmitted: false,
    });
    expect(envelope.payload.rows[0]!.itemName).toBe('Boulon “inox” 🚀');
    expect(event.rawBody.toString('utf8')).toContain(`"payload":${validated.text},"payloadOmitted":false}`);
    expect(event).toMatchObject({ attempt: 1, test: false });
    expect(kit.logs[0]).toMatchObject({ outcome: 'accepted', status: 202, eventId: envelope.eventId, attempt: 1 });
    const [delivery] = await deliveriesOf(subscription.id);
    expect(delivery).toMatchObject({ id: event.deliveryId, eventId: envelope.eventId });

    // The receiver holding another secret refused the same event with 401, found under the custom header name, and
    // the service recorded the 401 and keeps retrying.
    await waitFor(() => stranger.logs[0], 'the other receiver to be called', 60_000);
    expect(stranger.logs[0]).toMatchObject({ outcome: 'refused', status: 401, code: 'invalid_signature' });
    expect(stranger.processed).toHaveLength(0);
    const refused = await waitFor(
      async () => (await deliveriesOf(strangers.id)).find((row) => row.lastStatusCode === 401),
      'the 401 to be recorded',
    );
    expect(refused).toMatchObject({ eventId: envelope.eventId, status: 'retrying' });

    // The delivery's own bytes, sent again: one byte changed is refused; another secret is refused; the exact bytes
    // with the service's signature (HMAC is deterministic: the one the kit accepted) are a duplicate.
    const headers = {
      'content-type': 'application/json',
      'x-webhook-event-id': envelope.eventId,
      'x-webhook-delivery-id': event.deliveryId!,
      'x-webhook-attempt': '1',
      'x-webhook-signature': signWebhook(subscription.hmacSecret, event.rawBody),
    };
    const tampered = Buffer.from(event.rawBody);
    const at = tampered.indexOf('"totalAmount":"0.375"') + '"totalAmount":"0.'.length;
    tampered.write('9', at); // 0.375 → 0.975
    const post = async (body: Buffer, extra: Record<string, string> = {}) =>
      (await fetch(kit.url, { method: 'POST', headers: { ...headers, ...extra }, body: Uint8Array.from(body) })).status;
    expect(await post(tampered)).toBe(401);
    const otherSecret = signWebhook(randomBytes(32).toString('base64'), event.rawBody);
    expect(await post(event.rawBody, { 'x-webhook-signature': otherSecret })).toBe(401);
    expect(await post(event.rawBody)).toBe(200);
    const answered = kit.logs.filter((entry) => entry.outcome === 'refused' || entry.outcome === 'duplicate');
    expect(answered.map((entry) => [entry.outcome, entry.status, entry.code])).toEqual([
      ['refused', 401, 'invalid_signature'],
      ['refused', 401, 'invalid_signature'],
      ['duplicate', 200, undefined],
    ]);

    // A replay: a new delivery id, the same event id, body and signature; acknowledged, and kept once.
    const acknowledged = await waitFor(
      async () => (await deliveriesOf(subscription.id)).find((row) => row.status === 'acknowledged'),
      'the delivery to be acknowledged',
    );
    const replay = json<{ id: string; eventId: string }>(
      await api('POST', `/CoreWebhook/REST/Webhooks/Deliveries/${acknowledged.id}/replay`),
      202,
    );
    expect(replay.id).not.toBe(acknowledged.id);
    expect(replay.eventId).toBe(envelope.eventId);
    const replayed = await waitFor(
      () => kit.logs.find((entry) => entry.deliveryId === replay.id),
      'the replay to reach the receiver',
      60_000,
    );
    expect(replayed).toMatchObject({ outcome: 'duplicate', status: 200, eventId: envelope.eventId, attempt: 1 });
    await waitFor(
      async () =>
        (await deliveriesOf(subscription.id)).find((row) => row.id === replay.id && row.status === 'acknowledged'),
      'the replay to be acknowledged',
    );
    expect(kit.processed).toHaveLength(1);
    expect([...kit.inbox.events.keys()]).toEqual([envelope.eventId]);
  });
});
