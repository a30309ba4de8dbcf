import type { FastifyInstance } from 'fastify';
import { endSpan, failSpan, headersOf, startSpan, tracing, type Span } from '../tracing.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's server span while tracing is on (core/tracing.ts); undefined otherwise. */
    span: Span | undefined;
  }
}

/**
 * A server span per API request while tracing is on, child of the caller's `traceparent` when it sends one, named by
 * its route (`POST /CorePurchase/REST/PurchaseOrders/:id/validate`) and ended with its status. Handlers hand it on
 * through `traceparentOf` (the purchase service's outbox row keeps it for the event's publication).
 */
export function installRequestSpans(app: FastifyInstance): void {
  app.decorateRequest('span', undefined);
  if (!tracing()) return;
  app.addHook('onRequest', async (request) => {
    const route = request.routeOptions.url ?? request.url.split('?')[0]!;
    request.span = startSpan(`${request.method} ${route}`, 'server', request.headers, {
      'http.request.method': request.method,
      'http.route': route,
      'url.path': request.url.split('?')[0]!,
    });
  });
  app.addHook('onResponse', async (request, reply) => {
    const span = request.span;
    if (!span) return;
    span.setAttribute('http.response.status_code', reply.statusCode);
    if (reply.statusCode >= 500) failSpan(span, `HTTP ${reply.statusCode}`);
    endSpan(span);
  });
}

/** The `traceparent` naming a request's span, to hand the trace on (undefined while tracing is off). */
export function traceparentOf(request: { span: Span | undefined }): string | undefined {
  return request.span ? headersOf(request.span).traceparent : undefined;
}
