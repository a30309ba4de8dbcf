import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../core/errors.ts';
import { blankSubscription } from '../core/subscriptions/subscription.ts';
import { applySubscriptionInput, webhookUrlPattern } from './subscription-input.ts';

// The subscriber URL grammar the OpenAPI document states, and that the server refuses what it excludes.

const https = new RegExp(webhookUrlPattern(false));
const http = new RegExp(webhookUrlPattern(true));

describe('webhookUrlPattern', () => {
  it.each([
    'https://93.184.216.34/hook',
    'https://hooks.example.com:8443/a/b;c?x=1&y=%20&z=/?#frag',
    'https://[2606:2800:220:1:248:1893:25c8:1946]/hook',
    'https://[::ffff:93.184.216.34]',
    'https://x.example',
  ])('matches %s', (url) => {
    expect(https.test(url)).toBe(true);
  });

  it.each([
    ['http://93.184.216.34/', 'http while https only'],
    ['HTTPS://93.184.216.34/', 'an upper-case scheme'],
    ['https://user@93.184.216.34/', 'user-info'],
    ['https://93.184.216.34/a b', 'a space'],
    ['https://93.184.216.34/é', 'a character that is not percent-encoded'],
    ['https://93.184.216.34/%zz', 'a bad percent-escape'],
    ['https://93.184.216.34:/', 'an empty port'],
    ['https://93.184.216.34:65536/', 'a port above 65535'],
    ['https://1.2.3.999/', 'a numeric host that is no IPv4 address'],
    ['https://a_b.example/', 'an underscore in the host'],
    ['https:///path', 'no host'],
  ])('does not match %s (%s)', (url) => {
    expect(https.test(url)).toBe(false);
  });

  it('allows http only when told to', () => {
    expect(http.test('http://93.184.216.34:8080/h')).toBe(true);
    expect(http.test('ftp://93.184.216.34/')).toBe(false);
  });
});

describe('applySubscriptionInput', () => {
  const rules = { allowHttp: false, allowed: [], catalogue: () => ['purchaseOrder.validated'] };

  it('refuses an invalid IPv6 host the grammar lets through (the parser judges it), naming url', async () => {
    const base = blankSubscription('t', 's', new Date());
    const input = { url: 'https://[1::2::3]/', eventTypes: ['purchaseOrder.*'] };
    const error = await applySubscriptionInput(base, input, rules, true).catch((caught: unknown) => caught);
    expect((error as InvalidInputError).errors).toEqual([{ path: 'url', message: 'url must be an absolute URL' }]);
  });

  it('refuses a URL the parser accepts but the documented grammar excludes, naming url', async () => {
    const base = blankSubscription('t', 's', new Date());
    const input = { url: 'https://93.184.216.34/a b', eventTypes: ['purchaseOrder.*'] };
    const error = await applySubscriptionInput(base, input, rules, true).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(InvalidInputError);
    expect((error as InvalidInputError).errors).toEqual([{ path: 'url', message: expect.stringMatching(/RFC 3986/) }]);
  });
});
