/** Why a delivery was refused; stable, machine-readable. */
export type WebhookVerificationErrorCode =
  'no_secrets' | 'body_not_raw' | 'missing_signature' | 'invalid_signature' | 'invalid_body' | 'invalid_timestamp';

/** What each code means and what to do about it: the start of every error's message. */
export const VERIFICATION_ERRORS: Record<WebhookVerificationErrorCode, string> = {
  no_secrets:
    "No webhook secret was given. Pass the subscription's hmacSecret (returned once, when the subscription was " +
    'created or its secret rotated) as `secrets`; during a rotation pass the new and the previous one.',
  body_not_raw:
    '`rawBody` must be the exact bytes received (a Buffer, Uint8Array or string), not a parsed object: keep the raw ' +
    'body before any JSON middleware (for example express.raw({ type: "application/json" })).',
  missing_signature:
    'The request has no signature header. Check that the subscription uses the Hmac authentication mode, that ' +
    'nothing in front of the receiver drops the header, and pass `signatureHeader` if the subscription chose a ' +
    'name other than X-Webhook-Signature.',
  invalid_signature:
    'The signature does not match the body with any of the secrets given. Check that `rawBody` is the bytes as ' +
    'received (not re-serialized JSON, no re-encoding), that the secret is used as text exactly as returned (not ' +
    'base64-decoded), and keep the previous secret for 24 hours after a rotation. Answer 401 and do not process it.',
  invalid_body:
    'The signature is valid but the body is not a delivery envelope (UTF-8 JSON object with eventId, eventType ' +
    'and payloadOmitted). The service never sends such a body: report it with its X-Webhook-Delivery-Id.',
  invalid_timestamp:
    'The webhook-timestamp header (StandardWebhooks mode) is missing, not Unix seconds, or further from now than ' +
    'the tolerance: a request captured and replayed later, or a clock far off. Answer 401; check the clock (NTP).',
};

/** A delivery the receiver must refuse; `code` says why and the message what to do. */
export class WebhookVerificationError extends Error {
  override readonly name = 'WebhookVerificationError';

  constructor(
    readonly code: WebhookVerificationErrorCode,
    detail?: string,
    options?: { cause?: unknown },
  ) {
    super(detail ? `${detail}. ${VERIFICATION_ERRORS[code]}` : VERIFICATION_ERRORS[code], options);
  }
}
