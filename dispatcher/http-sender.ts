import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP } from 'node:net';
import { Agent, type Dispatcher } from 'undici';
import { blockedReason, type Cidr } from '../core/ssrf.ts';
import { OriginGate } from './origin-gate.ts';
import { parseRetryAfter, type AttemptResult } from './outcome.ts';

/** An outbound POST; the caller builds headers and body. */
export interface OutboundRequest {
  url: string;
  headers: Record<string, string>;
  body: Buffer | string;
  /** Whose request it is (the subscription): an origin's connections are shared fairly between them. */
  key?: string;
}

/** Sends one attempt; never throws for the subscriber's failures, they are results. */
export type Sender = (outbound: OutboundRequest) => Promise<AttemptResult>;

/**
 * An undici agent with keep-alive pools per origin whose DNS lookup refuses blocked addresses, so the address actually
 * connected to passes the SSRF rules at connect time (DNS rebinding).
 */
export function createGuardedAgent(allowed: Cidr[], connectTimeoutMs: number, connectionsPerOrigin = 512): Agent {
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
    // HTTP/1.1 only: undici 8 negotiates HTTP/2 with servers that offer it, where one connection multiplexes up to 100
    // streams. The per-origin bound below counts connections as requests in flight, and the failure codes we classify
    // are HTTP/1's; HTTP/2 toward subscribers is a change of its own, with its own tests.
    allowH2: false,
    connect: { lookup, timeout: connectTimeoutMs },
    keepAliveTimeout: 30_000,
    connections: connectionsPerOrigin,
    pipelining: 1,
  });
}

/** Bytes of a response body read at most; the rest is not waited for (the connection is dropped). */
const RESPONSE_BODY_LIMIT = 64 * 1024;

/**
 * POSTs with a whole-attempt deadline; redirects are failures; the response body is drained, never read. At most
 * `connectionsPerOrigin` requests per origin are handed to the agent (whose pool has that many connections): the rest
 * wait here, before their attempt timer starts, so a queue for a busy host never turns into false "no answer" failures;
 * they wait their subscription's turn, not behind other subscriptions' slow or hanging requests (OriginGate).
 */
export function createSender(
  dispatcher: Dispatcher,
  allowed: Cidr[],
  timeoutMs: number,
  connectionsPerOrigin = 512,
  // Shared fairly between the subscriptions sending to one origin (origin-gate.ts).
  gate = new OriginGate(connectionsPerOrigin),
): Sender {
  return async ({ url, headers, body, key }) => {
    const target = new URL(url);
    const host = target.hostname.replace(/^\[|\]$/g, '');
    // A literal IP never goes through DNS lookup: check it here.
    const literalBlock = isIP(host) ? blockedReason(host, allowed) : undefined;
    if (literalBlock) return { statusCode: null, errorMessage: `blocked address: ${literalBlock}`, durationMs: 0 };
    const release = await gate.acquire(target.origin, key ?? '');
    try {
      return await post(dispatcher, target, headers, body, timeoutMs);
    } finally {
      release();
    }
  };
}

/**
 * One POST through undici's dispatch API: a plain handler and one timer per attempt. undici's request() wraps each
 * call in an async resource, a body stream and abort-signal listeners; this path costs a third of its CPU per POST.
 */
function post(
  dispatcher: Dispatcher,
  target: URL,
  headers: Record<string, string>,
  body: Buffer | string,
  timeoutMs: number,
): Promise<AttemptResult> {
  return new Promise((resolve) => {
    const started = performance.now();
    let controller: Dispatcher.DispatchController | undefined;
    let settled = false;
    let statusCode = 0;
    let retryAfter: string | undefined;
    let received = 0;
    const settle = (result: AttemptResult, dropConnection: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      resolve(result);
      if (dropConnection) controller?.abort(new Error('attempt over'));
    };
    const failed = (error: unknown) => {
      const result: AttemptResult = {
        statusCode: null,
        errorMessage: describe(error, timeoutMs),
        durationMs: elapsed(),
      };
      const failure = failureOf(error);
      if (failure) result.failure = failure;
      settle(result, false);
    };
    const answered = () => {
      const result: AttemptResult = { statusCode, errorMessage: errorFor(statusCode), durationMs: elapsed() };
      if (statusCode === 429 || statusCode === 503) {
        const answeredAt = Date.now();
        const retryAfterMs = parseRetryAfter(retryAfter, answeredAt);
        if (retryAfterMs !== undefined) Object.assign(result, { retryAfterMs, answeredAt });
      }
      return result;
    };
    const elapsed = () => Math.round(performance.now() - started);
    // The whole attempt, connection to the body's end: an answer whose body does not end in time is no answer.
    const deadline = setTimeout(() => {
      settle(
        {
          statusCode: null,
          errorMessage: `no answer within ${timeoutMs} ms`,
          durationMs: elapsed(),
          failure: 'timeout',
        },
        true,
      );
    }, timeoutMs);
    try {
      dispatcher.dispatch(
        {
          origin: target.origin,
          path: target.pathname + target.search,
          method: 'POST',
          headers,
          body,
          headersTimeout: timeoutMs,
          bodyTimeout: timeoutMs,
        },
        {
          onRequestStart(requestController) {
            controller = requestController;
            // The deadline passed while the request waited for its connection.
            if (settled) requestController.abort(new Error('attempt over'));
          },
          onResponseStart(_controller, status, responseHeaders) {
            statusCode = status;
            const header = responseHeaders['retry-after'];
            retryAfter = Array.isArray(header) ? header[0] : header;
            // The body is drained, never read: one larger than the limit is not waited for.
            if (Number(responseHeaders['content-length']) > RESPONSE_BODY_LIMIT) settle(answered(), true);
          },
          onResponseData(_controller, chunk) {
            received += chunk.length;
            if (received > RESPONSE_BODY_LIMIT) settle(answered(), true);
          },
          onResponseEnd() {
            settle(answered(), false);
          },
          onResponseError(_controller, error) {
            failed(error);
          },
        },
      );
    } catch (error) {
      failed(error);
    }
  });
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
