import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP } from 'node:net';
import { Agent, request, type Dispatcher } from 'undici';
import { blockedReason, type Cidr } from '../core/ssrf.ts';
import { parseRetryAfter, type AttemptResult } from './outcome.ts';

/** An outbound POST; the caller builds headers and body. */
export interface OutboundRequest {
  url: string;
  headers: Record<string, string>;
  body: Buffer | string;
}

/** Sends one attempt; never throws for the subscriber's failures, they are results. */
export type Sender = (outbound: OutboundRequest) => Promise<AttemptResult>;

/**
 * An undici agent with keep-alive pools per origin whose DNS lookup refuses blocked addresses, so the address actually
 * connected to passes the SSRF rules at connect time (DNS rebinding).
 */
export function createGuardedAgent(allowed: Cidr[], connectTimeoutMs: number, connectionsPerOrigin = 128): Agent {
  const lookup = (
    hostname: string,
    options: object,
    callback: (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
  ) => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return callback(error, []);
      const list = addresses as LookupAddress[];
      const blocked = list.map((entry) => blockedReason(entry.address, allowed)).find(Boolean);
      if (blocked) return callback(Object.assign(new Error(`blocked address: ${blocked}`), { code: 'EBLOCKED' }), []);
      if ((options as { all?: boolean }).all) return callback(null, list);
      return callback(null, list[0]!.address, list[0]!.family);
    });
  };
  return new Agent({
    connect: { lookup, timeout: connectTimeoutMs },
    keepAliveTimeout: 30_000,
    connections: connectionsPerOrigin,
    pipelining: 1,
  });
}

/**
 * POSTs with a whole-attempt deadline; redirects are failures; the response body is drained, never read. At most
 * `connectionsPerOrigin` requests per origin are handed to the agent (whose pool has that many connections): the rest
 * wait here, before their attempt timer starts, so a queue for a busy host never turns into false "no answer" failures.
 */
export function createSender(
  dispatcher: Dispatcher,
  allowed: Cidr[],
  timeoutMs: number,
  connectionsPerOrigin = 128,
): Sender {
  const origins = new Map<string, { active: number; waiting: (() => void)[] }>();
  const acquire = async (origin: string) => {
    const slot = origins.get(origin) ?? { active: 0, waiting: [] };
    origins.set(origin, slot);
    if (slot.active < connectionsPerOrigin) slot.active += 1;
    else await new Promise<void>((resolve) => slot.waiting.push(resolve)); // the releaser hands its place over
    return () => {
      const next = slot.waiting.shift();
      if (next) next();
      else if (--slot.active === 0) origins.delete(origin);
    };
  };

  return async ({ url, headers, body }) => {
    const target = new URL(url);
    const host = target.hostname.replace(/^\[|\]$/g, '');
    // A literal IP never goes through DNS lookup: check it here.
    const literalBlock = isIP(host) ? blockedReason(host, allowed) : undefined;
    if (literalBlock) return { statusCode: null, errorMessage: `blocked address: ${literalBlock}`, durationMs: 0 };
    const release = await acquire(target.origin);
    const started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    const signal = AbortSignal.timeout(timeoutMs);
    try {
      const response = await request(url, {
        method: 'POST',
        headers,
        body,
        dispatcher,
        signal,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      await response.body.dump({ limit: 64 * 1024, signal });
      const result: AttemptResult = {
        statusCode: response.statusCode,
        errorMessage: errorFor(response.statusCode),
        durationMs: elapsed(),
      };
      if (response.statusCode === 429 || response.statusCode === 503) {
        const answeredAt = Date.now();
        const retryAfterMs = parseRetryAfter(response.headers['retry-after'], answeredAt);
        if (retryAfterMs !== undefined) Object.assign(result, { retryAfterMs, answeredAt });
      }
      return result;
    } catch (error) {
      const result: AttemptResult = {
        statusCode: null,
        errorMessage: describe(error, timeoutMs),
        durationMs: elapsed(),
      };
      const failure = failureOf(error);
      if (failure) result.failure = failure;
      return result;
    } finally {
      release();
    }
  };
}

function errorFor(status: number): string | null {
  if (status >= 200 && status < 300) return null;
  if (status >= 300 && status < 400) return `HTTP ${status}: redirects are not followed`;
  return `HTTP ${status}`;
}

type TransportError = { name?: string; code?: string; message?: string; cause?: { code?: string; message?: string } };

const isTimeout = (err: TransportError) =>
  err.name === 'TimeoutError' || err.code === 'UND_ERR_HEADERS_TIMEOUT' || err.code === 'UND_ERR_BODY_TIMEOUT';

/** Failures that say the endpoint is overloaded or down (not a refused address, a DNS miss or a bad URL). */
const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'ETIMEDOUT']);
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
]);

function failureOf(error: unknown): AttemptResult['failure'] {
  const err = error as TransportError;
  if (isTimeout(err)) return 'timeout';
  const code = err.cause?.code ?? err.code ?? '';
  if (TIMEOUT_CODES.has(code)) return 'timeout';
  return CONNECTION_CODES.has(code) ? 'connection' : undefined;
}

function describe(error: unknown, timeoutMs: number): string {
  const err = error as TransportError;
  if (isTimeout(err)) return `no answer within ${timeoutMs} ms`;
  const cause = err.cause?.message ?? err.message ?? String(error);
  return `${err.cause?.code ?? err.code ?? 'ERROR'}: ${cause}`;
}
