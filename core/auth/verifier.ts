import { createPublicKey, type JsonWebKey } from 'node:crypto';
import { createVerifier, TokenError } from 'fast-jwt';
import buildGetJwks from 'get-jwks';

/** Where tokens come from and how to read them; `issuer` and `audience` are compared exactly. */
export interface AuthSettings {
  issuer: string;
  audience: string;
  jwksUrl: string;
  tenantClaim: string;
}

/** The authenticated caller of an API request. */
export interface Principal {
  clientId: string;
  tenantId: string;
  subject: string;
}

export type AuthErrorCode = 'TOKEN_MISSING' | 'TOKEN_INVALID';

/** A request that does not carry a usable bearer token; the message says what is wrong and is safe to show. */
export class AuthError extends Error {
  constructor(
    readonly code: AuthErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'AuthError';
  }
}

/** Verifies the `Authorization` header of a request and returns its principal, or throws AuthError. */
export interface TokenVerifier {
  verify(authorizationHeader: string | undefined): Promise<Principal>;
  close?(): void;
}

/** Tuning knobs; the defaults suit production. */
export interface TokenVerifierOptions {
  /** Minimum time between two JWKS fetches caused by a `kid` we have never resolved (default 5 s). */
  unknownKidFetchIntervalMs?: number;
  /** How long a fetched key is used before it is fetched again (default 60 s). */
  keyCacheTtlMs?: number;
  /** A JWKS fetch taking longer fails the token being verified (default 5 s). */
  fetchTimeoutMs?: number;
  now?: () => number;
}

const CLOCK_TOLERANCE_MS = 60_000; // fast-jwt's clockTolerance is in milliseconds
const MAX_TOKEN_LENGTH = 16_384;
const MAX_KNOWN_KIDS = 100;
const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

export function createTokenVerifier(settings: AuthSettings, options: TokenVerifierOptions = {}): TokenVerifier {
  const keys = createKeySource(settings.jwksUrl, options);
  const verifyJwt = createVerifier({
    algorithms: ['RS256'],
    allowedIss: [settings.issuer],
    allowedAud: [settings.audience],
    requiredClaims: ['exp', 'iss', 'aud'],
    clockTolerance: CLOCK_TOLERANCE_MS,
    // A client sends the same token with every request for up to a day: remember each token's verdict for a minute
    // (never past its exp) instead of parsing the public key and checking the signature again each time, which cost a
    // quarter of the gateway's CPU under load. A minute is also how long a fetched key is trusted (keyCacheTtlMs).
    cache: TOKEN_CACHE_SIZE,
    cacheTTL: options.keyCacheTtlMs ?? 60_000,
    // Runs before the signature is checked: refuse anything we would not accept anyway, so that a forged token never
    // causes a key fetch, and the key is only ever looked up in the configured JWKS whatever the token claims.
    key: async ({ header, payload }: { header: Record<string, unknown>; payload: unknown }) => {
      if (header.alg !== 'RS256') throw new AuthError('TOKEN_INVALID', 'token algorithm must be RS256');
      if ((payload as { iss?: unknown } | null)?.iss !== settings.issuer) {
        throw new AuthError('TOKEN_INVALID', 'token issuer is not accepted');
      }
      if (typeof header.kid !== 'string' || header.kid === '') {
        throw new AuthError('TOKEN_INVALID', 'token header has no key id (kid)');
      }
      return keys.publicKey(header.kid);
    },
  });

  return {
    async verify(authorizationHeader) {
      const token = bearerToken(authorizationHeader);
      let claims: Record<string, unknown>;
      try {
        claims = (await verifyJwt(token)) as Record<string, unknown>;
      } catch (error) {
        throw toAuthError(error);
      }
      return principalOf(claims, settings.tenantClaim);
    },
  };
}

/** Token verdicts remembered at once (least recently used first out). */
const TOKEN_CACHE_SIZE = 10_000;

function bearerToken(header: string | undefined): string {
  if (header === undefined || header.trim() === '') {
    throw new AuthError('TOKEN_MISSING', 'an Authorization header with a Bearer token is required');
  }
  const [scheme = '', ...rest] = header.trim().split(/\s+/);
  // Another scheme (Basic, …) carries no bearer token at all: RFC 6750 §3.1 treats it like a missing token.
  if (scheme.toLowerCase() !== 'bearer') {
    throw new AuthError('TOKEN_MISSING', 'the Authorization header must use the Bearer scheme');
  }
  const token = rest[0];
  if (token === undefined) throw new AuthError('TOKEN_INVALID', 'the Bearer token is empty');
  if (rest.length > 1) throw new AuthError('TOKEN_INVALID', 'the Authorization header must be "Bearer <token>"');
  if (token.length > MAX_TOKEN_LENGTH || !JWT_SHAPE.test(token)) {
    throw new AuthError('TOKEN_INVALID', 'the Bearer token is not a JWT');
  }
  return token;
}

function principalOf(claims: Record<string, unknown>, tenantClaim: string): Principal {
  const tenantId = claims[tenantClaim];
  if (typeof tenantId !== 'string' || tenantId === '') {
    throw new AuthError('TOKEN_INVALID', `token has no ${tenantClaim} claim`);
  }
  const sub = typeof claims.sub === 'string' && claims.sub !== '' ? claims.sub : undefined;
  const azp = typeof claims.azp === 'string' && claims.azp !== '' ? claims.azp : undefined;
  const clientId = azp ?? sub?.replace(/@clients$/, '');
  if (!clientId) throw new AuthError('TOKEN_INVALID', 'token names no client (azp or sub claim)');
  return { clientId, tenantId, subject: sub ?? clientId };
}

const TOKEN_ERROR_MESSAGES: Record<string, string> = {
  [TokenError.codes.expired]: 'token has expired',
  [TokenError.codes.inactive]: 'token is not valid yet',
  [TokenError.codes.invalidSignature]: 'token signature is invalid',
  [TokenError.codes.missingSignature]: 'token is not signed',
  [TokenError.codes.invalidAlgorithm]: 'token algorithm must be RS256',
  [TokenError.codes.malformed]: 'token is malformed',
  [TokenError.codes.invalidPayload]: 'token is malformed',
  [TokenError.codes.keyFetchingError]: 'the signing key of the token could not be found',
};

function toAuthError(error: unknown): AuthError {
  if (error instanceof AuthError) return error;
  if (error instanceof TokenError) {
    const original: unknown = error.originalError;
    if (original instanceof AuthError) return original;
    // fast-jwt's claim messages ("The aud claim value is not allowed.") name the claim and never echo a secret.
    const message = TOKEN_ERROR_MESSAGES[error.code] ?? `token rejected: ${error.message}`;
    return new AuthError('TOKEN_INVALID', message);
  }
  return new AuthError('TOKEN_INVALID', 'token could not be verified');
}

/**
 * Public keys by `kid`, fetched only from the configured JWKS URL through get-jwks (which caches per kid and shares
 * one in-flight fetch). A kid we have resolved before may be refetched when its cache entry expires; a kid we have
 * never seen (random kids sprayed by an attacker) may cause at most one fetch per `unknownKidFetchIntervalMs`.
 */
function createKeySource(jwksUrl: string, options: TokenVerifierOptions) {
  const now = options.now ?? Date.now;
  const missInterval = options.unknownKidFetchIntervalMs ?? 5_000;
  const fetchTimeout = options.fetchTimeoutMs ?? 5_000;
  const url = new URL(jwksUrl);
  // get-jwks fetches `domain + jwksPath`; splitting the configured URL this way makes that exactly jwksUrl, and the
  // allow-list makes get-jwks itself refuse any other domain. No discovery: the token never chooses where we fetch.
  const domain = `${url.origin}/`;
  const jwksPath = `${url.pathname.slice(1)}${url.search}`;
  const jwks = buildGetJwks({
    issuersWhitelist: [domain],
    providerDiscovery: false,
    jwksPath: jwksPath === '' ? undefined : jwksPath,
    ttl: options.keyCacheTtlMs ?? 60_000,
    max: MAX_KNOWN_KIDS,
  });
  const known = new Set<string>(); // kids found in the JWKS before; bounded, only real kids get in
  const pems = new WeakMap<object, string>(); // get-jwks hands back the same object while it caches a key
  let lastUnknownFetch = Number.NEGATIVE_INFINITY;

  async function publicKey(kid: string): Promise<string> {
    const cached = jwks.cache.get(jwks.generateCacheKey('RS256', kid, domain)) !== undefined;
    if (!cached && !known.has(kid)) {
      if (now() - lastUnknownFetch < missInterval) throw new AuthError('TOKEN_INVALID', 'token signing key is unknown');
      lastUnknownFetch = now();
    }
    let jwk: Awaited<ReturnType<typeof jwks.getJwk>>;
    try {
      jwk = await withTimeout(jwks.getJwk({ domain, alg: 'RS256', kid }), fetchTimeout);
    } catch (error) {
      if ((error as { code?: unknown }).code === 'JWK_NOT_FOUND') {
        known.delete(kid);
        throw new AuthError('TOKEN_INVALID', 'token signing key is unknown');
      }
      throw new AuthError('TOKEN_INVALID', 'token signing keys are unavailable');
    }
    if (jwk.kty !== 'RSA') throw new AuthError('TOKEN_INVALID', 'token signing key is not an RSA key');
    remember(kid);
    let pem = pems.get(jwk);
    if (pem === undefined) {
      pem = createPublicKey({ key: jwk as JsonWebKey, format: 'jwk' }).export({
        type: 'spki',
        format: 'pem',
      }) as string;
      pems.set(jwk, pem);
    }
    return pem;
  }

  function remember(kid: string): void {
    known.delete(kid);
    known.add(kid);
    if (known.size > MAX_KNOWN_KIDS) known.delete(known.values().next().value as string);
  }

  return { publicKey };
}

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('JWKS fetch timed out')), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
