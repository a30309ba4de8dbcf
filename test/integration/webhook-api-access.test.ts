// Who may call the webhook API (spec Authentication, DESIGN §5 §7): 401 without a usable token (forged tokens
// included), 403 for a client not registered on the API or registered to another tenant, 404 for another tenant's
// ids with nothing changed; and the OpenAPI documents of both APIs.
import { createHmac, createPublicKey } from 'node:crypto';
import path from 'node:path';
import { createSigner } from 'fast-jwt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newId } from '../../core/ids.ts';
import { loadOrCreateSigningKey, type SigningKey } from '../../infra/identity-provider.ts';
import { repoRoot } from '../../infra/processes.ts';
import {
  call,
  expectProblem,
  startWebhookApi,
  subscriptionBody,
  uniqueTenant,
  WEBHOOKS,
  type DeliveryView,
  type Page,
  type SubscriptionView,
  type WebhookApi,
} from '../support/webhook-api.ts';

/** Every operation of the webhook API, with a body where it takes one. */
function operations(subscriptionId: string, deliveryId: string): [string, string, unknown?][] {
  return [
    ['POST', '/Subscriptions', subscriptionBody()],
    ['GET', '/Subscriptions'],
    ['GET', `/Subscriptions/${subscriptionId}`],
    ['PATCH', `/Subscriptions/${subscriptionId}`, { description: 'changed' }],
    ['PATCH', `/Subscriptions/${subscriptionId}/status`, { status: 'disabled' }],
    ['POST', `/Subscriptions/${subscriptionId}/secret/rotate`],
    ['DELETE', `/Subscriptions/${subscriptionId}`],
    ['GET', '/EventTypes'],
    ['GET', '/Deliveries'],
    ['GET', `/Deliveries/${deliveryId}`],
    ['POST', `/Deliveries/${deliveryId}/replay`],
  ];
}

describe('webhook API: access', () => {
  let api: WebhookApi;
  let tenant: string;
  let token: string;
  let clientId: string;
  let owned: SubscriptionView;
  let ownedDelivery: DeliveryView;

  const hooks = <T = SubscriptionView>(method: string, path: string, bearer: string | undefined, body?: unknown) =>
    call<T>(api.base, method, `${WEBHOOKS}${path}`, { token: bearer, body });

  /** The owner's view of its subscription and delivery, and the count of its subscriptions and deliveries. */
  const snapshot = async () => ({
    subscription: (await hooks('GET', `/Subscriptions/${owned.id}`, token)).body,
    hmacSecret: (await api.gateway.subscriptions.get(tenant, owned.id))?.secrets.hmacSecret,
    subscriptions: (await hooks<Page<SubscriptionView>>('GET', '/Subscriptions', token)).body.items.length,
    delivery: (await hooks<DeliveryView>('GET', `/Deliveries/${ownedDelivery.id}`, token)).body,
    deliveries: (await hooks<Page<DeliveryView>>('GET', '/Deliveries?limit=500', token)).body.items.length,
  });

  beforeAll(async () => {
    api = await startWebhookApi();
    tenant = uniqueTenant('access');
    const client = await api.idp.client(tenant, ['webhook', 'purchase']);
    clientId = client.clientId;
    token = await api.idp.token(client);
    const created = await hooks('POST', '/Subscriptions', token, subscriptionBody({ authenticationMode: 'Hmac' }));
    expect(created.status).toBe(201);
    owned = created.body;
    // An ended delivery of the owner, so replay would be allowed for the owner.
    const eventId = newId();
    ownedDelivery = {
      id: newId(),
      eventId,
      eventType: 'purchaseOrder.validated',
      subscriptionId: owned.id,
      entityId: 'po-1',
      status: 'acknowledged',
      attemptCount: 1,
      lastStatusCode: 204,
      lastErrorMessage: null,
      nextRetryAt: null,
      queuedAt: new Date(Date.now() - 60_000).toISOString(),
      occurredAt: new Date(Date.now() - 61_000).toISOString(),
      replayOf: null,
      abandonReason: null,
    };
    await api.gateway.deliveries.createDeliveries(
      {
        tenantId: tenant,
        eventId,
        eventType: ownedDelivery.eventType,
        occurredAt: ownedDelivery.occurredAt,
        entityId: ownedDelivery.entityId,
        reference: 'PO-000001',
        resourceUrl: '/CorePurchase/REST/PurchaseOrders/po-1',
        payload: Buffer.from('{"id":"po-1"}'),
      },
      [
        {
          ...ownedDelivery,
          status: 'acknowledged',
          tenantId: tenant,
          nextRetryAt: null,
          queuedAt: new Date(ownedDelivery.queuedAt),
          signature: 'c2lnbmF0dXJl',
        },
      ],
      Date.now(),
    );
  });

  afterAll(async () => {
    await api?.close();
  });

  describe('401', () => {
    it('answers every operation without a token with 401, problem+json and WWW-Authenticate: Bearer', async () => {
      const before = await snapshot();
      for (const [method, path, body] of operations(owned.id, ownedDelivery.id)) {
        const answer = await hooks(method, path, undefined, body);
        expectProblem(answer, 401);
        expect(answer.headers.get('www-authenticate'), `${method} ${path}`).toBe('Bearer');
      }
      expect(await snapshot()).toEqual(before);
    });

    it('answers a non-Bearer or malformed Authorization header with 401', async () => {
      for (const authorization of [`Basic ${Buffer.from('a:b').toString('base64')}`, 'Bearer', 'Bearer not-a-jwt']) {
        const answer = await call(api.base, 'GET', `${WEBHOOKS}/Subscriptions`, { headers: { authorization } });
        expectProblem(answer, 401);
        expect(answer.headers.get('www-authenticate')).toMatch(/^Bearer/);
      }
    });

    describe('forged and unacceptable tokens', () => {
      let key: SigningKey;
      const now = () => Math.floor(Date.now() / 1000);
      const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

      /** The claims the identity provider would issue to the registered client, with overrides (undefined removes). */
      const claims = (overrides: Record<string, unknown> = {}) => {
        const base: Record<string, unknown> = {
          iss: `${api.idp.url}/`,
          aud: 'core-api',
          sub: `${clientId}@clients`,
          azp: clientId,
          tenant_id: tenant,
          iat: now(),
          exp: now() + 3600,
        };
        for (const [name, value] of Object.entries(overrides)) {
          if (value === undefined) delete base[name];
          else base[name] = value;
        }
        return base;
      };
      const rs256 = (payload: Record<string, unknown>, kid = key.kid) =>
        createSigner({ key: key.privateKeyPem, algorithm: 'RS256', kid, noTimestamp: true })(payload);
      const handMade = (header: Record<string, unknown>, payload: Record<string, unknown>, secret?: string) => {
        const input = `${b64(header)}.${b64(payload)}`;
        return `${input}.${secret === undefined ? '' : createHmac('sha256', secret).update(input).digest('base64url')}`;
      };

      const expectRejected = async (forged: string) => {
        const answer = await call(api.base, 'GET', `${WEBHOOKS}/Subscriptions`, { token: forged });
        expectProblem(answer, 401);
        expect(answer.headers.get('www-authenticate')).toBe('Bearer error="invalid_token"');
        expect(answer.text).not.toContain(owned.id);
        return answer;
      };

      beforeAll(async () => {
        // The very key the test identity provider signs with: only the attack makes each token unacceptable.
        key = await loadOrCreateSigningKey(path.join(repoRoot, '.local', 'test-idp-key.json'));
      });

      it('accepts a token built here with the real key and claims (the forging is sound)', async () => {
        const answer = await call<Page<SubscriptionView>>(api.base, 'GET', `${WEBHOOKS}/Subscriptions`, {
          token: rs256(claims()),
        });
        expect(answer.status, answer.text).toBe(200);
        expect(answer.body.items.map((item) => item.id)).toContain(owned.id);
      });

      it('alg none', async () => {
        await expectRejected(handMade({ alg: 'none', typ: 'JWT', kid: key.kid }, claims()));
        await expectRejected(handMade({ alg: 'none', typ: 'JWT' }, claims()));
      });

      it('HS256 signed with the RSA public key as the HMAC secret', async () => {
        const pem = createPublicKey({ key: key.publicJwk, format: 'jwk' }).export({ type: 'spki', format: 'pem' });
        for (const secret of [pem as string, JSON.stringify(key.publicJwk)]) {
          await expectRejected(handMade({ alg: 'HS256', typ: 'JWT', kid: key.kid }, claims(), secret));
        }
      });

      it('an unknown kid', async () => {
        await expectRejected(rs256(claims(), 'no-such-key'));
      });

      it('iss of another host', async () => {
        await expectRejected(rs256(claims({ iss: 'https://idp.attacker.example/' })));
        await expectRejected(rs256(claims({ iss: api.idp.url.replace('127.0.0.1', 'localhost') + '/' })));
        await expectRejected(rs256(claims({ iss: api.idp.url })));
      });

      it('a wrong audience, forged or issued by the identity provider', async () => {
        await expectRejected(rs256(claims({ aud: 'other-api' })));
        await expectRejected(rs256(claims({ aud: undefined })));
        const issued = await api.idp.client(tenant, ['webhook']);
        await expectRejected(await api.idp.token(issued, 'other-api'));
      });

      it('expired beyond the clock tolerance', async () => {
        await expectRejected(rs256(claims({ iat: now() - 7200, exp: now() - 3600 })));
      });

      it('nbf in the future', async () => {
        await expectRejected(rs256(claims({ nbf: now() + 600 })));
      });

      it('missing exp', async () => {
        await expectRejected(rs256(claims({ exp: undefined })));
      });

      it('a tampered tenant claim', async () => {
        const [header, , signature] = rs256(claims()).split('.');
        await expectRejected(`${header}.${b64(claims({ tenant_id: 'someone-else' }))}.${signature}`);
      });
    });
  });

  describe('403', () => {
    it('answers every operation of a client registered only on the purchase API with 403', async () => {
      const purchaseOnly = await api.tokenFor(tenant, ['purchase']);
      const before = await snapshot();
      for (const [method, path, body] of operations(owned.id, ownedDelivery.id)) {
        const answer = await hooks(method, path, purchaseOnly, body);
        expectProblem(answer, 403);
        expect(answer.text).not.toContain(owned.url);
      }
      expect(await snapshot()).toEqual(before);
      // Registration is per API: the same token works on the purchase API.
      expect((await call(api.base, 'GET', '/CorePurchase/REST/Items', { token: purchaseOnly })).status).toBe(200);
    });

    it('answers every operation with 403 when the webhook registration names another tenant than the token', async () => {
      const client = await api.idp.client(tenant, []);
      await api.idp.integrators.register('webhook', client.clientId, uniqueTenant('elsewhere'));
      const mismatched = await api.idp.token(client);
      const before = await snapshot();
      for (const [method, path, body] of operations(owned.id, ownedDelivery.id)) {
        expectProblem(await hooks(method, path, mismatched, body), 403);
      }
      expect(await snapshot()).toEqual(before);
    });

    it('lets a client registered read-only read every resource and answers 403 to every change, changing nothing', async () => {
      const client = await api.idp.client(tenant, []);
      await api.idp.integrators.register('webhook', client.clientId, tenant, 'read');
      const reader = await api.idp.token(client);
      const before = await snapshot();
      for (const [method, path, body] of operations(owned.id, ownedDelivery.id)) {
        const answer = await hooks(method, path, reader, body);
        if (method === 'GET') {
          expect(answer.status, `${method} ${path}: ${answer.text}`).toBe(200);
        } else {
          const problem = expectProblem(answer, 403);
          expect(problem.detail).toBe(
            `client ${client.clientId} is registered read-only on the webhook API: ${method} needs read-write access`,
          );
        }
      }
      expect(await snapshot()).toEqual(before);
      // Registering it again read-write (the default) gives it every operation; the gateway's cache holds 5 s at most.
      await api.idp.integrators.register('webhook', client.clientId, tenant);
      await expect
        .poll(
          async () =>
            (await hooks('PATCH', `/Subscriptions/${owned.id}`, reader, { description: 'by the reader' })).status,
          {
            timeout: 10_000,
            interval: 500,
          },
        )
        .toBe(200);
    });

    it('answers a client registered only on the webhook API with 403 on the purchase API', async () => {
      const webhookOnly = await api.tokenFor(tenant, ['webhook']);
      expectProblem(await call(api.base, 'GET', '/CorePurchase/REST/Items', { token: webhookOnly }), 403);
      expect((await hooks('GET', '/Subscriptions', webhookOnly)).status).toBe(200);
    });
  });

  describe('404 for ids of another tenant', () => {
    it('answers every id route with 404 and changes nothing of the owner', async () => {
      const stranger = await api.tokenFor(uniqueTenant('stranger'));
      const before = await snapshot();
      const idRoutes = operations(owned.id, ownedDelivery.id).filter(([, path]) =>
        /\/(Subscriptions|Deliveries)\//.test(path),
      );
      expect(idRoutes).toHaveLength(7);
      for (const [method, path, body] of idRoutes) {
        const answer = await hooks(method, path, stranger, body);
        expectProblem(answer, 404);
        expect(answer.text, `${method} ${path}`).not.toContain(owned.url);
      }
      expect(await snapshot()).toEqual(before);
      expect(before.subscription.status).toBe('enabled');
      expect((await hooks<Page<SubscriptionView>>('GET', '/Subscriptions', stranger)).body.items).toEqual([]);
      expect((await hooks<Page<DeliveryView>>('GET', '/Deliveries', stranger)).body.items).toEqual([]);
      // Filters naming the owner's ids find nothing either.
      for (const query of [`subscriptionId=${owned.id}`, `eventId=${ownedDelivery.eventId}`]) {
        const page = await hooks<Page<DeliveryView>>('GET', `/Deliveries?${query}`, stranger);
        expect(page.status).toBe(200);
        expect(page.body.items).toEqual([]);
      }
    });

    it('answers ids that exist nowhere with 404 for the owner too', async () => {
      for (const [method, path, body] of operations('no-such-id', 'no-such-id').filter(([, p]) =>
        p.includes('no-such'),
      )) {
        expectProblem(await hooks(method, path, token, body), 404);
      }
    });
  });

  describe('OpenAPI documents', () => {
    type Operation = { security?: Record<string, string[]>[]; tags?: string[] };
    type Document = {
      openapi: string;
      info: { title: string };
      paths: Record<string, Record<string, Operation>>;
      security?: Record<string, string[]>[];
      components?: { securitySchemes?: Record<string, { type: string; scheme?: string }> };
    };
    const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];

    const documentAt = async (url: string) => {
      const answer = await call<Document>(api.base, 'GET', url);
      expect(answer.status).toBe(200);
      expect(answer.headers.get('content-type')).toMatch(/^application\/json/);
      return answer.body;
    };

    /** Every operation as "METHOD path", each checked to require a bearer token. */
    const securedOperations = (document: Document): string[] => {
      expect(document.openapi).toMatch(/^3\.\d+\.\d+$/);
      const schemes = document.components?.securitySchemes ?? {};
      const found: string[] = [];
      for (const [route, item] of Object.entries(document.paths)) {
        for (const [method, operation] of Object.entries(item).filter(([name]) => METHODS.includes(name))) {
          const security = operation.security ?? document.security;
          expect(security, `${method} ${route}`).toBeDefined();
          expect(security!.length, `${method} ${route}`).toBeGreaterThan(0);
          for (const requirement of security!) {
            const names = Object.keys(requirement);
            expect(names.length, `${method} ${route} has an empty (anonymous) requirement`).toBeGreaterThan(0);
            for (const name of names) expect(schemes[name]).toMatchObject({ type: 'http', scheme: 'bearer' });
          }
          found.push(`${method.toUpperCase()} ${route}`);
        }
      }
      return found.sort();
    };

    it('describes exactly the webhook API operations, each requiring a bearer token', async () => {
      const document = await documentAt('/CoreWebhook/openapi.json');
      expect(document.info.title).toMatch(/Webhook/);
      expect(securedOperations(document)).toEqual(
        [
          'POST /CoreWebhook/REST/Webhooks/Subscriptions',
          'GET /CoreWebhook/REST/Webhooks/Subscriptions',
          'GET /CoreWebhook/REST/Webhooks/Subscriptions/{id}',
          'PATCH /CoreWebhook/REST/Webhooks/Subscriptions/{id}',
          'DELETE /CoreWebhook/REST/Webhooks/Subscriptions/{id}',
          'PATCH /CoreWebhook/REST/Webhooks/Subscriptions/{id}/status',
          'POST /CoreWebhook/REST/Webhooks/Subscriptions/{id}/secret/rotate',
          'POST /CoreWebhook/REST/Webhooks/Subscriptions/{id}/test',
          'GET /CoreWebhook/REST/Webhooks/EventTypes',
          'GET /CoreWebhook/REST/Webhooks/EventTypes/{name}',
          'GET /CoreWebhook/REST/Webhooks/Deliveries',
          'GET /CoreWebhook/REST/Webhooks/Deliveries/{id}',
          'POST /CoreWebhook/REST/Webhooks/Deliveries/{id}/replay',
          'POST /CoreWebhook/REST/Webhooks/Deliveries/replay',
          'GET /CoreWebhook/REST/Webhooks/ReplayJobs',
          'GET /CoreWebhook/REST/Webhooks/ReplayJobs/{id}',
          'POST /CoreWebhook/REST/Webhooks/ReplayJobs/{id}/cancel',
        ].sort(),
      );
    });

    type Schema = { $ref?: string; properties?: Record<string, unknown> };

    it.each(['/CoreWebhook/openapi.json', '/CorePurchase/openapi.json'])(
      '%s: every operation has an id, tags, and an example of the body it takes and of each answer with content',
      async (url) => {
        type Content = Record<string, { schema?: Schema & { examples?: unknown[] }; example?: unknown }>;
        type Described = Operation & {
          operationId?: string;
          requestBody?: { content: Content };
          responses: Record<string, { content?: Content }>;
        };
        const document = (await documentAt(url)) as unknown as {
          paths: Record<string, Record<string, Described>>;
          components: { schemas: Record<string, { examples?: unknown[]; example?: unknown }> };
        };
        const exampled = (content: Content | undefined) =>
          Object.values(content ?? {}).every(({ schema, example }) => {
            if (example !== undefined || (schema?.examples?.length ?? 0) > 0) return true;
            // OpenAPI 3.0 documents carry a schema's first example as `example`.
            const component = document.components.schemas[schema?.$ref?.replace('#/components/schemas/', '') ?? ''];
            return component?.example !== undefined || (component?.examples?.length ?? 0) > 0;
          });
        const ids = new Set<string>();
        for (const [route, item] of Object.entries(document.paths)) {
          for (const [method, operation] of Object.entries(item).filter(([name]) => METHODS.includes(name))) {
            const name = `${method.toUpperCase()} ${route}`;
            expect(operation.operationId, name).toMatch(/^[a-z][A-Za-z]+$/);
            ids.add(operation.operationId!);
            expect(operation.tags?.length, name).toBeGreaterThan(0);
            if (operation.requestBody) expect(exampled(operation.requestBody.content), `${name} body`).toBe(true);
            for (const [status, answer] of Object.entries(operation.responses)) {
              // Problems share one schema whose example is the 400 of a validation; successes each have their own.
              if (status.startsWith('2')) expect(exampled(answer.content), `${name} ${status}`).toBe(true);
            }
          }
        }
        expect(ids.size).toBeGreaterThan(5);
      },
    );

    it('documents a delivery with its abandonReason apart from the last error', async () => {
      const document = (await documentAt('/CoreWebhook/openapi.json')) as unknown as {
        paths: Record<
          string,
          Record<string, { responses: Record<string, { content: Record<string, { schema: Schema }> }> }>
        >;
        components: { schemas: Record<string, Schema> };
      };
      const one = document.paths['/CoreWebhook/REST/Webhooks/Deliveries/{id}']!.get!.responses['200']!;
      const schema = one.content['application/json']!.schema;
      // The answer is a named component: #/components/schemas/DeliveryDetail.
      expect(schema.$ref).toBe('#/components/schemas/DeliveryDetail');
      const properties = document.components.schemas.DeliveryDetail!.properties!;
      expect(Object.keys(properties)).toEqual(
        expect.arrayContaining(['lastStatusCode', 'lastErrorMessage', 'abandonReason', 'attempts']),
      );
    });

    it('describes only the purchase API operations in its own document, each requiring a bearer token', async () => {
      const document = await documentAt('/CorePurchase/openapi.json');
      expect(document.info.title).toMatch(/Purchase/);
      const found = securedOperations(document);
      expect(found.length).toBeGreaterThan(0);
      for (const operation of found) expect(operation).toMatch(/^[A-Z]+ \/CorePurchase\/REST\//);
      expect(found).toEqual(
        expect.arrayContaining([
          'GET /CorePurchase/REST/Items',
          'POST /CorePurchase/REST/Items',
          'GET /CorePurchase/REST/PurchaseOrders/{id}',
          'POST /CorePurchase/REST/PurchaseOrders/{id}/validate',
          'POST /CorePurchase/REST/PurchaseOrders/{id}/cancel',
        ]),
      );
    });
  });
});
