import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildIdentityProvider, loadOrCreateSigningKey } from '../../infra/identity-provider.ts';
import type { Registration as IntegratorRegistration } from '../integrators/integrator-store.ts';
import { installRequestBudget, RequestBudget } from '../budget.ts';
import { isUnreachable } from '../cassandra.ts';
import { installErrorHandler } from '../http/problem.ts';
import { authPlugin, type AuthPluginOptions, type IntegratorDirectory } from './fastify-auth.ts';
import { AuthError, createTokenVerifier, type AuthSettings } from './verifier.ts';

// The plugin in front of a tiny API, verifying real tokens of a real identity provider on a loopback port.

const secrets: Record<string, { secret: string; tenantId: string }> = {
  'client-a': { secret: 'secret-a', tenantId: 'tenant-a' },
  'client-b': { secret: 'secret-b', tenantId: 'tenant-b' },
  'client-c': { secret: 'secret-c', tenantId: 'tenant-c' },
};

let dir: string;
let idp: FastifyInstance;
let issuer: string;
let settings: AuthSettings;
const tokens: Record<string, string> = {};

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fastify-auth-test-'));
  idp = buildIdentityProvider({
    issuer: () => issuer,
    key: await loadOrCreateSigningKey(join(dir, 'key.json')),
    defaultAudience: 'core-api',
    clients: {
      async verify(id, secret) {
        const client = secrets[id];
        return client && client.secret === secret ? { tenantId: client.tenantId } : undefined;
      },
    },
  });
  await idp.listen({ port: 0, host: '127.0.0.1' });
  issuer = `http://127.0.0.1:${(idp.server.address() as AddressInfo).port}/`;
  settings = { issuer, audience: 'core-api', jwksUrl: `${issuer}.well-known/jwks.json`, tenantClaim: 'tenant_id' };
  for (const [clientId, { secret }] of Object.entries(secrets)) {
    const response = await fetch(`${issuer}oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ client_id: clientId, client_secret: secret, grant_type: 'client_credentials' }),
    });
    tokens[clientId] = ((await response.json()) as { access_token: string }).access_token;
  }
});

afterAll(async () => {
  await idp.close();
  await rm(dir, { recursive: true, force: true });
});

/** A directory over a mutable map of `api:client` to its tenant (read-write) or registration, counting lookups. */
function directory(registrations: Record<string, string | IntegratorRegistration>) {
  const calls: string[] = [];
  const integrators: IntegratorDirectory = {
    async registrationOf(api, clientId) {
      calls.push(`${api}:${clientId}`);
      const registration = registrations[`${api}:${clientId}`];
      return typeof registration === 'string' ? { tenantId: registration, access: 'read-write' } : registration;
    },
  };
  return { integrators, calls, registrations };
}

async function buildApp(integrators: IntegratorDirectory, extra: Partial<AuthPluginOptions> = {}) {
  const app = fastify();
  app.get('/openapi.json', async () => ({ public: true }));
  await app.register(
    async (api) => {
      await api.register(authPlugin, {
        api: 'webhook',
        verifier: createTokenVerifier(settings),
        integrators,
        ...extra,
      });
      api.get('/me', async (request) => request.principal);
      for (const method of ['POST', 'PUT', 'PATCH', 'DELETE'] as const) {
        api.route({ method, url: '/things', handler: async (request) => ({ changedBy: request.principal.clientId }) });
      }
      api.register(async (nested) => {
        nested.get('/nested', async (request) => request.principal);
      });
    },
    { prefix: '/api' },
  );
  await app.ready();
  return app;
}

const bearer = (clientId: string) => ({ authorization: `Bearer ${tokens[clientId]}` });

describe('authPlugin', () => {
  it('lets a registered client of the token tenant through, with request.principal set', async () => {
    const { integrators } = directory({ 'webhook:client-a': 'tenant-a' });
    const app = await buildApp(integrators);
    for (const url of ['/api/me', '/api/nested']) {
      const response = await app.inject({ url, headers: bearer('client-a') });
      expect(response.statusCode).toBe(200);
      expect(response.json()).toEqual({ clientId: 'client-a', tenantId: 'tenant-a', subject: 'client-a@clients' });
    }
  });

  it('leaves routes outside the context where it is registered public', async () => {
    const app = await buildApp(directory({}).integrators);
    const response = await app.inject({ url: '/openapi.json' });
    expect(response.statusCode).toBe(200);
  });

  it('answers 401 problem+json with WWW-Authenticate: Bearer without a token', async () => {
    const { integrators, calls } = directory({ 'webhook:client-a': 'tenant-a' });
    const app = await buildApp(integrators);
    for (const headers of [{}, { authorization: 'Basic eDp5' }]) {
      const response = await app.inject({ url: '/api/me', headers });
      expect(response.statusCode).toBe(401);
      expect(response.headers['www-authenticate']).toBe('Bearer');
      expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(response.json()).toEqual({
        type: 'about:blank',
        title: 'Unauthorized',
        status: 401,
        detail: expect.any(String),
      });
    }
    expect(calls).toEqual([]);
  });

  it('answers 401 with error="invalid_token" to a bad token', async () => {
    const app = await buildApp(directory({ 'webhook:client-a': 'tenant-a' }).integrators);
    const [header, payload] = (tokens['client-a'] as string).split('.');
    for (const authorization of ['Bearer', 'Bearer not-a-jwt', `Bearer ${header}.${payload}.`]) {
      const response = await app.inject({ url: '/api/me', headers: { authorization } });
      expect(response.statusCode, authorization).toBe(401);
      expect(response.headers['www-authenticate']).toBe('Bearer error="invalid_token"');
      expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(response.json()).toMatchObject({ status: 401, title: 'Unauthorized' });
    }
  });

  it('answers 403 to a valid token of a client not registered on this API', async () => {
    // client-a is registered on the purchase API only: onboarding there does not onboard it here.
    const { integrators, calls } = directory({ 'purchase:client-a': 'tenant-a' });
    const app = await buildApp(integrators);
    const response = await app.inject({ url: '/api/me', headers: bearer('client-a') });
    expect(response.statusCode).toBe(403);
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(response.headers['www-authenticate']).toBeUndefined();
    expect(response.json()).toEqual({
      type: 'about:blank',
      title: 'Forbidden',
      status: 403,
      detail: expect.stringContaining('webhook'),
    });
    expect(calls).toEqual(['webhook:client-a']);
  });

  it('answers 403 when the client is registered to another tenant than the token names', async () => {
    const app = await buildApp(directory({ 'webhook:client-b': 'tenant-a' }).integrators);
    const response = await app.inject({ url: '/api/me', headers: bearer('client-b') });
    expect(response.statusCode).toBe(403);
    expect(response.json()).toMatchObject({ status: 403, detail: expect.stringContaining('tenant-b') });
  });

  it('lets a read-only integrator read (GET, HEAD) and answers 403 to every method that changes something', async () => {
    const { integrators } = directory({ 'webhook:client-a': { tenantId: 'tenant-a', access: 'read' } });
    const app = await buildApp(integrators);
    expect((await app.inject({ method: 'GET', url: '/api/me', headers: bearer('client-a') })).statusCode).toBe(200);
    expect((await app.inject({ method: 'HEAD', url: '/api/me', headers: bearer('client-a') })).statusCode).toBe(200);
    for (const method of ['POST', 'PUT', 'PATCH', 'DELETE'] as const) {
      const response = await app.inject({ method, url: '/api/things', headers: bearer('client-a'), payload: {} });
      expect(response.statusCode, method).toBe(403);
      expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
      expect(response.json()).toEqual({
        type: 'about:blank',
        title: 'Forbidden',
        status: 403,
        detail: `client client-a is registered read-only on the webhook API: ${method} needs read-write access`,
      });
    }
  });

  it('lets a read-write integrator change things', async () => {
    const { integrators } = directory({ 'webhook:client-a': { tenantId: 'tenant-a', access: 'read-write' } });
    const app = await buildApp(integrators);
    for (const method of ['POST', 'PUT', 'PATCH', 'DELETE'] as const) {
      const response = await app.inject({ method, url: '/api/things', headers: bearer('client-a'), payload: {} });
      expect(response.statusCode, method).toBe(200);
      expect(response.json()).toEqual({ changedBy: 'client-a' });
    }
  });

  it('checks the tenant before the access level: a read-only client of another tenant is told so', async () => {
    const app = await buildApp(directory({ 'webhook:client-b': { tenantId: 'tenant-a', access: 'read' } }).integrators);
    const response = await app.inject({ method: 'POST', url: '/api/things', headers: bearer('client-b') });
    expect(response.statusCode).toBe(403);
    expect(response.json()).toMatchObject({ detail: expect.stringContaining('not registered to tenant tenant-b') });
  });

  it('caches lookups briefly, so a revoke takes effect within the TTL', async () => {
    let clock = 0;
    const { integrators, calls, registrations } = directory({ 'webhook:client-a': 'tenant-a' });
    const app = await buildApp(integrators, { integratorCacheTtlMs: 5_000, now: () => clock });

    const statuses = async () => (await app.inject({ url: '/api/me', headers: bearer('client-a') })).statusCode;
    expect(await statuses()).toBe(200);
    expect(await statuses()).toBe(200);
    expect(calls).toHaveLength(1);

    delete registrations['webhook:client-a'];
    clock += 4_999;
    expect(await statuses()).toBe(200); // still cached
    expect(calls).toHaveLength(1);

    clock += 1;
    expect(await statuses()).toBe(403); // revoke seen
    expect(calls).toHaveLength(2);
    expect(await statuses()).toBe(403); // the negative answer is cached too
    expect(calls).toHaveLength(2);

    registrations['webhook:client-a'] = 'tenant-a';
    clock += 5_000;
    expect(await statuses()).toBe(200);
    expect(calls).toHaveLength(3);
  });

  it('bounds the cache', async () => {
    const { integrators, calls } = directory({
      'webhook:client-a': 'tenant-a',
      'webhook:client-b': 'tenant-b',
      'webhook:client-c': 'tenant-c',
    });
    const app = await buildApp(integrators, { integratorCacheSize: 2 });
    for (const client of ['client-a', 'client-b', 'client-c', 'client-a']) {
      expect((await app.inject({ url: '/api/me', headers: bearer(client) })).statusCode).toBe(200);
    }
    expect(calls).toEqual(['webhook:client-a', 'webhook:client-b', 'webhook:client-c', 'webhook:client-a']);
  });

  it('does not cache a failed lookup', async () => {
    let fail = true;
    let lookups = 0;
    const app = await buildApp({
      async registrationOf() {
        lookups += 1;
        if (fail) throw new Error('store down');
        return { tenantId: 'tenant-a', access: 'read-write' };
      },
    });
    expect((await app.inject({ url: '/api/me', headers: bearer('client-a') })).statusCode).toBe(500);
    fail = false;
    expect((await app.inject({ url: '/api/me', headers: bearer('client-a') })).statusCode).toBe(200);
    expect(lookups).toBe(2);
  });

  it('shares one lookup among concurrent requests of a client', async () => {
    const { integrators, calls } = directory({ 'webhook:client-a': 'tenant-a' });
    const app = await buildApp(integrators);
    const responses = await Promise.all(
      Array.from({ length: 10 }, () => app.inject({ url: '/api/me', headers: bearer('client-a') })),
    );
    expect(responses.map((response) => response.statusCode)).toEqual(Array(10).fill(200));
    expect(calls).toHaveLength(1);
  });

  it('lets errors other than AuthError reach the error handler', async () => {
    const app = fastify();
    await app.register(authPlugin, {
      api: 'purchase',
      verifier: {
        async verify() {
          throw new Error('boom');
        },
      },
      integrators: directory({}).integrators,
    });
    app.get('/x', async () => 'ok');
    expect((await app.inject({ url: '/x', headers: bearer('client-a') })).statusCode).toBe(500);
  });

  it('maps an AuthError of any verifier to 401', async () => {
    const app = fastify();
    await app.register(authPlugin, {
      api: 'purchase',
      verifier: {
        async verify() {
          throw new AuthError('TOKEN_INVALID', 'nope');
        },
      },
      integrators: directory({}).integrators,
    });
    app.get('/x', async () => 'ok');
    const response = await app.inject({ url: '/x' });
    expect(response.statusCode).toBe(401);
    expect(response.json()).toMatchObject({ detail: 'nope' });
  });

  it("answers 503 within the request's budget while the directory's lookup, shared by the requests waiting, hangs", async () => {
    // As the gateway has them: the budget installed on the root, the plugin inside the API's context. Under Cassandra's
    // quorum loss the shared lookup waited for the driver's own bound (1.5 s) and every request with it, whatever its
    // budget (1 s while the API is degraded).
    let lookups = 0;
    const slow: IntegratorDirectory = {
      async registrationOf() {
        lookups += 1;
        await new Promise((resolve) => setTimeout(resolve, 2_000));
        return { tenantId: 'tenant-a', access: 'read-write' };
      },
    };
    // The budget (300 ms) rules, then, with a budget of 10 s, the bound of one call (lookupTimeoutMs, 300 ms): the first
    // requests after the quorum was lost, before any had failed, waited for the lookup's 1.5 s plus a speculative try.
    for (const [budgetMs, lookupTimeoutMs] of [
      [300, undefined],
      [10_000, 300],
    ] as const) {
      const app = fastify();
      installErrorHandler(app);
      installRequestBudget(app, new RequestBudget(budgetMs, budgetMs, 10_000), isUnreachable);
      await app.register(
        async (api) => {
          const verifier = createTokenVerifier(settings);
          await api.register(authPlugin, { api: 'webhook', verifier, integrators: slow, lookupTimeoutMs });
          api.get('/me', async (request) => request.principal);
        },
        { prefix: '/api' },
      );
      await app.ready();
      lookups = 0;
      const started = Date.now();
      const answers = await Promise.all([1, 2].map(() => app.inject({ url: '/api/me', headers: bearer('client-a') })));
      const elapsed = Date.now() - started;
      expect(answers.map((answer) => answer.statusCode)).toEqual([503, 503]);
      expect(answers[0]!.json()).toMatchObject({ status: 503, detail: expect.stringMatching(/Cassandra/) });
      expect(answers[0]!.headers['retry-after']).toBeDefined();
      expect(elapsed).toBeLessThan(1_500);
      expect(lookups).toBe(1);
      await app.close();
    }
  });
});
