import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { MockAgent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONSOLE_CSP } from './console-routes.ts';
import { buildGateway } from './gateway.ts';

// The console's static files and its sign-in route, through the gateway with app.inject(): content types, cache
// validators, no way out of the folder, hidden from OpenAPI, and the token request forwarded to the identity provider.

const TOKEN_URL = 'http://idp.test/oauth/token';

describe('operator console routes', () => {
  const root = mkdtempSync(path.join(tmpdir(), 'console-'));
  const outside = mkdtempSync(path.join(tmpdir(), 'outside-'));
  const agent = new MockAgent();
  agent.disableNetConnect();
  let app: Awaited<ReturnType<typeof buildGateway>>;

  beforeAll(async () => {
    writeFileSync(path.join(root, 'index.html'), '<!doctype html><title>console</title>');
    writeFileSync(path.join(root, 'app.js'), 'export const x = 1;');
    mkdirSync(path.join(root, 'views'));
    writeFileSync(path.join(root, 'views', 'list.js'), 'export const y = 2;');
    writeFileSync(path.join(root, 'style.css'), 'body{}');
    writeFileSync(path.join(root, 'notes.ts'), 'secret source');
    writeFileSync(path.join(root, '.env.js'), 'hidden');
    writeFileSync(path.join(outside, 'secret.js'), 'outside');
    symlinkSync(path.join(outside, 'secret.js'), path.join(root, 'link.js'));
    app = await buildGateway({
      logger: pino({ level: 'silent' }),
      verifier: { verify: async () => ({ clientId: 'c', tenantId: 't', subject: 'c@clients' }) },
      integrators: { registrationOf: async () => undefined },
      readiness: [],
      console: { root, tokenUrl: TOKEN_URL, audience: 'core-api', dispatcher: agent },
    });
    await app.ready();
  });
  afterAll(async () => {
    await app.close();
    await agent.close();
  });

  it('serves its files with their content type, the CSP and revalidation by ETag', async () => {
    const redirect = await app.inject({ method: 'GET', url: '/console' });
    expect(redirect.statusCode).toBe(308);
    expect(redirect.headers.location).toBe('/console/');

    const index = await app.inject({ method: 'GET', url: '/console/' });
    expect(index.statusCode).toBe(200);
    expect(index.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(index.headers['content-security-policy']).toBe(CONSOLE_CSP);
    expect(CONSOLE_CSP).toMatch(/connect-src 'self'/);
    expect(CONSOLE_CSP).not.toMatch(/unsafe|\*/);
    expect(index.headers['x-content-type-options']).toBe('nosniff');
    expect(index.headers['cache-control']).toBe('no-cache');
    const etag = index.headers.etag as string;
    expect(etag).toMatch(/^".+"$/);
    const again = await app.inject({ method: 'GET', url: '/console/', headers: { 'if-none-match': etag } });
    expect(again.statusCode).toBe(304);
    expect(again.body).toBe('');

    const script = await app.inject({ method: 'GET', url: '/console/views/list.js' });
    expect(script.statusCode).toBe(200);
    expect(script.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(script.body).toBe('export const y = 2;');
    const css = await app.inject({ method: 'GET', url: '/console/style.css' });
    expect(css.headers['content-type']).toBe('text/css; charset=utf-8');
  });

  it('serves a file as it is now (edited without a restart), and 404 once removed', async () => {
    const before = await app.inject({ method: 'GET', url: '/console/app.js' });
    writeFileSync(path.join(root, 'app.js'), 'export const x = 2;');
    const after = await app.inject({ method: 'GET', url: '/console/app.js' });
    expect(after.body).toBe('export const x = 2;');
    expect(after.headers.etag).not.toBe(before.headers.etag);
    rmSync(path.join(root, 'app.js'));
    expect((await app.inject({ method: 'GET', url: '/console/app.js' })).statusCode).toBe(404);
  });

  it('serves nothing outside its folder, no dotfile, no unknown kind of file and no symbolic link', async () => {
    for (const url of [
      '/console/../package.json',
      '/console/%2e%2e/package.json',
      '/console/..%2fpackage.json',
      '/console/views/..%2f..%2fpackage.json',
      '/console/%2e%2e%2f%2e%2e%2fetc%2fpasswd',
      '/console//etc/passwd',
      '/console/notes.ts',
      '/console/.env.js',
      '/console/link.js',
      '/console/missing.js',
      '/console/views',
    ]) {
      const answer = await app.inject({ method: 'GET', url });
      expect(answer.statusCode, url).toBe(404);
      expect(answer.body, url).not.toMatch(/outside|secret source|hidden|"name": "core-webhooks"/);
    }
  });

  it('stays out of the OpenAPI document', () => {
    const paths = Object.keys((app.swagger() as { paths?: Record<string, unknown> }).paths ?? {});
    expect(paths.filter((entry) => entry.startsWith('/console'))).toEqual([]);
  });

  it('forwards a sign-in to the token endpoint and answers the token, never caching it', async () => {
    let sent: Record<string, unknown> | undefined;
    agent
      .get('http://idp.test')
      .intercept({ path: '/oauth/token', method: 'POST' })
      .reply(200, (options) => {
        sent = JSON.parse(String(options.body)) as Record<string, unknown>;
        return { access_token: 'jwt-1', token_type: 'Bearer', expires_in: 86400 };
      });
    const answer = await app.inject({
      method: 'POST',
      url: '/console/token',
      payload: { clientId: 'demo-client', clientSecret: 's3cret' },
    });
    expect(answer.statusCode).toBe(200);
    expect(answer.json()).toEqual({ accessToken: 'jwt-1', expiresIn: 86400 });
    expect(answer.headers['cache-control']).toBe('no-store');
    expect(sent).toEqual({
      grant_type: 'client_credentials',
      client_id: 'demo-client',
      client_secret: 's3cret',
      audience: 'core-api',
    });
  });

  it("answers the identity provider's refusal as a problem, and 502 when it is down", async () => {
    agent
      .get('http://idp.test')
      .intercept({ path: '/oauth/token', method: 'POST' })
      .reply(401, { error: 'access_denied', error_description: 'Unauthorized: wrong client_id or client_secret' });
    const refused = await app.inject({
      method: 'POST',
      url: '/console/token',
      payload: { clientId: 'demo-client', clientSecret: 'wrong' },
    });
    expect(refused.statusCode).toBe(401);
    expect(refused.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(refused.json()).toMatchObject({
      title: 'Sign-in refused',
      detail: 'Unauthorized: wrong client_id or client_secret',
    });

    agent
      .get('http://idp.test')
      .intercept({ path: '/oauth/token', method: 'POST' })
      .replyWithError(new Error('connect ECONNREFUSED'));
    const down = await app.inject({
      method: 'POST',
      url: '/console/token',
      payload: { clientId: 'demo-client', clientSecret: 'x' },
    });
    expect(down.statusCode).toBe(502);
    expect(down.json()).toMatchObject({ title: 'Identity provider unavailable' });
  });

  it('refuses a malformed sign-in with field errors, without calling the identity provider', async () => {
    const answer = await app.inject({ method: 'POST', url: '/console/token', payload: { clientId: 'x' } });
    expect(answer.statusCode).toBe(400);
    expect(answer.json()).toMatchObject({ errors: [{ path: 'clientSecret' }] });
  });
});
