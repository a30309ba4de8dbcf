import { createServer } from 'node:http';
import { verifyWebhook, WebhookVerificationError } from '../src/index.ts';

const secrets = [process.env.WEBHOOK_SECRET ?? '', process.env.WEBHOOK_PREVIOUS_SECRET ?? ''];
const seen = new Set<string>(); // in memory for the example: use a table with eventId as unique key

createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    try {
      const envelope = verifyWebhook({ headers: request.headers, rawBody: Buffer.concat(chunks), secrets });
      response.writeHead(202).end(); // acknowledge at once, work afterwards
      if (seen.has(envelope.eventId)) return; // a retry or a replay
      seen.add(envelope.eventId);
      if (envelope.eventType === 'purchaseOrder.validated' && !envelope.payloadOmitted) {
        const { reference, totalAmount, currency } = envelope.payload; // typed; money is a decimal string
        console.log(`${reference} validated: ${totalAmount} ${currency}`);
      }
    } catch (error) {
      if (!(error instanceof WebhookVerificationError)) throw error;
      response.writeHead(401).end(error.code); // refused before parsing anything
    }
  });
}).listen(9999);
