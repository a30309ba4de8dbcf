import { describe, expect, it } from 'vitest';
import type { SubscriptionFilter, SubscriptionOrdering } from './filter.ts';

// The type is checked by tsc (npm run check, and sdk/standalone.test.ts on a copy of sdk/): the @ts-expect-error lines
// fail the check if the type ever lets those mistakes through.
describe('SubscriptionFilter', () => {
  it("types the README's example, and refuses a misspelt operator, an unknown field and a bad operand", () => {
    const filter: SubscriptionFilter = {
      eventType: 'purchaseOrder.validated',
      $or: [
        { 'payload.totalAmount': { $gte: '10000' }, 'payload.supplierName': { $in: ['Acme', 'Globex'] } },
        { 'payload.rows.itemCode': { $startsWith: 'TONER-' } },
      ],
      $not: { reference: null },
    };
    // @ts-expect-error $gtee is no operator
    const typo: SubscriptionFilter = { 'payload.totalAmount': { $gtee: '1' } };
    // @ts-expect-error eventTypes is no envelope field
    const field: SubscriptionFilter = { eventTypes: 'purchaseOrder.validated' };
    // @ts-expect-error $exist takes a boolean
    const operand: SubscriptionFilter = { 'payload.amends': { $exist: 'yes' } };
    expect(Object.keys(filter)).toEqual(['eventType', '$or', '$not']);
    expect([typo, field, operand].map((mistake) => Object.keys(mistake)[0])).toEqual([
      'payload.totalAmount',
      'eventTypes',
      'payload.amends',
    ]);
  });
});

describe('SubscriptionOrdering', () => {
  it('is one of the two values the API accepts', () => {
    const orderings: SubscriptionOrdering[] = ['none', 'entity'];
    // @ts-expect-error 'fifo' is no ordering the API accepts (it answers 400)
    const unknown: SubscriptionOrdering = 'fifo';
    expect([...orderings, unknown]).toEqual(['none', 'entity', 'fifo']);
  });
});
