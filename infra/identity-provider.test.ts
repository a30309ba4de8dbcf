import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDecoder, createVerifier } from 'fast-jwt';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildIdentityProvider,
  hashClientSecret,
  loadOrCreateSigningKey,
  verifyClientSecret,
  type ClientDirectory,
  type SigningKey,
} from './identity-provider.ts';

const clients: ClientDirectory = {
  async verify(clientId, clientSecret) {
    return clientId === 'client-a' && clientSecret === 'secret-a' ? { tenantId: 'tenant-a' } : undefined;
  },
};

let dir: string;
let key: SigningKey;
let app: FastifyInstance;
let baseUrl: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'idp-test-'));
  key = await loadOrCreateSigningKey(join(dir, 'nested', 'signing-key.json'));
  app = buildIdentityProvider({ issuer: () => `${baseUrl}/`, key, clients, defaultAudience: 'core-api' });
  await app.listen({ port: 0, host: '127.0.0.1' });
  baseUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await app.close();
  await rm(dir, { recursive: true, force: true });
});

function requestToken(body: unknown, contentType = 'application/json') {
  return fetch(`${baseUrl}/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': contentType },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

const goodRequest = { client_id: 'client-a', client_secret: 'secret-a', grant_type: 'client_credentials' };

describe('POST /oauth/token', () => {
  it('issues an RS256 token with the documented claims', async () => {
    const response = await requestToken({ ...goodRequest, audience: 'core-api' });
    expect(response.status).toBe(200);
    expect(response.headers.get('cache-control')).toBe('no-store');
    const body = (await response.json()) as { access_token: string; token_type: string; expires_in: number };
    expect(body.token_type).toBe('Bearer');
    expect(body.expires_in).toBe(86_400);

    const { header, payload } = createDecoder({ complete: true })(body.access_token) as {
      header: Record<string, unknown>;
      payload: Record<string, unknown>;
    };
    expect(header).toEqual({ alg: 'RS256', typ: 'JWT', kid: key.kid });
    expect(payload).toMatchObject({
      iss: `${baseUrl}/`,
      aud: 'core-api',
      sub: 'client-a@clients',
      azp: 'client-a',
      tenant_id: 'tenant-a',
    });
    const iat = payload.iat as number;
    expect(Math.abs(iat - Date.now() / 1000)).toBeLessThan(10);
    expect(payload.exp).toBe(iat + 86_400);

    // The signature verifies with the published public key.
    const jwks = (await (await fetch(`${baseUrl}/.well-known/jwks.json`)).json()) as { keys: JsonWebKey[] };
    const { createPublicKey } = await import('node:crypto');
    const pem = createPublicKey({ key: jwks.keys[0] as never, format: 'jwk' }).export({ type: 'spki', format: 'pem' });
    expect(() => createVerifier({ key: pem as string, algorithms: ['RS256'] })(body.access_token)).not.toThrow();
  });

  it('uses the default audience when none is asked for, and the asked one otherwise', async () => {
    const decode = createDecoder();
    const plain = (await (await requestToken(goodRequest)).json()) as { access_token: string };
    expect(decode(plain.access_token).aud).toBe('core-api');
    const other = (await (await requestToken({ ...goodRequest, audience: 'other-api' })).json()) as {
      access_token: string;
    };
    expect(decode(other.access_token).aud).toBe('other-api');
  });

  it('accepts a form-encoded request too', async () => {
    const response = await requestToken(
      new URLSearchParams(goodRequest).toString(),
      'application/x-www-form-urlencoded',
    );
    expect(response.status).toBe(200);
  });

  it('answers 401 access_denied to a wrong secret or an unknown client', async () => {
    for (const body of [
      { ...goodRequest, client_secret: 'wrong' },
      { ...goodRequest, client_id: 'nobody' },
    ]) {
      const response = await requestToken(body);
      expect(response.status).toBe(401);
      const answer = (await response.json()) as Record<string, unknown>;
      expect(answer.error).toBe('access_denied');
      expect(typeof answer.error_description).toBe('string');
      expect(answer).not.toHaveProperty('access_token');
    }
  });

  it('answers 400 unsupported_grant_type to another grant type', async () => {
    const response = await requestToken({ ...goodRequest, grant_type: 'password' });
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ error: 'unsupported_grant_type' });
  });

  it('answers 400 invalid_request to a bad body', async () => {
    const bodies: unknown[] = [
      { client_id: 'client-a', client_secret: 'secret-a' },
      { ...goodRequest, client_id: 42 },
      { ...goodRequest, client_secret: '' },
      { ...goodRequest, audience: ['a'] },
      [goodRequest],
      '{not json',
    ];
    for (const body of bodies) {
      const response = await requestToken(body);
      expect(response.status, JSON.stringify(body)).toBe(400);
      const answer = (await response.json()) as Record<string, unknown>;
      expect(answer.error).toBe('invalid_request');
      expect(typeof answer.error_description).toBe('string');
    }
    const noBody = await fetch(`${baseUrl}/oauth/token`, { method: 'POST' });
    expect(noBody.status).toBe(400);
    expect(await noBody.json()).toMatchObject({ error: 'invalid_request' });
  });
});

describe('GET /.well-known/jwks.json', () => {
  it('publishes the public key only', async () => {
    const response = await fetch(`${baseUrl}/.well-known/jwks.json`);
    expect(response.status).toBe(200);
    const body = (await response.json()) as { keys: Record<string, unknown>[] };
    expect(body.keys).toHaveLength(1);
    expect(body.keys[0]).toEqual({ ...key.publicJwk, kid: key.kid, alg: 'RS256', use: 'sig' });
    expect(body.keys[0]).toMatchObject({ kty: 'RSA', e: 'AQAB' });
    for (const privatePart of ['d', 'p', 'q', 'dp', 'dq', 'qi']) expect(body.keys[0]).not.toHaveProperty(privatePart);
  });
});

describe('GET /health', () => {
  it('answers 200 while the process runs', async () => {
    const response = await fetch(`${baseUrl}/health`);
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ status: 'ok' });
  });
});

describe('loadOrCreateSigningKey', () => {
  it('persists the key, so a restart signs with the same key', async () => {
    const file = join(dir, 'nested', 'signing-key.json');
    const again = await loadOrCreateSigningKey(file);
    expect(again).toEqual(key);
    expect(JSON.parse(await readFile(file, 'utf8'))).toMatchObject({ kid: key.kid });
    expect((await stat(file)).mode & 0o777).toBe(0o600);
  });

  it('creates a different key in another file', async () => {
    const other = await loadOrCreateSigningKey(join(dir, 'other', 'key.json'));
    expect(other.kid).not.toBe(key.kid);
  });

  it('refuses a file that is not a signing key', async () => {
    const { writeFile } = await import('node:fs/promises');
    const file = join(dir, 'broken.json');
    await writeFile(file, '{"hello":1}');
    await expect(loadOrCreateSigningKey(file)).rejects.toThrow(/broken\.json/);
  });
});

describe('client secret hashing', () => {
  it('verifies the right secret only', () => {
    const hash = hashClientSecret('s3cret');
    expect(hash).toMatch(/^scrypt\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$/);
    expect(verifyClientSecret('s3cret', hash)).toBe(true);
    expect(verifyClientSecret('s3cret ', hash)).toBe(false);
    expect(verifyClientSecret('', hash)).toBe(false);
  });

  it('salts every hash', () => {
    expect(hashClientSecret('same')).not.toBe(hashClientSecret('same'));
  });

  it('rejects malformed hashes instead of throwing', () => {
    for (const hash of ['', 'plain', 'scrypt$$', 'bcrypt$abc$def', 'scrypt$c2FsdA==$aGFzaA==', 'scrypt$a$b$c']) {
      expect(verifyClientSecret('x', hash)).toBe(false);
    }
  });
});
