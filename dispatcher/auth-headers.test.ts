import { describe, expect, it, vi } from 'vitest';
import { blankSubscription, type Subscription } from '../core/subscriptions/subscription.ts';
import { createAuthHeaders, type TokenFetcher } from './auth-headers.ts';

function subscription(overrides: Partial<Subscription> = {}): Subscription {
  return {
    ...blankSubscription('tenant-a', 'sub-1', new Date(0)),
    url: 'https://receiver.example.com/hooks',
    eventTypes: ['purchaseOrder.*'],
    authenticationMode: 'OAuth2',
    oauth2: {
      tokenUrl: 'https://idp.example.com/oauth/token',
      clientId: 'client-1',
      audience: 'https://receiver.example.com',
      scope: 'webhooks:write events:read',
    },
    secrets: { oauth2ClientSecret: 's3cr&t=+ /é' },
    ...overrides,
  };
}

function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** A token endpoint that hands out tok-1, tok-2, … with the given lifetime. */
function tokenEndpoint(expiresInSeconds = 3600) {
  let issued = 0;
  return vi.fn<TokenFetcher>(async () => {
    issued += 1;
    return { accessToken: `tok-${issued}`, expiresInSeconds };
  });
}

describe('ApiKey, Hmac and None', () => {
  it.each<[string, Partial<Subscription>, Record<string, string>]>([
    [
      'ApiKey header, name lower-cased',
      { authenticationMode: 'ApiKey', apiKeyHeaderName: 'X-Api-Key', secrets: { apiKey: 'key-123' } },
      { 'x-api-key': 'key-123' },
    ],
    [
      'ApiKey with a custom header name',
      { authenticationMode: 'ApiKey', apiKeyHeaderName: 'Api-Token', secrets: { apiKey: 'v' } },
      { 'api-token': 'v' },
    ],
    ['ApiKey without a value', { authenticationMode: 'ApiKey', apiKeyHeaderName: 'X-Api-Key', secrets: {} }, {}],
    ['ApiKey without a header name', { authenticationMode: 'ApiKey', secrets: { apiKey: 'v' } }, {}],
    ['Hmac (the signature is added by the handler)', { authenticationMode: 'Hmac', secrets: { hmacSecret: 'x' } }, {}],
    ['None', { authenticationMode: 'None', secrets: {} }, {}],
    ['OAuth2 without its settings', { authenticationMode: 'OAuth2', oauth2: null }, {}],
  ])('%s', async (_name, overrides, expected) => {
    const fetchToken = tokenEndpoint();
    const headers = createAuthHeaders(fetchToken);
    expect(await headers(subscription(overrides), false)).toEqual(expected);
    expect(await headers(subscription(overrides), true)).toEqual(expected);
    expect(fetchToken).not.toHaveBeenCalled();
  });
});

describe('OAuth2 client credentials', () => {
  it('POSTs a client_credentials form with client id, secret, audience and scope to the token URL', async () => {
    const fetchToken = tokenEndpoint();
    const headers = createAuthHeaders(fetchToken);
    expect(await headers(subscription(), false)).toEqual({ authorization: 'Bearer tok-1' });
    expect(fetchToken).toHaveBeenCalledTimes(1);
    const [{ tokenUrl, body }] = fetchToken.mock.calls[0]!;
    expect(tokenUrl).toBe('https://idp.example.com/oauth/token');
    const form = new URLSearchParams(body);
    expect(Object.fromEntries(form)).toEqual({
      grant_type: 'client_credentials',
      client_id: 'client-1',
      client_secret: 's3cr&t=+ /é', // survives form encoding
      audience: 'https://receiver.example.com',
      scope: 'webhooks:write events:read',
    });
    expect(body).not.toContain('s3cr&t'); // really encoded, not pasted
  });

  it('leaves audience and scope out when the subscription has none', async () => {
    const fetchToken = tokenEndpoint();
    const sub = subscription({
      oauth2: { tokenUrl: 'https://idp.example.com/t', clientId: 'c', audience: null, scope: null },
    });
    await createAuthHeaders(fetchToken)(sub, false);
    const form = new URLSearchParams(fetchToken.mock.calls[0]![0].body);
    expect([...form.keys()].sort()).toEqual(['client_id', 'client_secret', 'grant_type']);
  });

  it.each([
    // [expires_in, ms later, fetches in total]
    [3600, 0, 1],
    [3600, 1_000, 1],
    [3600, 3_570_000 - 1, 1], // 30 s before expiry: still cached
    [3600, 3_570_000, 2], // from 30 s before expiry: fetched again
    [3600, 3_600_000, 2],
    [3600, 10_000_000, 2],
    [60, 29_999, 1],
    [60, 30_000, 2],
    [30, 0, 2], // a token living 30 s or less is never reused
    [10, 0, 2],
  ])('expires_in %i s, called again %i ms later → %i fetch(es)', async (expiresIn, laterMs, fetches) => {
    let now = 1_700_000_000_000;
    const fetchToken = tokenEndpoint(expiresIn);
    const headers = createAuthHeaders(fetchToken, () => now);
    expect(await headers(subscription(), false)).toEqual({ authorization: 'Bearer tok-1' });
    now += laterMs;
    expect(await headers(subscription(), false)).toEqual({ authorization: `Bearer tok-${fetches}` });
    expect(fetchToken).toHaveBeenCalledTimes(fetches);
  });

  it('refresh=true fetches a new token even when one is cached, and later calls use the new one', async () => {
    const fetchToken = tokenEndpoint();
    const headers = createAuthHeaders(fetchToken, () => 0);
    expect(await headers(subscription(), false)).toEqual({ authorization: 'Bearer tok-1' });
    expect(await headers(subscription(), true)).toEqual({ authorization: 'Bearer tok-2' });
    expect(await headers(subscription(), false)).toEqual({ authorization: 'Bearer tok-2' });
    expect(fetchToken).toHaveBeenCalledTimes(2);
  });

  it('shares one token request between concurrent calls', async () => {
    const pending = deferred<{ accessToken: string; expiresInSeconds: number }>();
    const fetchToken = vi.fn<TokenFetcher>(() => pending.promise);
    const headers = createAuthHeaders(fetchToken);
    const calls = Array.from({ length: 5 }, () => headers(subscription(), false));
    await new Promise((resolve) => setImmediate(resolve));
    expect(fetchToken).toHaveBeenCalledTimes(1);
    pending.resolve({ accessToken: 'shared', expiresInSeconds: 3600 });
    expect(await Promise.all(calls)).toEqual(Array(5).fill({ authorization: 'Bearer shared' }));
    expect(fetchToken).toHaveBeenCalledTimes(1);
  });

  it('shares one token request between concurrent calls once the cached token has expired', async () => {
    let now = 0;
    const fetchToken = tokenEndpoint(3600);
    const headers = createAuthHeaders(fetchToken, () => now);
    expect(await headers(subscription(), false)).toEqual({ authorization: 'Bearer tok-1' });
    now += 3_600_000;
    const calls = await Promise.all(Array.from({ length: 5 }, () => headers(subscription(), false)));
    expect(calls).toEqual(Array(5).fill({ authorization: 'Bearer tok-2' }));
    expect(fetchToken).toHaveBeenCalledTimes(2);
  });

  it('does not cache a failed token request', async () => {
    const fetchToken = vi
      .fn<TokenFetcher>()
      .mockRejectedValueOnce(new Error('token endpoint answered 503'))
      .mockResolvedValueOnce({ accessToken: 'after-failure', expiresInSeconds: 3600 });
    const headers = createAuthHeaders(fetchToken);
    await expect(headers(subscription(), false)).rejects.toThrow('token endpoint answered 503');
    expect(await headers(subscription(), false)).toEqual({ authorization: 'Bearer after-failure' });
    expect(fetchToken).toHaveBeenCalledTimes(2);
  });

  it('fails every caller sharing a failed request, and the next call tries again', async () => {
    const pending = deferred<{ accessToken: string; expiresInSeconds: number }>();
    const fetchToken = vi
      .fn<TokenFetcher>()
      .mockReturnValueOnce(pending.promise)
      .mockResolvedValueOnce({ accessToken: 'second', expiresInSeconds: 3600 });
    const headers = createAuthHeaders(fetchToken);
    const calls = [headers(subscription(), false), headers(subscription(), false)].map((call) =>
      call.then(
        () => 'resolved',
        (error: Error) => error.message,
      ),
    );
    pending.reject(new Error('idp down'));
    expect(await Promise.all(calls)).toEqual(['idp down', 'idp down']);
    expect(await headers(subscription(), false)).toEqual({ authorization: 'Bearer second' });
    expect(fetchToken).toHaveBeenCalledTimes(2);
  });

  it.each<[string, Partial<Subscription>]>([
    ['another subscription', { id: 'sub-2' }],
    ['the same subscription id in another tenant', { tenantId: 'tenant-b' }],
    [
      'another client id',
      { oauth2: { tokenUrl: 'https://idp.example.com/oauth/token', clientId: 'other', audience: null, scope: null } },
    ],
    [
      'another token URL',
      { oauth2: { tokenUrl: 'https://idp2.example.com/token', clientId: 'client-1', audience: null, scope: null } },
    ],
  ])('keeps a separate token for %s', async (_name, overrides) => {
    const fetchToken = tokenEndpoint();
    const headers = createAuthHeaders(fetchToken);
    expect(await headers(subscription(), false)).toEqual({ authorization: 'Bearer tok-1' });
    expect(await headers(subscription(overrides), false)).toEqual({ authorization: 'Bearer tok-2' });
    expect(await headers(subscription(), false)).toEqual({ authorization: 'Bearer tok-1' });
    expect(fetchToken).toHaveBeenCalledTimes(2);
  });
});
