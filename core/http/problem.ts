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
      request.log.warn({ err: error }, 'dependency unavailable');
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
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, { status: 404, title: 'Not found', detail: `no route ${request.method} ${request.url}` }),
  );
}
