import { createHmac } from 'node:crypto';

/** The fields of a WebhookEventEnvelope other than the payload. */
export interface EnvelopeFields {
  eventId: string;
  eventType: string;
  occurredAt: string;
  entityId: string;
  reference: string | null;
  resourceUrl: string;
  subscriptionId: string;
}

/**
 * An event's envelope fields for one subscription, every field named (why: deliveries/delivery-record.ts,
 * fromDeliveryMessage).
 */
export function envelopeFields(event: Omit<EnvelopeFields, 'subscriptionId'>, subscriptionId: string): EnvelopeFields {
  return {
    eventId: event.eventId,
    eventType: event.eventType,
    occurredAt: event.occurredAt,
    entityId: event.entityId,
    reference: event.reference,
    resourceUrl: event.resourceUrl,
    subscriptionId,
  };
}

/**
 * Builds the request body as bytes around the producer's payload bytes, in the spec's field order, so the payload is
 * forwarded byte for byte (never parsed and re-serialized). Above `payloadLimitBytes` the payload is omitted.
 */
export function buildEnvelope(fields: EnvelopeFields, payload: Buffer | null, payloadLimitBytes: number): Buffer {
  const omitted = payload === null || payload.length > payloadLimitBytes;
  const head =
    `{"eventId":${JSON.stringify(fields.eventId)}` +
    `,"eventType":${JSON.stringify(fields.eventType)}` +
    `,"occurredAt":${JSON.stringify(fields.occurredAt)}` +
    `,"entityId":${JSON.stringify(fields.entityId)}` +
    `,"reference":${JSON.stringify(fields.reference)}` +
    `,"resourceUrl":${JSON.stringify(fields.resourceUrl)}` +
    `,"subscriptionId":${JSON.stringify(fields.subscriptionId)}` +
    `,"payload":`;
  const tail = `,"payloadOmitted":${omitted}}`;
  return Buffer.concat([
    Buffer.from(head, 'utf8'),
    omitted ? Buffer.from('null') : payload!,
    Buffer.from(tail, 'utf8'),
  ]);
}

/**
 * Base64 HMAC-SHA256 of the raw body with the subscription secret (spec "Hmac signature"), keyed by the secret's UTF-8
 * bytes. The key goes in as the string: on Node 24 a Buffer key first fails a KeyObject check by a caught exception,
 * which made each HMAC 7 times dearer (`npx tsx test/bench/crypto-keys.ts`).
 */
export function signBody(secret: string, body: Buffer): string {
  return createHmac('sha256', secret).update(body).digest('base64');
}
