import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { SECRET, deliveryHeaders, envelopeBody, validatedOrder } from '../test/fixtures.ts';
import { signWebhook } from '../src/verify.ts';
import { MemoryInbox, type ReceivedEvent } from './memory-inbox.ts';
import { createReceiver, type ReceiverLogEntry, type ReceiverOptions } from './receiver.ts';

const servers: Server[] = [];

afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => new Promise((resolve) => server.close(resolve))));
});

/** The example receiver on 127.0.0.1, port 0, with what it logged and handed to onEvent. */
async function start(options: Partial<ReceiverOptions> = {}) {
  const logs: ReceiverLogEntry[] = [];
  const processed: ReceivedEvent[] = [];
  const inbox = new MemoryInbox();
  const server = createReceiver({
    secrets: SECRET,
    inbox,
    log: (entry) => logs.push(entry),
    onEvent: (event) => void processed.push(event),
    ...options,
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
  const post = async (body: Buffer, headers: Record<string, string>, target = url) => {
    const response = await fetch(target, { method: 'POST', headers, body: Uint8Array.from(body) });
    return { status: response.status, text: await response.text() };
  };
  return { url, logs, processed, inbox, post };
}

/** Resolves once `probe` is true (polled; the receiver processes events after it has answered). */
async function until(probe: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 2_000;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const body = envelopeBody(validatedOrder);

describe('example receiver over HTTP', () => {
  it('answers 202 to a valid delivery and hands the typed envelope and raw bytes to onEvent', async () => {
    const receiver = await start();
    expect(await receiver.post(body, deliveryHeaders(body))).toEqual({ status: 202, text: '' });
    await until(() => receiver.processed.length === 1, 'the event to be processed');
    const [event] = receiver.processed as [ReceivedEvent];
    expect(event.rawBody.equals(body)).toBe(true);
    expect(event.deliveryId).toBe('9e8d7c6b-5a49-4838-a727-161504f3e2d1');
    expect(event.attempt).toBe(1);
    if (event.envelope.eventType !== 'purchaseOrder.validated' || event.envelope.payloadOmitted)
      throw new Error('type');
    expect(event.envelope.payload.totalAmount).toBe('12.500');
    expect(receiver.logs).toContainEqual(
      expect.objectContaining({ outcome: 'accepted', status: 202, eventId: event.envelope.eventId, attempt: 1 }),
    );
    expect(receiver.logs).toContainEqual(expect.objectContaining({ outcome: 'processed' }));
  });

  it('keeps one event when the same eventId comes again (a retry, or a replay with a new delivery id)', async () => {
    const receiver = await start();
    const headers = deliveryHeaders(body);
    expect((await receiver.post(body, headers)).status).toBe(202);
    const retry = { ...headers, 'x-webhook-attempt': '2' };
    const replay = { ...headers, 'x-webhook-delivery-id': 'a-new-delivery-id' };
    expect((await receiver.post(body, retry)).status).toBe(200);
    expect((await receiver.post(body, replay)).status).toBe(200);
    // Another event is new.
    const other = envelopeBody(validatedOrder, { eventId: 'another-event' });
    expect((await receiver.post(other, deliveryHeaders(other))).status).toBe(202);

    await until(() => receiver.processed.length === 2, 'two events to be processed');
    expect(receiver.processed.map((event) => event.envelope.eventId)).toEqual([
      '0b7c6f1e-3a52-4c1b-9d7e-2f4a6b8c0d1e',
      'another-event',
    ]);
    expect([...receiver.inbox.events.keys()]).toHaveLength(2);
    expect(receiver.logs.filter((entry) => entry.outcome === 'duplicate').map((entry) => entry.deliveryId)).toEqual([
      '9e8d7c6b-5a49-4838-a727-161504f3e2d1',
      'a-new-delivery-id',
    ]);
  });

  it('marks a test delivery (X-Webhook-Test: true) in the event and the log', async () => {
    const receiver = await start();
    const test = envelopeBody(validatedOrder, { eventId: 'test-event' });
    expect((await receiver.post(test, deliveryHeaders(test, SECRET, { 'x-webhook-test': 'true' }))).status).toBe(202);
    await until(() => receiver.processed.length === 1, 'the test event');
    expect(receiver.processed[0]!.test).toBe(true);
    expect(receiver.logs[0]).toMatchObject({ outcome: 'accepted', eventId: 'test-event', test: true });
  });

  it('answers 401 to a tampered body, a wrong secret or no signature, and processes none of them', async () => {
    const receiver = await start();
    const tampered = Buffer.from(body);
    const at = tampered.length - 3; // inside "false" of payloadOmitted
    tampered.writeUInt8(tampered.readUInt8(at) ^ 0x01, at);
    // Not JSON either: a 401, not a 400, shows the signature was checked before any parsing.
    const garbage = Buffer.from('{"eventId": oops');
    const { 'x-webhook-signature': _dropped, ...unsigned } = deliveryHeaders(body);
    const cases: [Buffer, Record<string, string>, string][] = [
      [tampered, deliveryHeaders(body), 'invalid_signature'],
      [body, deliveryHeaders(body, 'wrong-secret-0000000000'), 'invalid_signature'],
      [garbage, { 'x-webhook-signature': signWebhook(SECRET, body) }, 'invalid_signature'],
      [body, unsigned, 'missing_signature'],
    ];
    for (const [payload, headers, code] of cases) {
      expect(await receiver.post(payload, headers)).toEqual({ status: 401, text: `${code}\n` });
    }
    expect(receiver.logs.map((entry) => [entry.outcome, entry.status, entry.code])).toEqual(
      cases.map(([, , code]) => ['refused', 401, code]),
    );
    expect(receiver.inbox.events.size).toBe(0);
    // Then the genuine delivery is still accepted: nothing was recorded for the refused ones.
    expect((await receiver.post(body, deliveryHeaders(body))).status).toBe(202);
    await until(() => receiver.processed.length === 1, 'the genuine event');
  });

  it('verifies with the previous secret during a rotation and under a custom signature header', async () => {
    const receiver = await start({ secrets: ['the-new-secret-000000', SECRET], signatureHeader: 'X-Acme-Signature' });
    const headers = { 'x-acme-signature': signWebhook(SECRET, body) };
    expect((await receiver.post(body, headers)).status).toBe(202);
    expect((await receiver.post(body, deliveryHeaders(body))).status).toBe(401); // the default name is not read
  });

  it('answers 400 to a signed body that is not an envelope, 404 elsewhere, 405 to other methods, 413 when too big', async () => {
    const receiver = await start({ maxBodyBytes: 4096 });
    const notEnvelope = Buffer.from('{"hello":"world"}');
    expect(await receiver.post(notEnvelope, { 'x-webhook-signature': signWebhook(SECRET, notEnvelope) })).toEqual({
      status: 400,
      text: 'invalid_body\n',
    });
    expect((await receiver.post(body, deliveryHeaders(body), receiver.url.replace('/hooks', '/other'))).status).toBe(
      404,
    );
    const get = await fetch(receiver.url);
    expect([get.status, get.headers.get('allow')]).toEqual([405, 'POST']);
    const big = Buffer.alloc(10_000, 'x');
    expect((await receiver.post(big, { 'x-webhook-signature': signWebhook(SECRET, big) })).status).toBe(413);
    expect(receiver.logs.at(-1)).toMatchObject({ outcome: 'refused', status: 413, code: 'body_too_large' });
    expect(receiver.processed).toHaveLength(0);
  });

  it('answers 500 when the inbox fails, so the service retries, and logs a failing onEvent after a 202', async () => {
    const failing = await start({
      inbox: {
        add: () => {
          throw new Error('database down');
        },
      },
    });
    expect((await failing.post(body, deliveryHeaders(body))).status).toBe(500);
    expect(failing.logs.at(-1)).toMatchObject({ outcome: 'failed', status: 500, error: 'Error: database down' });

    const throwing = await start({
      onEvent: () => {
        throw new Error('handler bug');
      },
    });
    expect((await throwing.post(body, deliveryHeaders(body))).status).toBe(202);
    await until(() => throwing.logs.some((entry) => entry.outcome === 'failed'), 'the failure to be logged');
    expect(throwing.logs.at(-1)).toMatchObject({ outcome: 'failed', error: 'Error: handler bug' });
  });

  it('refuses to start without a secret', () => {
    expect(() => createReceiver({ secrets: [] })).toThrow(/No webhook secret was given/);
    expect(() => createReceiver({ secrets: '' })).toThrow(/No webhook secret was given/);
  });
});
