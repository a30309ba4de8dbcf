import type { Subscription } from '../core/subscriptions/subscription.ts';
import type { AuthHeaders } from './delivery-handler.ts';

/** Fetches a client-credentials token: POST form to the token URL, returns the token and its lifetime. */
export type TokenFetcher = (request: {
  tokenUrl: string;
  body: string;
}) => Promise<{ accessToken: string; expiresInSeconds: number }>;

/**
 * Authentication headers toward subscribers: the ApiKey header, or an OAuth2 bearer token obtained with the client
 * credentials grant, cached until shortly before it expires and refreshed on demand (after a 401).
 */
export function createAuthHeaders(fetchToken: TokenFetcher, now: () => number = Date.now): AuthHeaders {
  const tokens = new Map<
    string,
    { token: string; expiresAt: number } | Promise<{ token: string; expiresAt: number }>
  >();

  const token = async (subscription: Subscription, refresh: boolean): Promise<string> => {
    const oauth2 = subscription.oauth2!;
    const key = `${subscription.tenantId}/${subscription.id}/${oauth2.tokenUrl}/${oauth2.clientId}`;
    const cached = tokens.get(key);
    if (cached && !refresh) {
      // A request in flight is joined as is. A cached value is checked without awaiting: an `await` here would let
      // every concurrent caller see the expired token and start a token request of its own.
      if (cached instanceof Promise) return (await cached).token;
      if (cached.expiresAt > now()) return cached.token;
    }
    const form = new URLSearchParams({ grant_type: 'client_credentials', client_id: oauth2.clientId });
    form.set('client_secret', subscription.secrets.oauth2ClientSecret ?? '');
    if (oauth2.audience) form.set('audience', oauth2.audience);
    if (oauth2.scope) form.set('scope', oauth2.scope);
    // Concurrent attempts of one subscription share one token request.
    const pending = fetchToken({ tokenUrl: oauth2.tokenUrl, body: form.toString() }).then(
      ({ accessToken, expiresInSeconds }) => ({
        token: accessToken,
        expiresAt: now() + Math.max(0, expiresInSeconds - 30) * 1000,
      }),
    );
    tokens.set(key, pending);
    try {
      const value = await pending;
      tokens.set(key, value);
      return value.token;
    } catch (error) {
      tokens.delete(key);
      throw error;
    }
  };

  return async (subscription, refresh) => {
    switch (subscription.authenticationMode) {
      case 'ApiKey':
        return subscription.apiKeyHeaderName && subscription.secrets.apiKey
          ? { [subscription.apiKeyHeaderName.toLowerCase()]: subscription.secrets.apiKey }
          : {};
      case 'OAuth2':
        return subscription.oauth2 ? { authorization: `Bearer ${await token(subscription, refresh)}` } : {};
      default:
        return {};
    }
  };
}
