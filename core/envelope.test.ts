import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { buildEnvelope, signBody, type EnvelopeFields } from './envelope.ts';

const LIMIT = 204_800;

const fields: EnvelopeFields = {
  eventId: '0b7c6f1e-3a52-4c1b-9d7e-2f4a6b8c0d1e',
  eventType: 'purchaseOrder.validated',
  occurredAt: '2025-03-04T05:06:07.089Z',
  entityId: 'po-42',
  reference: 'PO-000042',
  resourceUrl: '/CorePurchase/REST/PurchaseOrders/po-42',
  subscriptionId: 'sub-1',
};

const FIELD_ORDER = [
  'eventId',
  'eventType',
  'occurredAt',
  'entityId',
  'reference',
  'resourceUrl',
  'subscriptionId',
  'payload',
  'payloadOmitted',
];

/** The envelope text in front of the payload, written independently of the implementation. */
function head(f: EnvelopeFields): string {
  return (
    `{"eventId":${JSON.stringify(f.eventId)},"eventType":${JSON.stringify(f.eventType)},` +
    `"occurredAt":${JSON.stringify(f.occurredAt)},"entityId":${JSON.stringify(f.entityId)},` +
    `"reference":${JSON.stringify(f.reference)},"resourceUrl":${JSON.stringify(f.resourceUrl)},` +
    `"subscriptionId":${JSON.stringify(f.subscriptionId)},"payload":`
  );
}

/** Keys of a JSON object in the order they appear in its text (JSON.parse keeps insertion order for string keys). */
function keysOf(body: Buffer): string[] {
  return Object.keys(JSON.parse(body.toString('utf8')) as object);
}

describe('buildEnvelope', () => {
  it('writes the fields in the spec order, payload and payloadOmitted last', () => {
    const body = buildEnvelope(fields, Buffer.from('{"a":1}'), LIMIT);
    expect(keysOf(body)).toEqual(FIELD_ORDER);
    expect(body.toString('utf8')).toBe(`${head(fields)}{"a":1},"payloadOmitted":false}`);
  });

  it('keeps the field order when the fields object was built in another order', () => {
    const reversed = Object.fromEntries(Object.entries(fields).reverse()) as unknown as EnvelopeFields;
    const body = buildEnvelope(reversed, Buffer.from('{}'), LIMIT);
    expect(keysOf(body)).toEqual(FIELD_ORDER);
    expect(body.equals(buildEnvelope(fields, Buffer.from('{}'), LIMIT))).toBe(true);
  });

  it.each([
    ['reference null', { reference: null }],
    ['quotes and backslashes in fields', { entityId: 'po "1" \\ 2', reference: 'PO\\"x"' }],
    ['unicode and line separators in fields', { reference: 'Réf 😀 \u2028\u2029 end', entityId: 'é\n\t' }],
    ['control characters in fields', { eventId: 'a\u0000b\u001fc' }],
  ] as const)('escapes the envelope fields correctly (%s)', (_name, overrides) => {
    const f: EnvelopeFields = { ...fields, ...overrides };
    const body = buildEnvelope(f, Buffer.from('{"x":true}'), LIMIT);
    const parsed = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
    expect(parsed).toEqual({ ...f, payload: { x: true }, payloadOmitted: false });
    expect(Object.keys(parsed)).toEqual(FIELD_ORDER);
  });

  // Each payload is text the producer serialized; a re-serialization would change every one of them.
  it.each([
    ['key order', '{"z":1,"a":2,"m":{"y":0,"b":1}}'],
    ['whitespace, tabs and newlines', '{\n\t"a" : [ 1 ,\t2 ] ,\r\n  "b":{ }\n}\n'],
    ['long-fraction number', '{"amount":1.000000000000000000001}'],
    ['huge integer', '{"n":123456789012345678901234567890}'],
    ['exponent and negative zero', '{"e":1E+2,"z":-0.0,"f":1.50}'],
    ['unicode escapes', '{"s":"\\u00e9\\u2028\\ud83d\\ude00\\u0000"}'],
    ['raw emoji and accents', '{"s":"😀 café 中文 𝄞"}'],
    ['escaped quotes and backslashes', '{"q":"say \\"hi\\" \\\\ back\\\\slash \\/ slash"}'],
    ['duplicate keys', '{"dup":1,"dup":2}'],
    ['top-level array', '[1,"two",{"3":null}]'],
    ['top-level string', '"just a string"'],
    ['empty object', '{}'],
  ])('forwards the payload byte for byte: %s', (_name, text) => {
    const payload = Buffer.from(text, 'utf8');
    const body = buildEnvelope(fields, payload, LIMIT);
    const prefix = Buffer.from(head(fields), 'utf8');
    const suffix = Buffer.from(',"payloadOmitted":false}', 'utf8');
    expect(body.length).toBe(prefix.length + payload.length + suffix.length);
    expect(body.subarray(0, prefix.length).equals(prefix)).toBe(true);
    expect(body.subarray(prefix.length, prefix.length + payload.length).equals(payload)).toBe(true);
    expect(body.subarray(prefix.length + payload.length).equals(suffix)).toBe(true);
    // And the envelope is still valid JSON carrying the same value.
    const parsed = JSON.parse(body.toString('utf8')) as { payload: unknown; payloadOmitted: boolean };
    expect(parsed.payload).toEqual(JSON.parse(text));
    expect(parsed.payloadOmitted).toBe(false);
  });

  it('forwards bytes that are not valid UTF-8 untouched (no decode/encode round trip)', () => {
    const payload = Buffer.from([0x22, 0xff, 0xfe, 0xc3, 0x22]); // "\xff\xfe\xc3"
    const body = buildEnvelope(fields, payload, LIMIT);
    const start = Buffer.byteLength(head(fields));
    expect(body.subarray(start, start + payload.length).equals(payload)).toBe(true);
  });

  /** A JSON string payload of exactly `bytes` UTF-8 bytes made mostly of `char` (multi-byte). */
  function payloadOfBytes(bytes: number, char: string): Buffer {
    const charBytes = Buffer.byteLength(char);
    const count = Math.floor((bytes - 2) / charBytes);
    const padding = 'a'.repeat(bytes - 2 - count * charBytes);
    const buffer = Buffer.from(`"${padding}${char.repeat(count)}"`, 'utf8');
    expect(buffer.length).toBe(bytes);
    return buffer;
  }

  it.each([
    // [limit, multi-byte character]
    [LIMIT, 'é'], // 2 bytes, 1 UTF-16 unit
    [LIMIT, '€'], // 3 bytes, 1 UTF-16 unit
    [LIMIT, '😀'], // 4 bytes, 2 UTF-16 units
    [10, '😀'],
    [3, 'é'],
    [2, 'a'],
  ])('limit %i with %s: exactly the limit in UTF-8 bytes is embedded, one more byte is omitted', (limit, char) => {
    const atLimit = payloadOfBytes(limit, char);
    const overLimit = payloadOfBytes(limit + 1, char);
    // Counted in characters, both payloads would be far below the limit: the rule must count bytes.
    if (char !== 'a') expect(overLimit.toString('utf8').length).toBeLessThanOrEqual(limit);

    const embedded = buildEnvelope(fields, atLimit, limit);
    expect(embedded.includes(atLimit)).toBe(true);
    expect(JSON.parse(embedded.toString('utf8'))).toMatchObject({
      payload: atLimit.toString('utf8').slice(1, -1),
      payloadOmitted: false,
    });

    const omitted = buildEnvelope(fields, overLimit, limit);
    const parsed = JSON.parse(omitted.toString('utf8')) as Record<string, unknown>;
    expect(parsed.payload).toBeNull();
    expect(parsed.payloadOmitted).toBe(true);
    expect(Object.keys(parsed)).toEqual(FIELD_ORDER);
    expect(omitted.toString('utf8')).toBe(`${head(fields)}null,"payloadOmitted":true}`);
  });

  it('omits a 5,000-row payload far above the limit and keeps the envelope small', () => {
    const rows = Array.from({ length: 5_000 }, (_, i) => ({ lineNumber: i + 1, description: 'é'.repeat(100) }));
    const payload = Buffer.from(JSON.stringify({ rows }));
    const body = buildEnvelope(fields, payload, LIMIT);
    expect(body.length).toBeLessThan(1_000);
    expect(JSON.parse(body.toString('utf8'))).toMatchObject({ payload: null, payloadOmitted: true });
  });
});

describe('signBody', () => {
  it('matches the RFC 4231 HMAC-SHA256 test vector (case 2), base64 encoded', () => {
    const expectedHex = '5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843';
    expect(signBody('Jefe', Buffer.from('what do ya want for nothing?'))).toBe(
      Buffer.from(expectedHex, 'hex').toString('base64'),
    );
    expect(signBody('Jefe', Buffer.from('what do ya want for nothing?'))).toBe(
      'W9zBRr9gdU5qBCQmCJV1x1oAPwidJzmDnexYuWTsOEM=',
    );
  });

  const body = buildEnvelope(fields, Buffer.from('{"amount":1.000000000000000000001,"s":"😀"}'), LIMIT);
  it.each([
    ['ascii secret', 'whsec_abcdef'],
    ['base64 secret of 32 random bytes', randomBytes(32).toString('base64')],
    ['unicode secret (keyed as UTF-8)', 'clé-秘密-🔑'],
    ['long secret (longer than the block size)', 'k'.repeat(200)],
  ])('is base64 HMAC-SHA256 of the raw body with the secret as UTF-8 key: %s', (_name, secret) => {
    const expected = createHmac('sha256', Buffer.from(secret, 'utf8')).update(body).digest('base64');
    const signature = signBody(secret, body);
    expect(signature).toBe(expected);
    expect(signature).toMatch(/^[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(signature, 'base64').length).toBe(32);
  });

  it('changes when one byte of the body or the secret changes', () => {
    const altered = flip(body, body.length - 3);
    expect(signBody('secret', altered)).not.toBe(signBody('secret', body));
    expect(signBody('secret2', body)).not.toBe(signBody('secret', body));
  });

  it('is deterministic: the same body and secret give the same signature (retries and replays)', () => {
    expect(signBody('secret', Buffer.from(body))).toBe(signBody('secret', body));
  });
});

describe('receiver-side verification example (spec: verify before parsing, compare in constant time)', () => {
  /** What a subscriber does with the raw request body and the signature header. */
  function verify(rawBody: Buffer, signatureHeader: string | undefined, secret: string): boolean {
    if (!signatureHeader) return false;
    const expected = createHmac('sha256', secret).update(rawBody).digest();
    const received = Buffer.from(signatureHeader, 'base64');
    // timingSafeEqual throws on different lengths: check first, the length is not secret.
    return received.length === expected.length && timingSafeEqual(received, expected);
  }

  const secret = randomBytes(32).toString('base64');
  const payloadText = '{ "b": 1,  "a": 1.000000000000000000001 }';
  const rawBody = buildEnvelope(fields, Buffer.from(payloadText), LIMIT);
  const signature = signBody(secret, rawBody);

  it('accepts the exact bytes it was sent', () => {
    expect(verify(rawBody, signature, secret)).toBe(true);
  });

  it.each([
    ['a flipped byte in the payload', () => [flip(rawBody, rawBody.indexOf('1.0')), signature, secret] as const],
    ['a wrong secret', () => [rawBody, signature, randomBytes(32).toString('base64')] as const],
    [
      'a re-serialized body (parsed then stringified)',
      () => [Buffer.from(JSON.stringify(JSON.parse(rawBody.toString('utf8')))), signature, secret] as const,
    ],
    ['a truncated signature', () => [rawBody, signature.slice(0, 20), secret] as const],
    ['a missing signature', () => [rawBody, undefined, secret] as const],
  ])('rejects %s', (_name, make) => {
    const [body, header, key] = make();
    expect(verify(body, header, key)).toBe(false);
  });
});

function flip(buffer: Buffer, index: number): Buffer {
  const copy = Buffer.from(buffer);
  copy[index] = copy[index]! ^ 0x01;
  return copy;
}
