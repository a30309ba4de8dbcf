import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { verifyStandardWebhook } from '../sdk/src/index.ts';
import {
  generateStandardSecret,
  standardHeaders,
  standardSecretProblem,
  standardSignature,
} from './standard-webhooks.ts';

const BODY = Buffer.from(
  '{"eventId":"evt-1","eventType":"purchaseOrder.validated","payload":{"amount":12.5},"payloadOmitted":false}',
);

describe('Standard Webhooks signatures', () => {
  it('are verified by the official library, with the secret as generated', () => {
    const secret = generateStandardSecret();
    expect(standardSecretProblem(secret)).toBeUndefined();
    const now = Math.floor(Date.now() / 1000);
    const headers = standardHeaders([secret], 'evt-1', now, BODY);
    expect(new Webhook(secret).verify(BODY, headers)).toEqual(JSON.parse(BODY.toString()));
    // The receiver kit verifies it too.
    expect(verifyStandardWebhook({ headers, rawBody: BODY, secrets: secret })).toEqual(JSON.parse(BODY.toString()));
    // The library's own signature of the same message is ours.
    expect(headers['webhook-signature']).toBe(new Webhook(secret).sign('evt-1', new Date(now * 1000), BODY));
  });

  it('are refused for another body, another id, another secret, or a timestamp past the tolerance', () => {
    const secret = generateStandardSecret();
    const now = Math.floor(Date.now() / 1000);
    const headers = standardHeaders([secret], 'evt-1', now, BODY);
    const verifier = new Webhook(secret);
    expect(() => verifier.verify(Buffer.from('{"eventId":"evt-2"}'), headers)).toThrow();
    expect(() => verifier.verify(BODY, { ...headers, 'webhook-id': 'evt-2' })).toThrow();
    expect(() => new Webhook(generateStandardSecret()).verify(BODY, headers)).toThrow();
    // A capture replayed 10 minutes later: its signed timestamp is too old.
    const old = standardHeaders([secret], 'evt-1', now - 600, BODY);
    expect(() => verifier.verify(BODY, old)).toThrow(/too old/i);
  });

  it('carry one signature per secret during a rotation, each verifiable by the receiver holding it', () => {
    const [current, previous] = [generateStandardSecret(), generateStandardSecret()];
    const now = Math.floor(Date.now() / 1000);
    const headers = standardHeaders([current, previous], 'evt-1', now, BODY);
    expect(headers['webhook-signature'].split(' ')).toEqual([
      standardSignature(current, 'evt-1', now, BODY),
      standardSignature(previous, 'evt-1', now, BODY),
    ]);
    expect(() => new Webhook(current).verify(BODY, headers)).not.toThrow();
    expect(() => new Webhook(previous).verify(BODY, headers)).not.toThrow();
  });

  it('says what is wrong with a secret offered for the mode', () => {
    expect(standardSecretProblem('c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0')).toMatch(/must start with whsec_/);
    expect(standardSecretProblem('whsec_not base64!')).toMatch(/base64/);
    expect(standardSecretProblem(`whsec_${Buffer.alloc(8).toString('base64')}`)).toMatch(
      /24 to 64 bytes \(it encodes 8\)/,
    );
    expect(standardSecretProblem(`whsec_${Buffer.alloc(24, 7).toString('base64')}`)).toBeUndefined();
  });
});
