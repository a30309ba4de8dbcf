import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply } from 'fastify';
import { isUnreachable } from '../cassandra.ts';
import { ConflictError, DependencyUnavailableError, DomainError, InvalidInputError, NotFoundError } from '../errors.ts';

/** Seconds a client is asked to wait before retrying a request refused because a dependency is down. */
const RETRY_AFTER_SECONDS = 2;

/** An RFC 9457 problem document. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  errors?: { path: string; message: string }[];
}

export function sendProblem(reply: FastifyReply, problem: Omit<Problem, 'type'> & { type?: string }) {
  return reply
    .code(problem.status)
    .type('application/problem+json')
    .send({ type: problem.type ?? 'about:blank', ...problem });
}

/** The one place domain errors become HTTP answers. */
export function installErrorHandler(app: FastifyInstance): void {
  app.setErrorHandler((error: FastifyError | DomainError, request, reply) => {
    if ('validation' in error && error.validation) {
      const errors = error.validation.map((issue) => {
        const missing = (issue.params as { missingProperty?: string }).missingProperty;
        const additional = (issue.params as { additionalProperty?: string }).additionalProperty;
        const base = issue.instancePath.replace(/^\//, '').replaceAll('/', '.');
        const field = missing ?? additional;
        return {
          path: [error.validationContext === 'body' ? '' : error.validationContext, base, field]
            .filter(Boolean)
            .join('.'),
          message: additional ? 'is not a known property' : (issue.message ?? 'is invalid'),
        };
      });
      return sendProblem(reply, {
        status: 400,
        title: 'Invalid request',
        detail: errors.map((entry) => `${entry.path || 'body'} ${entry.message}`).join('; '),
        errors,
      });
    }
    if (error instanceof InvalidInputError) {
      return sendProblem(reply, { status: 400, title: 'Invalid request', detail: error.message, errors: error.errors });
    }
    if (error instanceof NotFoundError)
      return sendProblem(reply, { status: 404, title: 'Not found', detail: error.message });
    if (error instanceof ConflictError) {
      return sendProblem(reply, { status: 409, title: 'Conflict', detail: error.message });
    }
    if (error instanceof DependencyUnavailableError || isUnreachable(error)) {
      // Cassandra or Kafka is down or frozen: answer now, never hang; the same request succeeds once it is back.
      request.log.warn({ err: error, elapsedMs: Math.round(reply.elapsedTime) }, 'dependency unavailable');
      const detail =
        error instanceof DependencyUnavailableError
          ? error.message
          : 'Cassandra cannot be reached right now; retry shortly';
      return sendProblem(reply.header('retry-after', String(RETRY_AFTER_SECONDS)), {
        status: 503,
        title: 'Service unavailable',
        detail,
      });
    }
    const status = 'statusCode' in error && typeof error.statusCode === 'number' ? error.statusCode : 500;
    if (status >= 500) request.log.error({ err: error }, 'request failed');
    return sendProblem(reply, {
      status,
      title: status >= 500 ? 'Internal error' : 'Bad request',
      detail: status >= 500 ? 'the request could not be completed; it is safe to retry' : error.message,
    });
  });
  const allowed = allowedMethods(app);
  // A known path with another method is a 405 naming the methods it has (RFC 9110 §15.5.6), not a missing resource;
  // answered on request, before fastify reads a body (a QUERY without Content-Type would otherwise be a 400).
  app.addHook('onRequest', async (request, reply) => {
    const allow = request.is404 ? allowed(request.url) : undefined;
    if (allow === undefined) return;
    return sendProblem(reply.header('allow', allow), {
      status: 405,
      title: 'Method not allowed',
      detail: `${request.method} is not allowed here; allowed: ${allow}`,
    });
  });
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, { status: 404, title: 'Not found', detail: `no route ${request.method} ${request.url}` }),
  );
}

/**
 * The methods of the routes registered from now on, by path: a function answering the `Allow` value of a request URL
 * whose path some route has, or undefined. A route's `:param` matches one segment; where a path matches several routes
 * (/Deliveries/replay and /Deliveries/:id), the ones with the fewest parameters name it, as the router prefers them.
 */
function allowedMethods(app: FastifyInstance): (url: string) => string | undefined {
  const routes = new Map<string, { path: RegExp; params: number; methods: Set<string> }>();
  app.addHook('onRoute', (route) => {
    const entry = routes.get(route.url) ?? {
      path: new RegExp(`^${route.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+')}$`),
      params: route.url.split(':').length - 1,
      methods: new Set<string>(),
    };
    for (const method of [route.method].flat()) entry.methods.add(method);
    routes.set(route.url, entry);
  });
  return (url) => {
    const path = url.split('?', 1)[0]!;
    const matching = [...routes.values()].filter((route) => route.path.test(path));
    const fewest = Math.min(...matching.map((route) => route.params));
    const methods = new Set(matching.filter((route) => route.params === fewest).flatMap((route) => [...route.methods]));
    return methods.size > 0 ? [...methods].sort().join(', ') : undefined;
  };
}

/**
 * Fastify's clientErrorHandler: what Node's HTTP parser refuses before any route sees the request (a request line or
 * headers over its 16 KiB limit, a malformed request) is answered with a problem document too, as fastify's default
 * handler does with its own JSON.
 */
export function clientErrorHandler(error: Error & { code?: string }, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, detail] =
    error.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'the request line and headers exceed the 16 KiB the server reads']
      : error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'the request was not received in time']
        : [400, 'the request is not valid HTTP'];
  const title = STATUS_CODES[status]!;
  const body = JSON.stringify({ type: 'about:blank', title, status, detail });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${title}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `Content-Type: application/problem+json\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(error);
}
