import { describe, expect, it } from 'vitest';
import { isEventTypeName, isEventTypePattern, matchesAny, matchesEventType } from './event-types.ts';

describe('matchesEventType: `*` stands for exactly one whole segment', () => {
  it.each([
    // The spec's own example.
    ['purchaseOrder.*', 'purchaseOrder.validated', true],
    ['purchaseOrder.*', 'purchaseOrder.cancelled', true],
    ['purchaseOrder.*', 'purchaseOrder.sent', true],
    ['purchaseOrder.*', 'purchaseOrder.row.added', false],
    ['purchaseOrder.*', 'purchaseOrder', false],
    ['purchaseOrder.*', 'invoice.validated', false],
    ['purchaseOrder.*', 'purchaseOrderX.validated', false],
    ['purchaseOrder.*', 'xpurchaseOrder.validated', false],
    // Leading wildcard.
    ['*.validated', 'purchaseOrder.validated', true],
    ['*.validated', 'invoice.validated', true],
    ['*.validated', 'purchaseOrder.cancelled', false],
    ['*.validated', 'validated', false],
    ['*.validated', 'purchaseOrder.row.validated', false],
    // A lone `*` is a single segment.
    ['*', 'purchaseOrder', true],
    ['*', 'purchaseOrder.validated', false],
    ['*.*', 'purchaseOrder.validated', true],
    ['*.*', 'purchaseOrder', false],
    ['*.*', 'purchaseOrder.row.added', false],
    // Middle and trailing wildcards in longer names.
    ['purchaseOrder.row.*', 'purchaseOrder.row.added', true],
    ['purchaseOrder.*.added', 'purchaseOrder.row.added', true],
    ['purchaseOrder.*.added', 'purchaseOrder.row.removed', false],
    ['purchaseOrder.*.added', 'purchaseOrder.added', false],
    // Exact names; matching is case-sensitive and literal.
    ['purchaseOrder.validated', 'purchaseOrder.validated', true],
    ['purchaseOrder.validated', 'purchaseOrder.cancelled', false],
    ['purchaseorder.validated', 'purchaseOrder.validated', false],
    ['purchaseOrder.valid*', 'purchaseOrder.validated', false],
    ['purchaseOrder.**', 'purchaseOrder.row.added', false],
    ['purchaseOrder.**', 'purchaseOrder.validated', false],
  ])('%s against %s → %s', (pattern, eventType, expected) => {
    expect(matchesEventType(pattern, eventType)).toBe(expected);
  });
});

describe('matchesAny', () => {
  it.each([
    [[], 'purchaseOrder.validated', false],
    [['invoice.*'], 'purchaseOrder.validated', false],
    [['invoice.*', 'purchaseOrder.*'], 'purchaseOrder.validated', true],
    [['invoice.*', '*.validated'], 'purchaseOrder.validated', true],
    [['purchaseOrder.*'], 'purchaseOrder.row.added', false],
    [['purchaseOrder.cancelled', 'purchaseOrder.validated'], 'purchaseOrder.validated', true],
  ])('%j against %s → %s', (patterns, eventType, expected) => {
    expect(matchesAny(patterns, eventType)).toBe(expected);
  });
});

describe('isEventTypePattern', () => {
  it.each([
    'purchaseOrder.validated',
    'purchaseOrder.*',
    '*.validated',
    '*',
    '*.*',
    'purchaseOrder.*.added',
    'a_b-c.D9',
    'a'.repeat(200),
  ])('accepts %s', (pattern) => {
    expect(isEventTypePattern(pattern)).toBe(true);
  });

  it.each([
    '',
    '.',
    'purchaseOrder.',
    '.validated',
    'purchaseOrder..validated',
    'purchase*',
    'purchaseOrder.va*',
    '*validated',
    '**',
    'purchaseOrder.**',
    '#',
    'purchaseOrder.#',
    '>',
    '9purchase.validated',
    '_purchase.validated',
    'purchase order.validated',
    'purchaseOrder/validated',
    'purchaseOrder.-validated',
    ' purchaseOrder.validated',
    'purchaseOrder.validated ',
    'purchaseOrder.?',
    'a'.repeat(201),
  ])('rejects %j', (pattern) => {
    expect(isEventTypePattern(pattern)).toBe(false);
  });
});

describe('isEventTypeName', () => {
  it.each(['purchaseOrder.validated', 'purchaseOrder', 'purchaseOrder.row.added', 'a-b_c.d9'])('accepts %s', (name) => {
    expect(isEventTypeName(name)).toBe(true);
  });

  it.each(['', '*', 'purchaseOrder.*', '*.validated', 'purchaseOrder..x', 'purchaseOrder.', '9x', 'a'.repeat(201)])(
    'rejects %j (wildcards are not names)',
    (name) => {
      expect(isEventTypeName(name)).toBe(false);
    },
  );
});
