import { Buffer } from 'node:buffer';
import { createHmac, timingSafeEqual } from 'node:crypto';
import process from 'node:process';

/**
 * Returns the envelope of a Core Webhooks delivery, or throws (answer 401, process nothing).
 * rawBody: the body as a Buffer, exactly as received (Express: express.raw({ type: 'application/json' })).
 * headers: Node's request.headers. secrets: the subscription's secret, during a rotation the new and the previous.
 */
export function verifyWebhook(rawBody, headers, secrets, signatureHeader = 'X-Webhook-Signature') {
  const signature = headers[signatureHeader.toLowerCase()]; // Node lower-cases header names
  if (typeof signature !== 'string' || signature === '') throw new Error(`missing ${signatureHeader} header`);
  const given = Buffer.from(signature, 'base64');
  let matched = false;
  for (const secret of secrets) {
    // The key is the secret as UTF-8 text, exactly as returned (not base64-decoded); the message is the raw body.
    const expected = createHmac('sha256', Buffer.from(secret, 'utf8')).update(rawBody).digest();
    // timingSafeEqual needs equal lengths; a SHA-256 HMAC is always 32 bytes, so this check reveals nothing secret.
    if (given.length === expected.length && timingSafeEqual(given, expected)) matched = true;
  }
  if (!matched) throw new Error('invalid signature');
  return JSON.parse(rawBody.toString('utf8')); // parsed only once verified
}

/** The subscription's secret, and the previous one for 24 hours after a rotation. */
export function secretsFromEnv() {
  return [process.env.WEBHOOK_SECRET, process.env.WEBHOOK_PREVIOUS_SECRET].filter(Boolean);
}

// A command line for this repository's tests (sdk/snippets.test.ts), used like a receiver would be:
//   WEBHOOK_SECRET=... [WEBHOOK_PREVIOUS_SECRET=...] node verify.mjs '<signature header>' < body
// prints the event's type and id and exits 0 when verified, prints why and exits 1 when refused.
if (process.argv[1] === import.meta.filename) {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const headers = process.argv[2] === undefined ? {} : { 'x-webhook-signature': process.argv[2] };
  try {
    const envelope = verifyWebhook(Buffer.concat(chunks), headers, secretsFromEnv());
    process.stdout.write(`verified ${envelope.eventType} ${envelope.eventId}\n`);
  } catch (refusal) {
    process.stdout.write(`refused: ${refusal.message}\n`);
    process.exitCode = 1;
  }
}
