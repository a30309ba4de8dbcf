import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { envelopeBody, validatedOrder } from '../test/fixtures.ts';
import { WebhookVerificationError } from './errors.ts';
import { verifyStandardWebhook } from './verify.ts';

// Signed as the Standard Webhooks specification says (core/standard-webhooks.test.ts checks the service's signatures
// against this kit and the official library).
const SECRET = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;
const OTHER = `whsec_${Buffer.alloc(32, 9).toString('base64')}`;
const body = envelopeBody(validatedOrder);
const NOW = Date.UTC(2026, 10, 27, 12, 0, 0);

function headers(secret = SECRET, at = NOW, id = 'evt-1') {
  return {
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(at / 1000)),
    'webhook-signature': sign(secret, id, Math.floor(at / 1000)),
  };
}

/** `v1,` base64 HMAC-SHA256 of `id.timestamp.body`, keyed by the bytes after `whsec_`. */
function sign(secret: string, id: string, timestamp: number): string {
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  return `v1,${crypto.createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest('base64')}`;
}

const codeOf = (run: () => unknown) => {
  try {
    run();
    return 'accepted';
  } catch (error) {
    return error instanceof WebhookVerificationError ? error.code : String(error);
  }
};

describe('verifyStandardWebhook', () => {
  it('returns the envelope of a signed delivery', () => {
    const envelope = verifyStandardWebhook({ headers: headers(), rawBody: body, secrets: SECRET, now: () => NOW });
    expect(envelope.eventType).toBe('purchaseOrder.validated');
  });

  it('refuses another body, another id, another secret, and a timestamp beyond the tolerance either way', () => {
    const verify = (overrides: Partial<Parameters<typeof verifyStandardWebhook>[0]>) => () =>
      verifyStandardWebhook({ headers: headers(), rawBody: body, secrets: SECRET, now: () => NOW, ...overrides });
    expect(codeOf(verify({ rawBody: Buffer.concat([body, Buffer.from(' ')]) }))).toBe('invalid_signature');
    expect(codeOf(verify({ headers: { ...headers(), 'webhook-id': 'evt-2' } }))).toBe('invalid_signature');
    expect(codeOf(verify({ secrets: OTHER }))).toBe('invalid_signature');
    expect(codeOf(verify({ now: () => NOW + 301_000 }))).toBe('invalid_timestamp'); // a capture replayed later
    expect(codeOf(verify({ now: () => NOW - 301_000 }))).toBe('invalid_timestamp');
    expect(codeOf(verify({ now: () => NOW + 299_000 }))).toBe('accepted');
    expect(codeOf(verify({ now: () => NOW + 500_000, toleranceSeconds: 600 }))).toBe('accepted');
    expect(codeOf(verify({ headers: { ...headers(), 'webhook-timestamp': '1.7e9' } }))).toBe('invalid_timestamp');
    expect(codeOf(verify({ headers: { 'webhook-id': 'evt-1' } }))).toBe('missing_signature');
    expect(codeOf(verify({ secrets: [] }))).toBe('no_secrets');
  });

  it('accepts either signature of a rotation, with either secret', () => {
    const both = {
      ...headers(),
      'webhook-signature': `${headers(OTHER)['webhook-signature']} ${headers(SECRET)['webhook-signature']}`,
    };
    for (const secrets of [SECRET, OTHER, [OTHER, SECRET]]) {
      expect(codeOf(() => verifyStandardWebhook({ headers: both, rawBody: body, secrets, now: () => NOW }))).toBe(
        'accepted',
      );
    }
  });
});
