/**
 * A demo subscriber endpoint: `npm run receiver -- [port] [hmacSecret]` prints every delivery it gets and, given the
 * subscription's Hmac secret, verifies the signature over the raw body before parsing (constant-time compare).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';

const port = Number(process.argv[2] ?? 9999);
const secret = process.argv[3];

createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    const body = Buffer.concat(chunks);
    let verdict = 'no secret given, signature not checked';
    if (secret) {
      const expected = createHmac('sha256', secret).update(body).digest();
      const given = Buffer.from(String(request.headers['x-webhook-signature'] ?? ''), 'base64');
      verdict =
        given.length === expected.length && timingSafeEqual(given, expected) ? 'signature valid' : 'SIGNATURE INVALID';
    }
    console.log(
      `${new Date().toISOString()} ${request.method} ${request.url} event=${request.headers['x-webhook-event-type']}` +
        ` eventId=${request.headers['x-webhook-event-id']} attempt=${request.headers['x-webhook-attempt']} (${verdict})`,
    );
    console.log(body.toString('utf8').slice(0, 2000));
    response.writeHead(secret && verdict !== 'signature valid' ? 401 : 204).end();
  });
}).listen(port, '127.0.0.1', () => console.log(`receiver listening on http://127.0.0.1:${port}/hooks`));
