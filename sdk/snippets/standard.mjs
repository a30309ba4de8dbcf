import { Webhook } from 'standardwebhooks'; // npm install standardwebhooks
import { Buffer } from 'node:buffer';
import process from 'node:process';

/**
 * Returns the envelope of a delivery of a StandardWebhooks subscription, or throws (answer 401, process nothing).
 * rawBody: the body exactly as received; headers: Node's request.headers (webhook-id, webhook-timestamp,
 * webhook-signature). secret: the whsec_… secret; during a rotation either the new or the previous one verifies.
 * The library refuses a timestamp more than 5 minutes away from now: a captured request replayed later.
 */
export function verifyStandardWebhook(rawBody, headers, secret = process.env.WEBHOOK_SECRET) {
  return new Webhook(secret).verify(rawBody, headers);
}

// A command line for this repository's tests (test/integration/standard-webhooks-snippets.test.ts):
//   WEBHOOK_SECRET=whsec_... node standard.mjs '<webhook-id>' '<webhook-timestamp>' '<webhook-signature>' < body
// prints the event's type and id and exits 0 when verified, prints why and exits 1 when refused.
if (process.argv[1] === import.meta.filename) {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const [id, timestamp, signature] = process.argv.slice(2);
  const headers = { 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': signature };
  try {
    const envelope = verifyStandardWebhook(Buffer.concat(chunks), headers);
    process.stdout.write(`verified ${envelope.eventType} ${envelope.eventId}\n`);
  } catch (refusal) {
    process.stdout.write(`refused: ${refusal.message}\n`);
    process.exitCode = 1;
  }
}
