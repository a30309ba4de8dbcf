import swagger from '@fastify/swagger';
import fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Logger } from '../core/log.ts';
import { authPlugin, type IntegratorDirectory } from '../core/auth/fastify-auth.ts';
import type { TokenVerifier } from '../core/auth/verifier.ts';
import { installErrorHandler } from '../core/http/problem.ts';
import { purchaseRoutes } from '../producer/purchase-routes.ts';
import type { PurchaseStore } from '../producer/purchase-store.ts';
import { webhookRoutes, type WebhookRoutesOptions } from './webhook-routes.ts';

export interface GatewayDeps {
  logger: Logger;
  verifier: TokenVerifier;
  integrators: IntegratorDirectory;
  webhook?: WebhookRoutesOptions;
  purchase?: { store: PurchaseStore };
}

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

  if (deps.webhook) {
    const options = deps.webhook;
    await app.register(
      async (api) => {
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
  return app;
}

/** The generated OpenAPI document restricted to one API's paths. */
function documentFor(app: FastifyInstance, prefix: string) {
  const document = app.swagger() as { paths?: Record<string, unknown>; info: Record<string, unknown> };
  const paths = Object.fromEntries(Object.entries(document.paths ?? {}).filter(([path]) => path.startsWith(prefix)));
  const title = prefix === '/CoreWebhook/' ? 'Core Webhooks API' : 'Core Purchase API';
  return { ...document, info: { ...document.info, title }, paths };
}
