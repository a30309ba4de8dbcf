import { describe, expect, it } from 'vitest';
import { isEventTypePattern, matchesEventType } from '../core/event-types.ts';
import { webhookOverrides } from './webhook-schemas.ts';

// The documented event-type pattern is built from the catalogue: it must call valid exactly what the server accepts.

const catalogue = [
  'purchaseOrder.validated',
  'purchaseOrder.cancelled',
  'invoice.line-item.paid_1',
  'subscription.failing',
  'delivery.abandoned',
];
const documented = webhookOverrides(
  false,
  catalogue.map((eventType) => ({ eventType })),
).EventTypePattern!({});
const pattern = new RegExp(documented.pattern as string);
const accepted = (candidate: string) =>
  isEventTypePattern(candidate) && catalogue.some((name) => matchesEventType(candidate, name));

describe('EventTypePattern in the document', () => {
  it.each([
    'purchaseOrder.*',
    '*.validated',
    '*.*',
    'purchaseOrder.cancelled',
    'invoice.*.paid_1',
    '*.*.*',
    'purchaseOrder',
    'purchaseOrder.row.*',
    'nope.*',
    '*',
    'purchaseOrder.val*',
    'purchaseOrder..validated',
    'invoice.line-item.paid_',
    'purchaseorder.validated',
    'subscription.*',
    'subscription.failing',
    '*.failing',
    '*.abandoned',
    'delivery.*',
  ])('%s: documented valid exactly when the server accepts it', (candidate) => {
    expect(pattern.test(candidate)).toBe(accepted(candidate));
  });

  it('matches nothing for an empty catalogue', () => {
    const empty = new RegExp(webhookOverrides(false, []).EventTypePattern!({}).pattern as string);
    expect(empty.test('purchaseOrder.*')).toBe(false);
    expect(empty.test('')).toBe(false);
  });
});
