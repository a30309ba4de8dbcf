// A Core Webhooks receiver on node:http: keeps the raw body, verifies its signature before parsing, refuses a bad one
// with 401, acknowledges at once and deduplicates on eventId. Run it: WEBHOOK_SECRET=… npx tsx sdk/examples/receiver.ts
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { WebhookVerificationError } from '../src/errors.ts';
import { readDeliveryInfo } from '../src/headers.ts';
import type { PurchaseOrderEnvelope } from '../src/types.ts';
import { verifyWebhook } from '../src/verify.ts';
import { MemoryInbox, type EventInbox, type ReceivedEvent } from './memory-inbox.ts';

/** Settings of the example receiver. */
export interface ReceiverOptions {
  /** The subscription's hmacSecret; during a rotation the new and the previous one. */
  secrets: string | readonly string[];
  /** The signature header the subscription chose; X-Webhook-Signature by default. */
  signatureHeader?: string;
  /** The path deliveries are posted to (the subscription's url); /hooks by default. */
  path?: string;
  /** Where accepted events are kept; an in-memory inbox by default (see MemoryInbox). */
  inbox?: EventInbox;
  /** Does the work for one new event, after the 2xx answer was sent; a duplicate never reaches it. */
  onEvent?: (event: ReceivedEvent) => void | Promise<void>;
  /** One structured line per request; JSON on stdout by default. */
  log?: (entry: ReceiverLogEntry) => void;
  /** Larger bodies are refused with 413 (the service embeds payloads up to 204,800 bytes by default). */
  maxBodyBytes?: number;
}

/** What the receiver did with one request. */
export interface ReceiverLogEntry {
  outcome: 'accepted' | 'duplicate' | 'refused' | 'processed' | 'failed';
  status?: number;
  eventId?: string | null;
  eventType?: string | null;
  deliveryId?: string | null;
  attempt?: number | null;
  /** A test delivery (X-Webhook-Test: true). */
  test?: boolean;
  entityId?: string;
  reference?: string | null;
  /** Why a request was refused (a WebhookVerificationError code, or the HTTP reason). */
  code?: string;
  error?: string;
}

/** Signals a body over maxBodyBytes while it is being read. */
class BodyTooLargeError extends Error {}

/** The receiver as an http.Server, not yet listening: call `listen(port, host)`. */
export function createReceiver(options: ReceiverOptions): Server {
  const path = options.path ?? '/hooks';
  const inbox = options.inbox ?? new MemoryInbox();
  const log = options.log ?? ((entry: ReceiverLogEntry) => console.log(JSON.stringify(entry)));
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
  // A receiver without a secret would refuse every delivery: fail at start-up instead.
  if ((typeof options.secrets === 'string' ? [options.secrets] : options.secrets).every((secret) => !secret)) {
    throw new WebhookVerificationError('no_secrets');
  }

  return createServer((request, response) => {
    const answer = (status: number, text = '') => {
      response.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' }).end(text);
    };
    if (new URL(request.url ?? '/', 'http://receiver').pathname !== path) return answer(404, 'not found\n');
    if (request.method !== 'POST') {
      response.setHeader('allow', 'POST');
      return answer(405, 'POST only\n');
    }
    const info = readDeliveryInfo(request.headers);
    readRawBody(request, maxBodyBytes)
      .then(
        async (rawBody) => {
          let envelope: PurchaseOrderEnvelope;
          try {
            // Verified on the bytes as received, before anything parses them.
            envelope = verifyWebhook({
              headers: request.headers,
              rawBody,
              secrets: options.secrets,
              signatureHeader: options.signatureHeader,
            });
          } catch (error) {
            if (!(error instanceof WebhookVerificationError)) throw error;
            // A bad signature is 401 and nothing else happens; a signed body that is not an envelope is 400.
            const status = error.code === 'invalid_body' ? 400 : 401;
            log({ outcome: 'refused', status, code: error.code, ...info });
            return answer(status, `${error.code}\n`);
          }
          const event: ReceivedEvent = {
            envelope,
            rawBody,
            deliveryId: info.deliveryId,
            attempt: info.attempt,
            test: info.test,
            receivedAt: new Date(),
          };
          // Deduplicated on the body's eventId (signed; equal to X-Webhook-Event-Id): retries and replays repeat it.
          const fresh = await inbox.add(event);
          // Acknowledge first, work afterwards: the service waits 30 s at most and retries what it did not see answered.
          // 2xx in both cases, or the service would retry a duplicate for 24 hours.
          const status = fresh ? 202 : 200;
          answer(status);
          log({
            outcome: fresh ? 'accepted' : 'duplicate',
            status,
            ...info,
            eventId: envelope.eventId,
            eventType: envelope.eventType,
            entityId: envelope.entityId,
            reference: envelope.reference,
          });
          if (fresh && options.onEvent) setImmediate(() => void work(event));
        },
        (error: unknown) => {
          const tooLarge = error instanceof BodyTooLargeError;
          log({
            outcome: 'refused',
            status: tooLarge ? 413 : 400,
            code: tooLarge ? 'body_too_large' : 'aborted',
            ...info,
          });
          if (!response.headersSent && !response.destroyed) answer(tooLarge ? 413 : 400);
        },
      )
      .catch((error: unknown) => {
        // Not the sender's fault (the inbox failed): 500, so the service retries later.
        log({ outcome: 'failed', status: 500, ...info, error: String(error) });
        if (!response.headersSent) answer(500);
      });
  });

  /** Runs onEvent for a new event, after its answer; one log line for how it went. */
  async function work(event: ReceivedEvent): Promise<void> {
    const ids = { eventId: event.envelope.eventId, eventType: event.envelope.eventType, deliveryId: event.deliveryId };
    try {
      await options.onEvent!(event);
      log({ outcome: 'processed', ...ids });
    } catch (error) {
      // Already acknowledged: the service will not send it again. A real inbox keeps the event for another try.
      log({ outcome: 'failed', ...ids, error: String(error) });
    }
  }
}

/** The request body as one Buffer, the bytes exactly as received; rejects past `limit` bytes. */
function readRawBody(request: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        reject(new BodyTooLargeError(`body over ${limit} bytes`));
        request.resume(); // drain the rest without keeping it
        return;
      }
      chunks.push(chunk);
    });
    request.on('end', () => resolve(Buffer.concat(chunks)));
    request.on('error', reject);
    request.on('close', () => {
      if (!request.complete) reject(new Error('request aborted'));
    });
  });
}

// Run directly: WEBHOOK_SECRET (and WEBHOOK_PREVIOUS_SECRET during a rotation), PORT (9999), HOST (127.0.0.1).
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const secrets = [process.env.WEBHOOK_SECRET, process.env.WEBHOOK_PREVIOUS_SECRET].filter((s): s is string => !!s);
  const port = Number(process.env.PORT ?? 9999);
  const host = process.env.HOST ?? '127.0.0.1';
  const server = createReceiver({
    secrets,
    signatureHeader: process.env.WEBHOOK_SIGNATURE_HEADER,
    onEvent: ({ envelope }) => {
      switch (envelope.eventType) {
        case 'purchaseOrder.validated':
          if (envelope.payloadOmitted)
            console.log(`order ${envelope.reference} validated; fetch ${envelope.resourceUrl}`);
          else
            console.log(
              `order ${envelope.payload.reference} validated: ${envelope.payload.totalAmount} ${envelope.payload.currency}`,
            );
          break;
        case 'purchaseOrder.cancelled':
          console.log(`order ${envelope.entityId} cancelled`);
          break;
        default:
          // Event types you did not expect are acknowledged and ignored, never refused.
          console.log(`ignoring ${envelope.eventType}`);
      }
    },
  });
  server.listen(port, host, () => {
    const { port: bound } = server.address() as AddressInfo; // PORT=0 takes a free port
    console.log(`receiver listening on http://${host}:${bound}/hooks`);
  });
  process.on('SIGTERM', () => server.close());
  process.on('SIGINT', () => server.close());
}
