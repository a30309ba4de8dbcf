import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Agent } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseCidrs } from '../core/ssrf.ts';
import { createGuardedAgent, createSender, type Sender } from './http-sender.ts';
import { decideFate } from './outcome.ts';

const TIMEOUT_MS = 300;
const LOOPBACK = parseCidrs(['127.0.0.1/32']);

interface Receiver {
  url: string;
  port: number;
  requests: { method: string; url: string; headers: IncomingMessage['headers']; body: Buffer }[];
  close(): Promise<void>;
}

/** A real HTTP server on 127.0.0.1 that records every request it fully receives or starts to. */
async function receiver(handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<Receiver> {
  const requests: Receiver['requests'] = [];
  const server: Server = createServer((req, res) => {
    const entry = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.alloc(0) };
    requests.push(entry);
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      entry.body = Buffer.concat(chunks);
      handle(req, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    port,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const open: { close(): Promise<void> }[] = [];
async function track<T extends { close(): Promise<void> }>(resource: T): Promise<T> {
  open.push(resource);
  return resource;
}

afterEach(async () => {
  for (const resource of open.splice(0).reverse()) await resource.close();
});

let agent: Agent;
let send: Sender;
beforeAll(() => {
  // The loopback receivers are allowed explicitly, as a local test receiver would be through WEBHOOK_ALLOWED_CIDRS.
  agent = createGuardedAgent(LOOPBACK, TIMEOUT_MS);
  send = createSender(agent, LOOPBACK, TIMEOUT_MS);
});
afterAll(async () => {
  await agent.close();
});

const body = Buffer.from(
  '{"eventId":"evt-1","payload":{ "a" : 1.000000000000000000001, "s":"😀" },"payloadOmitted":false}',
);
const headers = {
  'content-type': 'application/json',
  'x-webhook-event-id': 'evt-1',
  'x-webhook-delivery-id': 'del-1',
  'x-webhook-signature': 'c2ln',
};

describe('createSender against a real receiver', () => {
  it.each([200, 201, 202, 204, 299])('HTTP %i: status code, no error', async (status) => {
    const server = await track(
      await receiver((_req, res) => {
        res.statusCode = status;
        res.end(status === 204 ? undefined : 'thanks');
      }),
    );
    const result = await send({ url: server.url, headers, body });
    expect(result).toMatchObject({ statusCode: status, errorMessage: null });
    expect(result.durationMs).toBeGreaterThanOrEqual(0);
    expect(result.durationMs).toBeLessThan(TIMEOUT_MS);
    expect(server.requests).toHaveLength(1);
    const request = server.requests[0]!;
    expect(request.method).toBe('POST');
    expect(request.url).toBe('/hooks');
    expect(request.body.equals(body)).toBe(true);
    expect(request.headers).toMatchObject(headers);
  });

  it.each([
    [500, 'HTTP 500'],
    [503, 'HTTP 503'],
    [404, 'HTTP 404'],
    [401, 'HTTP 401'],
    [400, 'HTTP 400'],
  ])('HTTP %i: a failure with error %j', async (status, message) => {
    const server = await track(
      await receiver((_req, res) => {
        res.statusCode = status;
        res.end('{"error":"nope"}');
      }),
    );
    expect(await send({ url: server.url, headers, body })).toMatchObject({ statusCode: status, errorMessage: message });
  });

  it.each([301, 302, 303, 307, 308])('HTTP %i: the redirect is not followed and is a failure', async (status) => {
    const target = await track(
      await receiver((_req, res) => {
        res.end('followed');
      }),
    );
    const server = await track(
      await receiver((_req, res) => {
        res.writeHead(status, { location: target.url });
        res.end();
      }),
    );
    const result = await send({ url: server.url, headers, body });
    expect(result.statusCode).toBe(status);
    expect(result.errorMessage).toMatch(new RegExp(`^HTTP ${status}`));
    expect(result.errorMessage).toContain('redirect');
    expect(target.requests).toHaveLength(0);
    expect(decideFate(result, 1, 0, 60_000, [1_000]).kind).toBe('retry');
  });

  it('a receiver that never answers: no status after the timeout', async () => {
    const server = await track(
      await receiver(() => {
        /* never answers */
      }),
    );
    const started = performance.now();
    const result = await send({ url: server.url, headers, body });
    const elapsed = performance.now() - started;
    expect(result.statusCode).toBeNull();
    expect(result.errorMessage).toBe(`no answer within ${TIMEOUT_MS} ms`);
    expect(elapsed).toBeGreaterThanOrEqual(TIMEOUT_MS - 20);
    expect(elapsed).toBeLessThan(TIMEOUT_MS + 1_500);
    expect(server.requests).toHaveLength(1); // it did receive the delivery (spec: retried anyway)
  });

  it('a receiver that sends headers then stalls the body: still bounded by the timeout', async () => {
    const server = await track(
      await receiver((_req, res) => {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('partial body, and then nothing');
      }),
    );
    const started = performance.now();
    const result = await send({ url: server.url, headers, body });
    const elapsed = performance.now() - started;
    expect(elapsed).toBeLessThan(TIMEOUT_MS + 1_500);
    // The answer never completed within the deadline: counted as no answer (retried, at least once).
    expect(result.statusCode).toBeNull();
    expect(result.errorMessage).toBe(`no answer within ${TIMEOUT_MS} ms`);
  });

  it('a 10 MB response body: the call still resolves with the status', async () => {
    const big = Buffer.alloc(10 * 1024 * 1024, 0x61);
    const server = await track(
      await receiver((_req, res) => {
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': big.length });
        res.end(big);
      }),
    );
    const started = performance.now();
    const result = await send({ url: server.url, headers, body });
    expect(result).toMatchObject({ statusCode: 200, errorMessage: null });
    expect(performance.now() - started).toBeLessThan(TIMEOUT_MS);
  });

  it('a 10 MB response body trickled slowly is not read to its end: the call resolves long before it could be', async () => {
    const total = 10 * 1024 * 1024;
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    let written = 0;
    let closedAfter: number | undefined;
    const server = await track(
      await receiver((_req, res) => {
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': total });
        res.on('close', () => (closedAfter = written));
        // 160 chunks, one every 5 ms: reading it all would take ~0.8 s, beyond the 300 ms deadline.
        const timer = setInterval(() => {
          if (res.destroyed || written >= total) return clearInterval(timer);
          written += chunk.length;
          res.write(chunk);
          if (written >= total) res.end();
        }, 5);
      }),
    );
    const started = performance.now();
    const result = await send({ url: server.url, headers, body });
    expect(result).toMatchObject({ statusCode: 200, errorMessage: null });
    expect(performance.now() - started).toBeLessThan(TIMEOUT_MS);
    await new Promise((resolve) => setTimeout(resolve, 50));
    // The sender dropped the connection after at most a few chunks.
    expect(closedAfter).toBeDefined();
    expect(closedAfter!).toBeLessThan(total / 4);
  });

  it('an endless chunked 2xx body is cut off after a small limit: the call resolves with the status', async () => {
    let written = 0;
    const server = await track(
      await receiver((_req, res) => {
        res.writeHead(202, { 'content-type': 'application/octet-stream' });
        const chunk = Buffer.alloc(64 * 1024, 0x62);
        const pump = () => {
          while (!res.destroyed && res.write(chunk)) written += chunk.length;
          if (!res.destroyed) res.once('drain', pump);
        };
        pump();
      }),
    );
    const result = await send({ url: server.url, headers, body });
    expect(result).toMatchObject({ statusCode: 202, errorMessage: null });
    // Had the body been read to the end this would never resolve; and far less than 10 MB went over the wire.
    expect(written).toBeLessThan(10 * 1024 * 1024);
  });

  // Connection pool and timeout: the attempt timer used to start before undici had a connection for the request, so
  // many subscriptions on one host got false "no answer" failures while queued behind each other for a connection.
  it('requests beyond the connection pool of a host wait for a connection without their attempt timer running', async () => {
    // Three waves through a pool of 64 (the old fixed size): each answer takes half the attempt timeout, so the third wave would be past
    // its timeout had the timer started while queued, and every attempt has half a timeout of slack for a busy machine.
    const pool = 64;
    const timeoutMs = 2_000;
    const server = await track(
      await receiver((_req, res) => {
        setTimeout(() => res.writeHead(204).end(), timeoutMs / 2);
      }),
    );
    const pooled = await track(createGuardedAgent(LOOPBACK, timeoutMs, pool));
    const sendPooled = createSender(pooled, LOOPBACK, timeoutMs, pool);
    const results = await Promise.all(
      Array.from({ length: pool * 3 }, () => sendPooled({ url: server.url, headers, body })),
    );
    expect(results.filter((result) => result.statusCode !== 204)).toEqual([]);
    // Each attempt's duration is its own request, not the wait for a connection.
    expect(Math.max(...results.map((result) => result.durationMs))).toBeLessThan(timeoutMs);
  });

  it('an answered attempt leaves no deadline timer behind', async () => {
    const server = await track(
      await receiver((_req, res) => {
        res.end('ok');
      }),
    );
    const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length;
    const before = timers();
    const results = await Promise.all(Array.from({ length: 20 }, () => send({ url: server.url, headers, body })));
    expect(results.map((result) => result.statusCode)).toEqual(Array(20).fill(200));
    // Each attempt armed its whole-attempt deadline; an answer clears it rather than leaving it to fire later.
    expect(timers()).toBeLessThanOrEqual(before);
  });

  it('a refused connection is a failed attempt with an error, not an exception', async () => {
    const server = await receiver(() => undefined);
    const url = server.url;
    await server.close();
    const result = await send({ url, headers, body });
    expect(result.statusCode).toBeNull();
    expect(result.errorMessage).toMatch(/ECONNREFUSED/);
    expect(result.failure).toBe('connection');
  });

  it('a receiver that drops the connection is a failed attempt with an error', async () => {
    const server = await track(await receiver((req) => req.socket.destroy()));
    const result = await send({ url: server.url, headers, body });
    expect(result.statusCode).toBeNull();
    expect(result.errorMessage).toBeTruthy();
    expect(result.failure).toBe('connection');
  });
});

describe('what an answer says about the endpoint: Retry-After and kinds of failure', () => {
  const answering = (status: number, extra: Record<string, string>) =>
    receiver((_req, res) => {
      res.writeHead(status, extra);
      res.end();
    });

  it.each([
    [429, { 'retry-after': '1' }, 1_000],
    [503, { 'retry-after': '120' }, 120_000],
    [429, { 'retry-after': 'soon' }, undefined], // malformed: ignored
    [429, {}, undefined],
    [500, { 'retry-after': '5' }, undefined], // only 429 and 503 are honoured
    [200, { 'retry-after': '5' }, undefined],
  ])('HTTP %i with %j: retryAfterMs %s', async (status, extra, expected) => {
    const server = await track(await answering(status, extra));
    const result = await send({ url: server.url, headers, body });
    expect(result.statusCode).toBe(status);
    expect(result.retryAfterMs).toBe(expected);
    expect(result.failure).toBeUndefined();
  });

  it('an HTTP-date Retry-After is the wait until that date', async () => {
    const at = Date.now() + 30_000;
    const server = await track(await answering(503, { 'retry-after': new Date(at).toUTCString() }));
    const result = await send({ url: server.url, headers, body });
    // An HTTP-date has whole seconds: up to a second earlier than `at`, and a busy machine adds a little.
    expect(result.retryAfterMs).toBeGreaterThan(27_000);
    expect(result.retryAfterMs).toBeLessThanOrEqual(30_000);
  });

  it('no answer in time is a timeout; a refused address is neither timeout nor connection failure', async () => {
    const silent = await track(await receiver(() => undefined));
    expect((await send({ url: silent.url, headers, body })).failure).toBe('timeout');
    const guarded = await track(createGuardedAgent([], TIMEOUT_MS));
    const refused = await createSender(guarded, [], TIMEOUT_MS)({ url: silent.url, headers, body });
    expect(refused.errorMessage).toMatch(/^blocked address/);
    expect(refused.failure).toBeUndefined();
  });
});

describe('SSRF guard at connect time', () => {
  it('refuses a host name that resolves to a loopback address, and the receiver gets nothing', async () => {
    const server = await track(await receiver((_req, res) => res.end()));
    const guarded = await track(createGuardedAgent([], TIMEOUT_MS));
    const guardedSend = createSender(guarded, [], TIMEOUT_MS);
    const result = await guardedSend({ url: `http://localhost:${server.port}/hooks`, headers, body });
    expect(result.statusCode).toBeNull();
    expect(result.errorMessage).toMatch(/blocked address/);
    expect(result.errorMessage).toMatch(/loopback/);
    expect(server.requests).toHaveLength(0);
  });

  it('lets the same host name through when its address is inside the allowlist', async () => {
    const server = await track(await receiver((_req, res) => res.end()));
    const allowed = await track(createGuardedAgent(LOOPBACK, TIMEOUT_MS));
    const allowedSend = createSender(allowed, LOOPBACK, TIMEOUT_MS);
    const result = await allowedSend({ url: `http://localhost:${server.port}/hooks`, headers, body });
    expect(result).toMatchObject({ statusCode: 200, errorMessage: null });
    expect(server.requests).toHaveLength(1);
  });

  it.each([
    ['127.0.0.1', (port: number) => `http://127.0.0.1:${port}/hooks`],
    ['IPv4-mapped IPv6 loopback', (port: number) => `http://[::ffff:127.0.0.1]:${port}/hooks`],
    ['decimal IPv4 spelling', (port: number) => `http://2130706433:${port}/hooks`],
  ])('refuses a literal %s without an allowlist, and the receiver gets nothing', async (_name, urlFor) => {
    const server = await track(await receiver((_req, res) => res.end()));
    const guarded = await track(createGuardedAgent([], TIMEOUT_MS));
    const result = await createSender(guarded, [], TIMEOUT_MS)({ url: urlFor(server.port), headers, body });
    expect(result.statusCode).toBeNull();
    expect(result.errorMessage).toMatch(/^blocked address: .*loopback/);
    expect(server.requests).toHaveLength(0);
  });

  it('refuses a literal IPv6 loopback without an allowlist', async () => {
    const guarded = await track(createGuardedAgent([], TIMEOUT_MS));
    const result = await createSender(guarded, [], TIMEOUT_MS)({ url: 'http://[::1]:9/hooks', headers, body });
    expect(result).toMatchObject({ statusCode: null, errorMessage: 'blocked address: a loopback address' });
  });

  it('lets a literal 127.0.0.1 through with 127.0.0.1/32 allowed', async () => {
    const server = await track(await receiver((_req, res) => res.end()));
    expect(await send({ url: server.url, headers, body })).toMatchObject({ statusCode: 200 });
    expect(server.requests).toHaveLength(1);
  });
});
