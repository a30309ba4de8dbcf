import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import fp from 'fastify-plugin';
import { settleWithin } from '../budget.ts';
import type { ApiName, Registration as IntegratorRegistration } from '../integrators/integrator-store.ts';
import { AuthError, type Principal } from './verifier.ts';

/** Which tenant a client is registered to as an integrator, per API, and with what access. */
export interface IntegratorDirectory {
  /** the client's registration on this API, or undefined */
  registrationOf(api: ApiName, clientId: string): Promise<IntegratorRegistration | undefined>;
}

/** Methods that only read: all a read-only integrator may use. */
const READING_METHODS = new Set(['GET', 'HEAD']);

export interface AuthPluginOptions {
  api: ApiName;
  verifier: { verify(authorizationHeader: string | undefined): Promise<Principal> };
  integrators: IntegratorDirectory;
  /** How long a registration lookup is reused, so a revoke takes effect within this time (default 5 s). */
  integratorCacheTtlMs?: number;
  /** Most registrations kept in the cache (default 10,000). */
  integratorCacheSize?: number;
  /**
   * How long a request waits for a lookup under way, which the requests of one client share, within its budget too
   * (budget.ts): the gateway gives GATEWAY_DEPENDENCY_TIMEOUT, as for one call of its own. Default: the budget alone.
   */
  lookupTimeoutMs?: number;
  now?: () => number;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated caller; set on every route behind authPlugin. */
    principal: Principal;
  }
}

/**
 * Authenticates every request of the encapsulation context it is registered in (fastify-plugin lifts the hook into
 * that context, so register it inside the API's prefix plugin): 401 without a valid token, 403 when the token's
 * client is not an integrator of this API for the token's tenant (spec, Authentication 6), and when a client
 * registered read-only calls an operation that changes something (spec, status codes: the token lacks the required
 * permissions).
 */
const auth: FastifyPluginAsync<AuthPluginOptions> = async (app, opts) => {
  const registrationOf = cachedLookup(opts);
  const waitMs = opts.lookupTimeoutMs ?? Number.POSITIVE_INFINITY;
  if (!app.hasRequestDecorator('principal')) app.decorateRequest('principal', null as unknown as Principal);

  app.addHook('onRequest', async (request, reply) => {
    const authorization = request.headers.authorization;
    let principal: Principal;
    try {
      principal = await opts.verifier.verify(authorization);
    } catch (error) {
      if (!(error instanceof AuthError)) throw error;
      // RFC 6750 §3.1: no error code when the request carried no bearer token at all.
      const challenge = error.code === 'TOKEN_MISSING' ? 'Bearer' : 'Bearer error="invalid_token"';
      return sendProblem(reply.header('www-authenticate', challenge), 401, 'Unauthorized', error.message);
    }
    // A lookup under way is shared by the requests of one client that wait for it, and bounded by the driver's own
    // timeout alone (plus a speculative try): each waits no longer than its budget (budget.ts) and lookupTimeoutMs,
    // 503 past them, as for a call to Cassandra of its own.
    const lookup = registrationOf(principal.clientId);
    const registration = 'known' in lookup ? lookup.known : await settleWithin(lookup.pending, waitMs, 'Cassandra');
    if (registration === undefined) {
      const detail = `client ${principal.clientId} is not registered as an integrator of the ${opts.api} API`;
      return sendProblem(reply, 403, 'Forbidden', detail);
    }
    if (registration.tenantId !== principal.tenantId) {
      const detail = `client ${principal.clientId} is not registered to tenant ${principal.tenantId} on the ${opts.api} API`;
      return sendProblem(reply, 403, 'Forbidden', detail);
    }
    if (registration.access === 'read' && !READING_METHODS.has(request.method)) {
      const detail =
        `client ${principal.clientId} is registered read-only on the ${opts.api} API: ` +
        `${request.method} needs read-write access`;
      return sendProblem(reply, 403, 'Forbidden', detail);
    }
    request.principal = principal;
  });
};

export const authPlugin = fp(auth, { name: 'core-auth', fastify: '5.x' });

function sendProblem(reply: FastifyReply, status: 401 | 403, title: string, detail: string): FastifyReply {
  return reply
    .code(status)
    .type('application/problem+json')
    .send(JSON.stringify({ type: 'about:blank', title, status, detail }));
}

/** What a lookup gives: the registration once known (a cache hit), else the lookup under way. */
type Lookup = { known: IntegratorRegistration | undefined } | { pending: Promise<IntegratorRegistration | undefined> };

/** A short-lived, bounded cache in front of the directory; concurrent lookups of one client share one call. */
function cachedLookup(opts: AuthPluginOptions): (clientId: string) => Lookup {
  const ttl = opts.integratorCacheTtlMs ?? 5_000;
  const maxSize = opts.integratorCacheSize ?? 10_000;
  const now = opts.now ?? Date.now;
  interface Entry {
    expiresAt: number;
    lookup: Lookup;
  }
  const entries = new Map<string, Entry>();

  return (clientId) => {
    const at = now();
    const hit = entries.get(clientId);
    if (hit && hit.expiresAt > at) return hit.lookup;
    entries.delete(clientId);
    // Entries share one TTL, so the first in insertion order is the one closest to expiry.
    if (entries.size >= maxSize) entries.delete(entries.keys().next().value as string);
    const pending = opts.integrators.registrationOf(opts.api, clientId);
    const entry: Entry = { expiresAt: at + ttl, lookup: { pending } };
    entries.set(clientId, entry);
    pending.then(
      (registration) => {
        entry.lookup = { known: registration };
      },
      // A failed lookup is not remembered: the next request asks the directory again.
      () => {
        if (entries.get(clientId) === entry) entries.delete(clientId);
      },
    );
    return entry.lookup;
  };
}
