import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPair,
  randomBytes,
  scryptSync,
  timingSafeEqual,
  type JsonWebKey,
} from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { promisify } from 'node:util';
import { createSigner } from 'fast-jwt';
import fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';

// The dev identity provider of DESIGN §5: OAuth 2.0 client credentials, RS256 tokens, a JWKS. Local stack and tests
// only; production uses the operator's identity provider.

/** The clients the identity provider knows. */
export interface ClientDirectory {
  /** tenant of a client whose secret matches, else undefined */
  verify(clientId: string, clientSecret: string): Promise<{ tenantId: string } | undefined>;
}

/** The RSA key tokens are signed with; `publicJwk` is what the JWKS publishes. */
export interface SigningKey {
  kid: string;
  privateKeyPem: string;
  publicJwk: JsonWebKey;
}

export interface IdentityProviderOptions {
  /** Value of `iss`, e.g. `http://127.0.0.1:8088/`; a function when the port is known only after listen (port 0). */
  issuer: string | (() => string);
  key: SigningKey;
  clients: ClientDirectory;
  /** `aud` of tokens whose request names no audience. */
  defaultAudience: string;
  tokenLifetimeSeconds?: number;
  logger?: FastifyBaseLogger;
}

const generateRsaKeyPair = promisify(generateKeyPair);

/** Reads the signing key from `file`, or creates an RSA 2048 key there, so that issued tokens survive restarts. */
export async function loadOrCreateSigningKey(file: string): Promise<SigningKey> {
  try {
    return parseSigningKey(await readFile(file, 'utf8'), file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  const { privateKey } = await generateRsaKeyPair('rsa', { modulusLength: 2048 });
  const key = signingKeyFromPem(privateKey.export({ type: 'pkcs8', format: 'pem' }) as string);
  await mkdir(dirname(file), { recursive: true });
  try {
    // 'wx': when two processes start at once, the first key written wins and the other reads it.
    await writeFile(file, JSON.stringify(key, null, 2), { flag: 'wx', mode: 0o600 });
    return key;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    return parseSigningKey(await readFile(file, 'utf8'), file);
  }
}

function parseSigningKey(text: string, file: string): SigningKey {
  let privateKeyPem: unknown;
  try {
    privateKeyPem = (JSON.parse(text) as { privateKeyPem?: unknown }).privateKeyPem;
  } catch {
    throw new Error(`${file}: not a signing key file (invalid JSON)`);
  }
  if (typeof privateKeyPem !== 'string') throw new Error(`${file}: not a signing key file (no privateKeyPem)`);
  // The public half and the kid are derived again, so a hand-edited file cannot publish a key that does not match.
  return signingKeyFromPem(privateKeyPem);
}

function signingKeyFromPem(privateKeyPem: string): SigningKey {
  const privateKey = createPrivateKey(privateKeyPem);
  if (privateKey.asymmetricKeyType !== 'rsa') throw new Error('the signing key must be an RSA key');
  const { kty, n, e } = createPublicKey(privateKey).export({ format: 'jwk' });
  // RFC 7638 thumbprint: a stable kid that changes whenever the key does.
  const kid = createHash('sha256').update(JSON.stringify({ e, kty, n })).digest('base64url');
  return { kid, privateKeyPem, publicJwk: { kty, n, e } };
}

const SCRYPT = { N: 16_384, r: 8, p: 1, maxmem: 64 * 1024 * 1024 };

/** `scrypt$<salt b64>$<hash b64>` with a random salt, for storing client secrets. */
export function hashClientSecret(secret: string): string {
  const salt = randomBytes(16);
  const hash = scryptSync(secret, salt, 32, SCRYPT);
  return `scrypt$${salt.toString('base64')}$${hash.toString('base64')}`;
}

/** Whether `secret` matches a hash made by hashClientSecret; constant time in the secret. */
export function verifyClientSecret(secret: string, hash: string): boolean {
  const [scheme, saltText, hashText, ...rest] = hash.split('$');
  if (scheme !== 'scrypt' || saltText === undefined || hashText === undefined || rest.length > 0) return false;
  const salt = Buffer.from(saltText, 'base64');
  const expected = Buffer.from(hashText, 'base64');
  if (salt.length === 0 || expected.length < 16 || expected.length > 64) return false;
  return timingSafeEqual(scryptSync(secret, salt, expected.length, SCRYPT), expected);
}

interface TokenRequest {
  client_id: string;
  client_secret: string;
  audience?: string;
}

class OAuthError extends Error {
  constructor(
    readonly status: 400 | 401,
    readonly error: 'invalid_request' | 'unsupported_grant_type' | 'access_denied',
    description: string,
  ) {
    super(description);
  }
}

/** The identity provider's routes on a new fastify instance; the caller listens and closes it. */
export function buildIdentityProvider(opts: IdentityProviderOptions): FastifyInstance {
  const lifetime = opts.tokenLifetimeSeconds ?? 86_400;
  const sign = createSigner({
    key: opts.key.privateKeyPem,
    algorithm: 'RS256',
    kid: opts.key.kid,
    expiresIn: lifetime * 1000,
  });
  const jwks = { keys: [{ ...opts.key.publicJwk, kid: opts.key.kid, alg: 'RS256', use: 'sig' }] };

  const app = fastify(opts.logger ? { loggerInstance: opts.logger } : { logger: false });
  // RFC 6749 specifies form encoding for the token endpoint; DESIGN §5 uses JSON. Both are accepted.
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) => {
    done(null, Object.fromEntries(new URLSearchParams(body as string)));
  });
  // Body parsing errors (bad JSON, unknown content type) answer in the OAuth error format too.
  app.setErrorHandler((error: { statusCode?: number; message: string }, request, reply) => {
    if (error instanceof OAuthError) return sendOAuthError(reply, error);
    if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
      return sendOAuthError(reply, new OAuthError(400, 'invalid_request', error.message));
    }
    request.log.error({ err: error }, 'identity provider failed');
    return reply.code(500).send({ error: 'server_error', error_description: 'internal error' });
  });

  app.post('/oauth/token', async (request, reply) => {
    const body = parseTokenRequest(request.body);
    const client = await opts.clients.verify(body.client_id, body.client_secret);
    if (!client) throw new OAuthError(401, 'access_denied', 'Unauthorized: wrong client_id or client_secret');
    const accessToken = sign({
      iss: typeof opts.issuer === 'function' ? opts.issuer() : opts.issuer,
      aud: body.audience ?? opts.defaultAudience,
      sub: `${body.client_id}@clients`,
      azp: body.client_id,
      tenant_id: client.tenantId,
    });
    reply.header('cache-control', 'no-store').header('pragma', 'no-cache');
    return { access_token: accessToken, token_type: 'Bearer', expires_in: lifetime };
  });

  // 200 while the process runs; it has no dependency to wait for (clients are read per token request).
  app.get('/health', async () => ({ status: 'ok' }));

  app.get('/.well-known/jwks.json', async (_request, reply) => {
    reply.header('cache-control', 'public, max-age=300');
    return jwks;
  });

  return app;
}

function parseTokenRequest(body: unknown): TokenRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new OAuthError(400, 'invalid_request', 'the request body must be a JSON object');
  }
  const fields = body as Record<string, unknown>;
  if (fields.grant_type === undefined) throw new OAuthError(400, 'invalid_request', 'grant_type is required');
  if (fields.grant_type !== 'client_credentials') {
    throw new OAuthError(400, 'unsupported_grant_type', 'only grant_type "client_credentials" is supported');
  }
  for (const name of ['client_id', 'client_secret'] as const) {
    const value = fields[name];
    if (typeof value !== 'string' || value === '' || value.length > 512) {
      throw new OAuthError(400, 'invalid_request', `${name} must be a non-empty string`);
    }
  }
  const audience = fields.audience ?? undefined;
  if (audience !== undefined && (typeof audience !== 'string' || audience === '' || audience.length > 512)) {
    throw new OAuthError(400, 'invalid_request', 'audience must be a non-empty string');
  }
  return {
    client_id: fields.client_id as string,
    client_secret: fields.client_secret as string,
    audience: audience as string | undefined,
  };
}

function sendOAuthError(reply: FastifyReply, error: OAuthError): FastifyReply {
  return reply
    .code(error.status)
    .header('cache-control', 'no-store')
    .send({ error: error.error, error_description: error.message });
}
