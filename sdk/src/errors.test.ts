import { describe, expect, it } from 'vitest';
import { VERIFICATION_ERRORS, WebhookVerificationError, type WebhookVerificationErrorCode } from './errors.ts';

// Compile-time exhaustive: a code added to the type without a message here fails `tsc`.
const CODES: Record<WebhookVerificationErrorCode, true> = {
  no_secrets: true,
  body_not_raw: true,
  missing_signature: true,
  invalid_signature: true,
  invalid_body: true,
  invalid_timestamp: true,
};

describe('verification error codes', () => {
  it('are unique, stable snake_case, each with guidance', () => {
    const codes = Object.keys(VERIFICATION_ERRORS);
    expect(codes.sort()).toEqual(Object.keys(CODES).sort());
    expect(new Set(codes).size).toBe(codes.length);
    for (const code of codes) expect(code).toMatch(/^[a-z]+(_[a-z]+)*$/);
    const messages = Object.values(VERIFICATION_ERRORS);
    expect(new Set(messages).size).toBe(messages.length);
  });

  it('carry the code, the detail and what to do', () => {
    const error = new WebhookVerificationError('missing_signature', 'No X-Acme-Signature header');
    expect(error).toBeInstanceOf(Error);
    expect(error.name).toBe('WebhookVerificationError');
    expect(error.code).toBe('missing_signature');
    expect(error.message).toMatch(
      /^No X-Acme-Signature header\. The request has no signature header\..*signatureHeader/,
    );
  });
});
