import swagger from '@fastify/swagger';
import fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from '../core/log.ts';
import { authPlugin, type IntegratorDirectory } from '../core/auth/fastify-auth.ts';
import type { TokenVerifier } from '../core/auth/verifier.ts';
import { installErrorHandler, sendProblem } from '../core/http/problem.ts';
import { purchaseRoutes } from '../producer/purchase-routes.ts';
import type { PurchaseStore } from '../producer/purchase-store.ts';
import { consoleRoutes, type ConsoleOptions } from './console-routes.ts';
import { webhookRoutes, type WebhookRoutesOptions } from './webhook-routes.ts';

export interface GatewayDeps {
  logger: Logger;
  verifier: TokenVerifier;
  integrators: IntegratorDirectory;
  webhook?: WebhookRoutesOptions;
  purchase?: { store: PurchaseStore };
  /** The operator console under /console (static files and its sign-in route), hidden from the OpenAPI documents. */
  console?: ConsoleOptions;
  /** What GET /ready checks: each dependency by name, answering whether it is usable now. */
  readiness: ReadinessCheck[];
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
    // fastify's default removeAdditional silently drops unknown properties; `additionalProperties: false` must refuse
    // them instead (400 naming the property), so a misspelt field is never ignored.
    ajv: { customOptions: { allowUnionTypes: true, removeAdditional: false } },
  });
  installErrorHandler(app);
  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: { title: 'Core Webhooks and Core Purchase APIs', version: '1.0.0' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } } },
      security: [{ bearer: [] }],
    },
  });
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
        await api.register(authPlugin, { api: 'webhook', verifier: deps.verifier, integrators: deps.integrators });
        await api.register(webhookRoutes, options);
      },
      { prefix: '/CoreWebhook/REST/Webhooks' },
    );
    app.get('/CoreWebhook/openapi.json', { schema: { hide: true } }, async () => documentFor(app, '/CoreWebhook/'));
  }
  if (deps.purchase) {
    const options = deps.purchase;
    await app.register(
      async (api) => {
        await api.register(authPlugin, { api: 'purchase', verifier: deps.verifier, integrators: deps.integrators });
        await api.register(purchaseRoutes, options);
      },
      { prefix: '/CorePurchase/REST' },
    );
    app.get('/CorePurchase/openapi.json', { schema: { hide: true } }, async () => documentFor(app, '/CorePurchase/'));
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

/** The generated OpenAPI document restricted to one API's paths. */
function documentFor(app: FastifyInstance, prefix: string) {
  const document = app.swagger() as { paths?: Record<string, unknown>; info: Record<string, unknown> };
  const paths = Object.fromEntries(Object.entries(document.paths ?? {}).filter(([path]) => path.startsWith(prefix)));
  const title = prefix === '/CoreWebhook/' ? 'Core Webhooks API' : 'Core Purchase API';
  return { ...document, info: { ...document.info, title }, paths };
}
