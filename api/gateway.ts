import { installRequestSpans } from '../core/http/request-spans.ts';
import swagger from '@fastify/swagger';
import fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { installRequestBudget, type RequestBudget } from '../core/budget.ts';
import type { Logger } from '../core/log.ts';
import { authPlugin, type IntegratorDirectory } from '../core/auth/fastify-auth.ts';
import type { TokenVerifier } from '../core/auth/verifier.ts';
import { documentOf, problemSchema, type OpenApiDocument } from '../core/http/openapi.ts';
import { clientErrorHandler, installErrorHandler, sendProblem } from '../core/http/problem.ts';
import { isUnreachable } from '../core/cassandra.ts';
import { buildValidator } from '../core/http/validation.ts';
import { purchaseRoutes } from '../producer/purchase-routes.ts';
import { purchaseComponents, purchaseOverrides } from '../producer/purchase-schemas.ts';
import type { PurchaseStore } from '../producer/purchase-store.ts';
import type { PurchaseMetrics } from '../core/metrics.ts';
import { consoleRoutes, type ConsoleOptions } from './console-routes.ts';
import { webhookRoutes, type WebhookRoutesOptions } from './webhook-routes.ts';
import { webhookComponents, webhookOverrides } from './webhook-schemas.ts';
import { replayJobRoutes, type ReplayJobRoutesOptions } from './replay-job-routes.ts';
import { replayJobOverrides } from './replay-job-schemas.ts';

export interface GatewayDeps {
  logger: Logger;
  verifier: TokenVerifier;
  integrators: IntegratorDirectory;
  webhook?: WebhookRoutesOptions;
  /** Bulk replay jobs (POST /Deliveries/replay, /ReplayJobs), in the webhook API beside its other routes. */
  replayJobs?: ReplayJobRoutesOptions;
  purchase?: { store: PurchaseStore; metrics?: PurchaseMetrics };
  /** Each request's duration, by method, route template and status (gateway_request_duration_seconds). */
  requestMetrics?: (method: string, route: string, status: number, ms: number) => void;
  /** The operator console under /console (static files and its sign-in route), hidden from the OpenAPI documents. */
  console?: ConsoleOptions;
  /** What GET /ready checks: each dependency by name, answering whether it is usable now. */
  readiness: ReadinessCheck[];
  /**
   * How long one API request may wait for its dependencies in all (GATEWAY_REQUEST_BUDGET, or the degraded budget
   * while a dependency has just failed), counted from its arrival: each Cassandra or Kafka call gets what is left, and
   * a spent budget answers 503. Absent: no budget.
   */
  requestBudget?: RequestBudget;
  /** How long a request waits for a lookup it shares with others (authentication's): GATEWAY_DEPENDENCY_TIMEOUT. */
  lookupTimeoutMs?: number;
}

/** One dependency of readiness; `ready` may also throw (not ready). */
export interface ReadinessCheck {
  name: string;
  ready: () => Promise<boolean> | boolean;
}

/** A dependency that has not answered within this is not ready (a load balancer's probe must not hang). */
const READINESS_TIMEOUT_MS = 2_000;

/** Both APIs on one fastify instance: each behind its own auth context, with OpenAPI documents per API. */
export async function buildGateway(deps: GatewayDeps): Promise<FastifyInstance> {
  const app: FastifyInstance = fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    bodyLimit: 1024 * 1024,
    // Ids longer than their schema allows are a 400 from validation, not fastify's 414 (a non-problem body); a request
    // line is bounded anyway by Node's 16 KiB header limit.
    routerOptions: { maxParamLength: 16 * 1024 },
    // Bodies are validated without type coercion, the query string and path with it (validation.ts).
    schemaController: { compilersFactory: { buildValidator } },
    // A path that is not valid percent-encoding: a problem+json 400 like every other refusal.
    frameworkErrors: (error, _request, reply) =>
      sendProblem(reply, { status: 400, title: 'Invalid request', detail: error.message }),
    clientErrorHandler,
  });
  installErrorHandler(app);
  const observe = deps.requestMetrics;
  if (observe) {
    // The route's template, not its path: the label set stays bounded whatever ids the requests carry.
    app.addHook('onResponse', async (request, reply) => {
      observe(request.method, request.routeOptions.url ?? 'unmatched', reply.statusCode, reply.elapsedTime);
    });
  }
  installRequestSpans(app);
  if (deps.requestBudget) installRequestBudget(app, deps.requestBudget, isUnreachable);
  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: { title: 'Core Webhooks and Core Purchase APIs', version: '1.0.0' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } } },
      security: [{ bearer: [] }],
    },
    // Shared schemas are components under their own $id (Subscription, Problem…), referenced where routes use them.
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) => (json.$id as string | undefined) ?? `def-${i}`,
    },
  });
  app.addSchema(problemSchema);
  app.get('/health', { schema: { hide: true } }, async () => ({ status: 'ok' }));
  app.get('/ready', { schema: { hide: true } }, async (_request, reply) => {
    const missing = await notReady(deps.readiness);
    if (missing.length === 0) return { status: 'ready' };
    return sendProblem(reply.header('retry-after', '1'), {
      status: 503,
      title: 'Not ready',
      detail: `waiting for ${missing.join('; ')}`,
    });
  });

  if (deps.webhook) {
    const options = deps.webhook;
    await app.register(
      async (api) => {
        // Event types are judged against the catalogue: until it holds what its topic held at start, a valid type
        // could be refused as unknown. Subscription writes wait (503, Retry-After) rather than get a wrong 400.
        api.addHook('onRequest', async (request, reply) => {
          if (options.catalogue.caughtUp || !judgesEventTypes(request.method, request.routeOptions.url)) return;
          return sendProblem(reply.header('retry-after', '1'), {
            status: 503,
            title: 'Catalogue loading',
            detail: 'the event-type catalogue is still being read; retry shortly',
          });
        });
        await api.register(authPlugin, {
          api: 'webhook',
          verifier: deps.verifier,
          integrators: deps.integrators,
          lookupTimeoutMs: deps.lookupTimeoutMs,
        });
        for (const schema of webhookComponents) api.addSchema(schema);
        await api.register(webhookRoutes, options);
        if (deps.replayJobs) await api.register(replayJobRoutes, deps.replayJobs);
      },
      { prefix: '/CoreWebhook/REST/Webhooks' },
    );
    app.get('/CoreWebhook/openapi.json', { schema: { hide: true } }, async () =>
      documentOf(app.swagger() as OpenApiDocument, '/CoreWebhook/', 'Core Webhooks API', {
        ...webhookOverrides(options.rules.allowHttp, options.catalogue.list()),
        ...replayJobOverrides,
      }),
    );
  }
  if (deps.purchase) {
    const options = deps.purchase;
    await app.register(
      async (api) => {
        await api.register(authPlugin, {
          api: 'purchase',
          verifier: deps.verifier,
          integrators: deps.integrators,
          lookupTimeoutMs: deps.lookupTimeoutMs,
        });
        for (const schema of purchaseComponents) api.addSchema(schema);
        await api.register(purchaseRoutes, options);
      },
      { prefix: '/CorePurchase/REST' },
    );
    app.get('/CorePurchase/openapi.json', { schema: { hide: true } }, async () =>
      documentOf(app.swagger() as OpenApiDocument, '/CorePurchase/', 'Core Purchase API', purchaseOverrides()),
    );
  }
  if (deps.console) await app.register(consoleRoutes, deps.console);
  return app;
}

/** The routes whose answer depends on the event-type catalogue: creating a subscription and changing one. */
function judgesEventTypes(method: string, url: string | undefined): boolean {
  return (
    (method === 'POST' && url?.endsWith('/Subscriptions') === true) ||
    (method === 'PATCH' && url?.endsWith('/Subscriptions/:id') === true)
  );
}

/** Names (with the reason) of the checks that fail, throw or do not answer in time. */
async function notReady(checks: ReadinessCheck[]): Promise<string[]> {
  const results = await Promise.all(
    checks.map(async (check) => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<string>((resolve) => {
        timer = setTimeout(() => resolve('no answer'), READINESS_TIMEOUT_MS);
      });
      try {
        const ready = Promise.resolve(check.ready()).then((ok) => (ok ? undefined : 'not ready'));
        const reason = await Promise.race([ready, late]);
        return reason === undefined ? undefined : `${check.name} (${reason})`;
      } catch (error) {
        return `${check.name} (${(error as Error).message})`;
      } finally {
        clearTimeout(timer);
      }
    }),
  );
  return results.filter((entry) => entry !== undefined);
}
