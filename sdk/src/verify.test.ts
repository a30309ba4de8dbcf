import crypto from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SECRET, deliveryHeaders, envelopeBody, validatedOrder } from '../test/fixtures.ts';
import { WebhookVerificationError, type WebhookVerificationErrorCode } from './errors.ts';
import type { PurchaseOrderEnvelope } from './types.ts';
import { signWebhook, verifyWebhook } from './verify.ts';

const body = envelopeBody(validatedOrder);
const headers = deliveryHeaders(body);

/** The code of the WebhookVerificationError `run` throws (fails the test if it throws anything else or nothing). */
function refusal(run: () => unknown): WebhookVerificationErrorCode {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(WebhookVerificationError);
    return (error as WebhookVerificationError).code;
  }
  throw new Error('expected a WebhookVerificationError, got none');
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('signWebhook', () => {
  it('is base64 of HMAC-SHA256 keyed by the secret as UTF-8 (RFC 4231 test case 2)', () => {
    const hex = '5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843';
    expect(signWebhook('Jefe', 'what do ya want for nothing?')).toBe(Buffer.from(hex, 'hex').toString('base64'));
  });

  it('takes a non-ASCII secret as its UTF-8 bytes, never base64-decoded', () => {
    const expected = crypto.createHmac('sha256', Buffer.from('clé-ß', 'utf8')).update(body).digest('base64');
    expect(signWebhook('clé-ß', body)).toBe(expected);
    const decodedKey = crypto.createHmac('sha256', Buffer.from(SECRET, 'base64')).update(body).digest('base64');
    expect(signWebhook(SECRET, body)).not.toBe(decodedKey);
  });
});

describe('verifyWebhook', () => {
  it('returns the typed envelope of a valid delivery', () => {
    const envelope = verifyWebhook({ headers, rawBody: body, secrets: SECRET });
    expect(envelope.eventType).toBe('purchaseOrder.validated');
    if (envelope.eventType !== 'purchaseOrder.validated' || envelope.payloadOmitted) throw new Error('narrowing');
    // Typed access: a reference string, money as strings.
    const reference: string = envelope.payload.reference;
    const amount: string = envelope.payload.rows[0]!.amount;
    expect({ reference, amount, total: envelope.payload.totalAmount }).toEqual({
      reference: 'PO-000042',
      amount: '12.500',
      total: '12.500',
    });
    expect(envelope.payload).toEqual(validatedOrder);
    expect(envelope.reference).toBe('PO-000042');
    expect(envelope.resourceUrl).toBe(`/CorePurchase/REST/PurchaseOrders/${validatedOrder.id}`);
  });

  it('refuses a body with one byte changed', () => {
    const tampered = Buffer.from(body);
    const at = tampered.indexOf('12.500');
    tampered[at] = '9'.charCodeAt(0);
    expect(refusal(() => verifyWebhook({ headers, rawBody: tampered, secrets: SECRET }))).toBe('invalid_signature');
  });

  it('refuses a body signed with another secret', () => {
    const other = deliveryHeaders(body, 'not-the-subscription-secret');
    expect(refusal(() => verifyWebhook({ headers: other, rawBody: body, secrets: SECRET }))).toBe('invalid_signature');
  });

  it('accepts during a rotation when the second of two secrets matches, and refuses when neither does', () => {
    const rotated = verifyWebhook({ headers, rawBody: body, secrets: ['the-new-secret-not-used-yet', SECRET] });
    expect(rotated.eventId).toBe('0b7c6f1e-3a52-4c1b-9d7e-2f4a6b8c0d1e');
    expect(refusal(() => verifyWebhook({ headers, rawBody: body, secrets: ['one-secret', 'another'] }))).toBe(
      'invalid_signature',
    );
  });

  it('refuses a request without the signature header, or with an empty one', () => {
    const { 'x-webhook-signature': _dropped, ...unsigned } = headers;
    expect(refusal(() => verifyWebhook({ headers: unsigned, rawBody: body, secrets: SECRET }))).toBe(
      'missing_signature',
    );
    expect(() => verifyWebhook({ headers: unsigned, rawBody: body, secrets: SECRET })).toThrow(
      /^No X-Webhook-Signature header\. .*Hmac authentication mode/,
    );
    const empty = { ...headers, 'x-webhook-signature': ' ' };
    expect(refusal(() => verifyWebhook({ headers: empty, rawBody: body, secrets: SECRET }))).toBe('missing_signature');
  });

  it('finds the header whatever its case, as an array, joined by a proxy, or in a fetch Headers', () => {
    const signature = headers['x-webhook-signature']!;
    const forged = signWebhook('attacker', body);
    for (const variant of [
      { 'X-Webhook-Signature': signature },
      { 'x-webhook-signature': [signature] },
      { 'x-webhook-signature': [forged, signature] },
      { 'x-webhook-signature': `${forged}, ${signature}` },
      new Headers({ 'X-WEBHOOK-SIGNATURE': signature }),
    ]) {
      expect(verifyWebhook({ headers: variant, rawBody: body, secrets: SECRET }).eventType).toBe(
        'purchaseOrder.validated',
      );
    }
    expect(
      refusal(() => verifyWebhook({ headers: { 'x-webhook-signature': [forged] }, rawBody: body, secrets: SECRET })),
    ).toBe('invalid_signature');
  });

  it('reads the signature under the header name the subscription chose', () => {
    const custom = { 'x-acme-signature': headers['x-webhook-signature']! };
    const envelope = verifyWebhook({
      headers: custom,
      rawBody: body,
      secrets: SECRET,
      signatureHeader: 'X-Acme-Signature',
    });
    expect(envelope.eventType).toBe('purchaseOrder.validated');
    // The default name is not looked for then, and the custom one is not looked for by default.
    expect(
      refusal(() => verifyWebhook({ headers, rawBody: body, secrets: SECRET, signatureHeader: 'X-Acme-Signature' })),
    ).toBe('missing_signature');
    expect(refusal(() => verifyWebhook({ headers: custom, rawBody: body, secrets: SECRET }))).toBe('missing_signature');
  });

  it('verifies the same non-ASCII body given as a Buffer, a Uint8Array or its UTF-8 string', () => {
    const text = body.toString('utf8');
    expect(text.length).toBeLessThan(body.length); // multi-byte characters: bytes and characters differ
    const view = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
    const sliced = Buffer.concat([Buffer.from('xx'), body]).subarray(2); // a view with a non-zero offset
    for (const rawBody of [body, text, view, sliced]) {
      const envelope = verifyWebhook({ headers, rawBody, secrets: SECRET });
      if (envelope.eventType !== 'purchaseOrder.validated' || envelope.payloadOmitted) throw new Error('narrowing');
      expect(envelope.payload.supplierName).toBe('Société “Acme” 🚀');
    }
    // The same characters in another encoding are other bytes: refused.
    expect(refusal(() => verifyWebhook({ headers, rawBody: Buffer.from(text, 'latin1'), secrets: SECRET }))).toBe(
      'invalid_signature',
    );
    // Re-serialized JSON is not the body received (here: the same object, other whitespace).
    const reserialized = JSON.stringify(JSON.parse(text), null, 1);
    expect(refusal(() => verifyWebhook({ headers, rawBody: reserialized, secrets: SECRET }))).toBe('invalid_signature');
  });

  it('compares in constant time: timingSafeEqual on two 32-byte buffers for every secret, even a malformed header', () => {
    const spy = vi.spyOn(crypto, 'timingSafeEqual');
    verifyWebhook({ headers, rawBody: body, secrets: ['first-secret-xxxxxxxx', SECRET] });
    expect(spy).toHaveBeenCalledTimes(2); // no early exit once the second matched… nor before
    spy.mockClear();

    for (const malformed of ['abc', 'not base64 at all!', `${headers['x-webhook-signature']}AAAA`]) {
      const code = refusal(() =>
        verifyWebhook({ headers: { 'x-webhook-signature': malformed }, rawBody: body, secrets: SECRET }),
      );
      expect(code).toBe('invalid_signature');
    }
    expect(spy).toHaveBeenCalledTimes(3);
    for (const [given, expected] of spy.mock.calls) {
      expect((given as Buffer).length).toBe(32);
      expect((expected as Buffer).length).toBe(32);
    }
  });

  it('verifies before parsing: a body that is not JSON is invalid_signature unless it is signed', () => {
    const garbage = Buffer.from('{not json', 'utf8');
    const parse = vi.spyOn(JSON, 'parse');
    expect(refusal(() => verifyWebhook({ headers, rawBody: garbage, secrets: SECRET }))).toBe('invalid_signature');
    expect(parse).not.toHaveBeenCalled();
    parse.mockRestore();
    const signed = { 'x-webhook-signature': signWebhook(SECRET, garbage) };
    expect(refusal(() => verifyWebhook({ headers: signed, rawBody: garbage, secrets: SECRET }))).toBe('invalid_body');
  });

  it('refuses a signed body that is JSON but not an envelope, or not UTF-8', () => {
    for (const text of [Buffer.from('[]'), Buffer.from('{"eventId":"e"}'), Buffer.from([0x7b, 0xff, 0x7d])]) {
      const signed = { 'x-webhook-signature': signWebhook(SECRET, text) };
      expect(refusal(() => verifyWebhook({ headers: signed, rawBody: text, secrets: SECRET }))).toBe('invalid_body');
    }
  });

  it('types an omitted payload as null', () => {
    const omitted = envelopeBody(validatedOrder, { omitted: true });
    const envelope: PurchaseOrderEnvelope = verifyWebhook({
      headers: deliveryHeaders(omitted),
      rawBody: omitted,
      secrets: SECRET,
    });
    expect(envelope).toMatchObject({ payload: null, payloadOmitted: true });
    if (envelope.payloadOmitted) {
      const payload: null = envelope.payload;
      expect(payload).toBeNull();
    }
  });

  it('says what to do when no secret or no raw body is given', () => {
    for (const secrets of [[], '', ['', '']]) {
      expect(refusal(() => verifyWebhook({ headers, rawBody: body, secrets }))).toBe('no_secrets');
    }
    const parsed = JSON.parse(body.toString('utf8')) as unknown;
    expect(refusal(() => verifyWebhook({ headers, rawBody: parsed as string, secrets: SECRET }))).toBe('body_not_raw');
    try {
      verifyWebhook({ headers, rawBody: parsed as string, secrets: SECRET });
    } catch (error) {
      expect((error as Error).message).toMatch(/rawBody is an object \(Object\).*exact bytes received/);
    }
  });
});
