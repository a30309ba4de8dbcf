// Request validation of the webhook API (DESIGN §7): every invalid field answers 400 problem+json naming the field,
// the subscriber URL rules (scheme, user-info, length, SSRF address table) hold at creation and at update, and event
// type patterns must match the catalogue.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  call,
  expectProblem,
  PUBLIC_URL,
  startTestGateway,
  startWebhookApi,
  subscriptionBody,
  uniqueTenant,
  waitForCatalogue,
  WEBHOOKS,
  type Page,
  type SubscriptionView,
  type TestGateway,
  type WebhookApi,
} from '../support/webhook-api.ts';
import { testEnv } from '../support/harness.ts';

/** Hosts the URL rules refuse whatever the scheme, and what the refusal says. */
const BLOCKED_HOSTS: [string, RegExp][] = [
  ['127.0.0.1', /loopback/],
  ['localhost', /localhost/],
  ['10.0.0.1', /private/],
  ['172.16.0.1', /private/],
  ['192.168.1.1', /private/],
  ['169.254.169.254', /metadata/],
  ['100.64.0.1', /carrier-grade NAT/],
  ['0.0.0.0', /unspecified/],
  ['224.0.0.1', /multicast/],
  ['[::1]', /loopback/],
  ['[fc00::1]', /unique local/],
  ['[fe80::1]', /link-local/],
  ['[::ffff:127.0.0.1]', /IPv4-mapped.*127\.0\.0\.1.*loopback/],
  ['[64:ff9b::7f00:1]', /NAT64.*127\.0\.0\.1.*loopback/],
  ['[2002:7f00:1::]', /6to4.*127\.0\.0\.1.*loopback/],
  // Decimal, hex, octal and short IPv4 spellings all mean 127.0.0.1.
  ['2130706433', /127\.0\.0\.1 is a loopback/],
  ['0x7f.1', /127\.0\.0\.1 is a loopback/],
  ['017700000001', /127\.0\.0\.1 is a loopback/],
  ['127.1', /127\.0\.0\.1 is a loopback/],
  ['hooks.internal', /internal name/],
];

describe('webhook API: validation', () => {
  let api: WebhookApi;
  let tenant: string;
  let token: string;

  const hooks = (method: string, path: string, body?: unknown) =>
    call<SubscriptionView>(api.base, method, `${WEBHOOKS}${path}`, { token, body });
  const create = (body: unknown) => hooks('POST', '/Subscriptions', body);
  const countSubscriptions = async () =>
    (await call<Page<SubscriptionView>>(api.base, 'GET', `${WEBHOOKS}/Subscriptions`, { token })).body.items.length;

  beforeAll(async () => {
    api = await startWebhookApi();
    tenant = uniqueTenant('validation');
    token = await api.tokenFor(tenant);
  });

  afterAll(async () => {
    await api?.close();
  });

  describe('POST /Subscriptions answers 400 naming the field', () => {
    const cases: [string, unknown, string, RegExp?][] = [
      ['url missing', { eventTypes: ['purchaseOrder.*'] }, 'url'],
      ['url not http(s)', subscriptionBody({ url: 'ftp://93.184.216.34/hook' }), 'url', /http or https/],
      ['url with user-info', subscriptionBody({ url: 'https://user:pass@93.184.216.34/hook' }), 'url', /user-info/],
      ['url with a user name only', subscriptionBody({ url: 'https://user@93.184.216.34/hook' }), 'url', /user-info/],
      ['url too long', subscriptionBody({ url: `https://93.184.216.34/${'a'.repeat(2030)}` }), 'url'],
      ['url not a URL', subscriptionBody({ url: 'not a url' }), 'url', /absolute URL/],
      ['url relative', subscriptionBody({ url: '/hooks' }), 'url', /absolute URL/],
      ['url not a string', subscriptionBody({ url: { href: PUBLIC_URL } }), 'url'],
      ['eventTypes missing', { url: PUBLIC_URL }, 'eventTypes'],
      ['eventTypes empty', subscriptionBody({ eventTypes: [] }), 'eventTypes'],
      [
        'eventTypes with 101 items',
        subscriptionBody({ eventTypes: Array.from({ length: 101 }, () => 'purchaseOrder.*') }),
        'eventTypes',
      ],
      ['eventTypes with a bad pattern', subscriptionBody({ eventTypes: ['purchaseOrder..x'] }), 'eventTypes.0'],
      ['eventTypes with a partial wildcard', subscriptionBody({ eventTypes: ['purchaseOrder.val*'] }), 'eventTypes.0'],
      [
        'eventTypes not in the catalogue',
        subscriptionBody({ eventTypes: ['purchaseOrder.validated', 'invoice.paid'] }),
        'eventTypes.1',
        /catalogue/,
      ],
      ['authenticationMode not in the enum', subscriptionBody({ authenticationMode: 'Basic' }), 'authenticationMode'],
      ['ApiKey without apiKey', subscriptionBody({ authenticationMode: 'ApiKey' }), 'apiKey', /required/],
      [
        'apiKey without value',
        subscriptionBody({ authenticationMode: 'ApiKey', apiKey: { headerName: 'X-Key' } }),
        'apiKey.value',
      ],
      ['OAuth2 without oauth2', subscriptionBody({ authenticationMode: 'OAuth2' }), 'oauth2', /required/],
      [
        'oauth2 without clientSecret',
        subscriptionBody({ authenticationMode: 'OAuth2', oauth2: { tokenUrl: PUBLIC_URL, clientId: 'c' } }),
        'oauth2.clientSecret',
      ],
      [
        'oauth2 token URL on a metadata address',
        subscriptionBody({
          authenticationMode: 'OAuth2',
          oauth2: { tokenUrl: 'https://169.254.169.254/token', clientId: 'c', clientSecret: 's' },
        }),
        'oauth2.tokenUrl',
        /metadata/,
      ],
      ['hmacSecret too short', subscriptionBody({ authenticationMode: 'Hmac', hmacSecret: 'short' }), 'hmacSecret'],
      ['signatureHeaderName not a token', subscriptionBody({ signatureHeaderName: 'X Sig: 1' }), 'signatureHeaderName'],
      [
        'supersedePendingDeliveries not a boolean',
        subscriptionBody({ supersedePendingDeliveries: 'maybe' }),
        'supersedePendingDeliveries',
      ],
      ['an unknown property', subscriptionBody({ secretSauce: true }), 'secretSauce', /not a known property/],
      [
        'an unknown nested property',
        subscriptionBody({ apiKey: { headerName: 'X', value: 'v', extra: 1 } }),
        'apiKey.extra',
      ],
    ];

    it.each(cases)('%s', async (_name, body, path, message) => {
      const before = await countSubscriptions();
      expectProblem(await create(body), 400, path, message);
      expect(await countSubscriptions()).toBe(before);
    });

    it('answers 400 for a body that is not a JSON object', async () => {
      expectProblem(await create(['purchaseOrder.*']), 400);
      const malformed = await fetch(`${api.base}${WEBHOOKS}/Subscriptions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: '{"url": ',
      });
      expect(malformed.status).toBe(400);
      expect(malformed.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    });
  });

  describe('PATCH /Subscriptions/{id} answers 400 naming the field and changes nothing', () => {
    let original: SubscriptionView;

    beforeAll(async () => {
      const created = await create(subscriptionBody());
      expect(created.status).toBe(201);
      original = created.body;
    });

    const cases: [string, unknown, string][] = [
      ['url not a URL', { url: 'nope' }, 'url'],
      ['url with user-info', { url: 'https://a:b@93.184.216.34/' }, 'url'],
      ['url too long', { url: `https://93.184.216.34/${'a'.repeat(2030)}` }, 'url'],
      ['eventTypes empty', { eventTypes: [] }, 'eventTypes'],
      ['eventTypes not in the catalogue', { eventTypes: ['nope.*'] }, 'eventTypes.0'],
      ['authenticationMode not in the enum', { authenticationMode: 'none' }, 'authenticationMode'],
      ['an unknown property', { id: 'another-id' }, 'id'],
      ['status (it has its own endpoint)', { status: 'disabled' }, 'status'],
    ];

    it.each(cases)('%s', async (_name, body, path) => {
      expectProblem(await hooks('PATCH', `/Subscriptions/${original.id}`, body), 400, path);
      expect((await hooks('GET', `/Subscriptions/${original.id}`)).body).toEqual(original);
    });
  });

  it('PATCH /Subscriptions/{id} answers 409 for a switch to ApiKey or OAuth2 the subscription has no settings for', async () => {
    // The request is valid in itself (the same body succeeds on a subscription that has the settings): it conflicts
    // with the stored subscription, which has no apiKey or oauth2 to switch to.
    const created = (await create(subscriptionBody())).body;
    for (const [mode, field] of [
      ['ApiKey', 'apiKey'],
      ['OAuth2', 'oauth2'],
    ]) {
      const problem = expectProblem(
        await hooks('PATCH', `/Subscriptions/${created.id}`, { authenticationMode: mode }),
        409,
      );
      expect(problem.detail).toMatch(new RegExp(`^${field} is required`));
    }
    expect((await hooks('GET', `/Subscriptions/${created.id}`)).body).toEqual(created);
    const withKey = { authenticationMode: 'ApiKey', apiKey: { headerName: 'X-Key', value: 'k' } };
    expect((await hooks('PATCH', `/Subscriptions/${created.id}`, withKey)).status).toBe(200);
    expect((await hooks('PATCH', `/Subscriptions/${created.id}`, { authenticationMode: 'None' })).status).toBe(200);
    const back = await hooks('PATCH', `/Subscriptions/${created.id}`, { authenticationMode: 'ApiKey' });
    expect(back.status, back.text).toBe(200);
    expect(back.body.apiKey).toEqual({ headerName: 'X-Key' });
  });

  it('PATCH /Subscriptions/{id}/status answers 400 for a bad status value', async () => {
    const created = (await create(subscriptionBody())).body;
    for (const body of [{ status: 'paused' }, { status: 'Enabled' }, {}, { status: 'enabled', extra: true }]) {
      const path = 'status' in body && Object.keys(body).length === 1 ? 'status' : /^(status|extra)$/;
      expectProblem(await hooks('PATCH', `/Subscriptions/${created.id}/status`, body), 400, path);
    }
    expect((await hooks('GET', `/Subscriptions/${created.id}`)).body).toEqual(created);
  });

  describe('event type patterns', () => {
    it('accepts a single-segment wildcard that matches catalogue entries', async () => {
      for (const eventTypes of [['purchaseOrder.*'], ['*.validated'], ['*.*'], ['purchaseOrder.sent']]) {
        const created = await create(subscriptionBody({ eventTypes }));
        expect(created.status, created.text).toBe(201);
        expect(created.body.eventTypes).toEqual(eventTypes);
      }
    });

    it.each([['purchaseOrder.row.*'], ['nope.*'], ['purchaseOrder.unknown'], ['*'], ['purchaseOrder']])(
      'refuses %s: it matches no catalogue entry (a wildcard is exactly one segment)',
      async (pattern) => {
        expectProblem(await create(subscriptionBody({ eventTypes: [pattern] })), 400, 'eventTypes.0', /catalogue/);
      },
    );
  });

  describe('subscriber URL address rules (WEBHOOK_ALLOW_HTTP=true, no allowed CIDRs)', () => {
    let target: SubscriptionView;

    beforeAll(async () => {
      target = (await create(subscriptionBody())).body;
    });

    it.each(BLOCKED_HOSTS)('refuses %s at creation and at update', async (host, reason) => {
      for (const scheme of ['http', 'https']) {
        const url = `${scheme}://${host}/hook`;
        expectProblem(await create(subscriptionBody({ url })), 400, 'url', reason);
        expectProblem(await hooks('PATCH', `/Subscriptions/${target.id}`, { url }), 400, 'url', reason);
      }
      expect((await hooks('GET', `/Subscriptions/${target.id}`)).body).toEqual(target);
    });

    it('accepts a public address over https, and over http since WEBHOOK_ALLOW_HTTP is true', async () => {
      const created = await create(subscriptionBody({ url: 'https://93.184.216.34/hook' }));
      expect(created.status, created.text).toBe(201);
      expect(created.body.url).toBe('https://93.184.216.34/hook');
      const patched = await hooks('PATCH', `/Subscriptions/${created.body.id}`, { url: 'http://93.184.216.34:8080/h' });
      expect(patched.status, patched.text).toBe(200);
      expect(patched.body.url).toBe('http://93.184.216.34:8080/h');
      const v6 = await create(subscriptionBody({ url: 'https://[2606:2800:220:1:248:1893:25c8:1946]/hook' }));
      expect(v6.status, v6.text).toBe(201);
    });
  });

  describe('with WEBHOOK_ALLOW_HTTP=false', () => {
    let strict: TestGateway;
    let strictToken: string;

    beforeAll(async () => {
      strict = await startTestGateway(
        { ...testEnv(), AUTH_URL: api.idp.url, WEBHOOK_ALLOW_HTTP: 'false' },
        { webhook: true, purchase: false },
      );
      strictToken = await api.tokenFor(tenant, ['webhook']);
      await waitForCatalogue(strict.base, strictToken);
    });

    afterAll(async () => {
      await strict?.close();
    });

    const strictCall = (method: string, path: string, body?: unknown) =>
      call<SubscriptionView>(strict.base, method, `${WEBHOOKS}${path}`, { token: strictToken, body });

    it('refuses http at creation and at update, and accepts https', async () => {
      expectProblem(
        await strictCall('POST', '/Subscriptions', subscriptionBody({ url: 'http://93.184.216.34/hook' })),
        400,
        'url',
        /must use https/,
      );
      const created = await strictCall('POST', '/Subscriptions', subscriptionBody({ url: PUBLIC_URL }));
      expect(created.status, created.text).toBe(201);
      expectProblem(
        await strictCall('PATCH', `/Subscriptions/${created.body.id}`, { url: 'http://93.184.216.34/hook' }),
        400,
        'url',
        /must use https/,
      );
      expectProblem(
        await strictCall('PATCH', `/Subscriptions/${created.body.id}`, {
          authenticationMode: 'OAuth2',
          oauth2: { tokenUrl: 'http://93.184.216.34/token', clientId: 'c', clientSecret: 's' },
        }),
        400,
        'oauth2.tokenUrl',
        /https/,
      );
      expect((await strictCall('GET', `/Subscriptions/${created.body.id}`)).body).toEqual(created.body);
    });
  });

  describe('GET /Deliveries query', () => {
    it.each([
      ['limit=0', 'limit'],
      ['limit=501', 'limit'],
      ['limit=ten', 'limit'],
      ['status=delivered', 'status'],
      ['cursor=not-a-cursor', 'cursor'],
      [`cursor=${Buffer.from('{"hour":1}').toString('base64url')}`, 'cursor'],
      [`cursor=${Buffer.from('[0.5,0,""]').toString('base64url')}`, 'cursor'],
      [`eventId=e1&cursor=${Buffer.from('[0,0,"x"]').toString('base64url')}`, 'cursor'],
      [`eventId=e1&cursor=${Buffer.from('[493000,0,""]').toString('base64url')}`, 'cursor'],
      ['unknown=1', 'unknown'],
    ])('answers 400 for %s naming the parameter', async (query, name) => {
      const answer = await call(api.base, 'GET', `${WEBHOOKS}/Deliveries?${query}`, { token });
      expectProblem(answer, 400, new RegExp(`(^|\\.)${name}$`));
    });

    it('accepts limit 1 and 500', async () => {
      for (const limit of [1, 500]) {
        const answer = await call(api.base, 'GET', `${WEBHOOKS}/Deliveries?limit=${limit}`, { token });
        expect(answer.status, answer.text).toBe(200);
      }
    });
  });
});
