import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../core/errors.ts';
import { blankSubscription, type Subscription } from '../core/subscriptions/subscription.ts';
import { purchaseOrderJsonSchema } from '../producer/purchase-order-schema.ts';
import { applySubscriptionInput, webhookUrlPattern, type SubscriptionInput } from './subscription-input.ts';

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

  it("applies ordering 'entity', and an input without ordering keeps the current value", async () => {
    const base = blankSubscription('t', 's', new Date());
    const input = { url: 'https://93.184.216.34/hook', eventTypes: ['purchaseOrder.*'] };
    expect((await applySubscriptionInput(base, input, rules, true)).subscription.ordering).toBe('none');
    const { subscription: ordered } = await applySubscriptionInput(base, { ...input, ordering: 'entity' }, rules, true);
    expect(ordered.ordering).toBe('entity');
    const kept = await applySubscriptionInput(ordered, { description: 'kept' }, rules, false);
    expect(kept.subscription.ordering).toBe('entity');
    const unordered = await applySubscriptionInput(ordered, { ordering: 'none' }, rules, false);
    expect(unordered.subscription.ordering).toBe('none');
  });
});

describe('applySubscriptionInput with a filter', () => {
  const schemas: Record<string, Record<string, unknown> | null> = {
    'purchaseOrder.validated': purchaseOrderJsonSchema,
    'purchaseOrder.cancelled': purchaseOrderJsonSchema,
    'invoice.paid': null,
  };
  const rules = {
    allowHttp: false,
    allowed: [],
    catalogue: () => Object.keys(schemas),
    schemaOf: (eventType: string) => schemas[eventType] ?? null,
  };
  const url = 'https://93.184.216.34/hook';
  const refusal = async (base: Subscription, input: SubscriptionInput, creating = true) => {
    const error = await applySubscriptionInput(base, input, rules, creating).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(InvalidInputError);
    return (error as InvalidInputError).errors;
  };

  it('keeps a valid filter over envelope fields and payload paths of the subscribed types', async () => {
    const filter = { eventType: 'purchaseOrder.validated', 'payload.rows.itemCode': { $startsWith: 'TONER-' } };
    const { subscription } = await applySubscriptionInput(
      blankSubscription('t', 's', new Date()),
      { url, eventTypes: ['purchaseOrder.*'], filter },
      rules,
      true,
    );
    expect(subscription.filter).toEqual(filter);
  });

  it('names each mistake of the filter by its JSON Pointer under filter', async () => {
    const errors = await refusal(blankSubscription('t', 's', new Date()), {
      url,
      eventTypes: ['purchaseOrder.validated'],
      filter: { 'payload.totalAmount': { $gtee: '10' }, $or: [{ eventType: 'x' }, { 'payload.totalAmont': '1' }] },
    });
    expect(errors).toEqual([{ path: 'filter/payload.totalAmount/$gtee', message: expect.stringMatching(/\$gtee/) }]);
  });

  it('refuses a payload path that no subscribed type has, naming it and the types', async () => {
    const errors = await refusal(blankSubscription('t', 's', new Date()), {
      url,
      eventTypes: ['purchaseOrder.*'],
      filter: { $or: [{ eventType: 'purchaseOrder.validated' }, { 'payload.totalAmont': { $gt: '10' } }] },
    });
    expect(errors).toEqual([
      {
        path: 'filter/$or/1/payload.totalAmont',
        message:
          'payload.totalAmont is in the payload schema of none of the subscribed event types ' +
          '(purchaseOrder.cancelled, purchaseOrder.validated)',
      },
    ]);
  });

  it('accepts any payload path when a subscribed type declares no schema', async () => {
    const filter = { 'payload.anything.at.all': 1 };
    const { subscription } = await applySubscriptionInput(
      blankSubscription('t', 's', new Date()),
      { url, eventTypes: ['invoice.paid', 'purchaseOrder.validated'], filter },
      rules,
      true,
    );
    expect(subscription.filter).toEqual(filter);
  });

  it('judges the stored filter again when only the event types change, and clears it with null', async () => {
    const stored: Subscription = {
      ...blankSubscription('t', 's', new Date()),
      url,
      eventTypes: ['invoice.paid'],
      filter: { 'payload.invoiceNumber': { $exist: true } },
    };
    const errors = await refusal(stored, { eventTypes: ['purchaseOrder.validated'] }, false);
    expect(errors).toEqual([{ path: 'filter/payload.invoiceNumber', message: expect.stringMatching(/none of/) }]);
    const { subscription } = await applySubscriptionInput(
      stored,
      { eventTypes: ['purchaseOrder.validated'], filter: null },
      rules,
      false,
    );
    expect(subscription.filter).toBeNull();
    // A change that touches neither the types nor the filter does not judge the filter.
    const kept = await applySubscriptionInput(stored, { description: 'kept' }, rules, false);
    expect(kept.subscription.filter).toEqual(stored.filter);
  });
});
