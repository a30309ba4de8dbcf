import { describe, expect, it } from 'vitest';
import { DomainError } from '../core/errors.ts';
import {
  AmendmentOpenError,
  amendmentDraft,
  cancelled,
  draftPurchaseOrder,
  formatReference,
  IllegalTransitionError,
  serializePurchaseOrder,
  validated,
  type Item,
  type PurchaseOrderDTO,
  type PurchaseOrderStatus,
} from './purchase-order.ts';

const DTO_KEYS = [
  'id',
  'reference',
  'status',
  'supplierName',
  'currency',
  'rows',
  'totalAmount',
  'amends',
  'createdAt',
  'validatedAt',
  'cancelledAt',
];
const ROW_KEYS = ['lineNumber', 'itemId', 'itemCode', 'itemName', 'description', 'quantity', 'unitPrice', 'amount'];

const row = {
  lineNumber: 1,
  itemId: 'item-1',
  itemCode: 'BOLT-M6',
  itemName: 'Bolt "M6" \\ zinc 😀',
  description: null,
  quantity: '3',
  unitPrice: '0.10',
  amount: '0.30',
};

const dto: PurchaseOrderDTO = {
  id: 'po-1',
  reference: null,
  status: 'Draft',
  supplierName: 'Société Générale d’Outillage',
  currency: 'EUR',
  rows: [row],
  totalAmount: '0.30',
  amends: null,
  createdAt: '2025-01-02T03:04:05.006Z',
  validatedAt: null,
  cancelledAt: null,
};

/** The same values with every object's keys in reverse order. */
function reversedKeys<T extends object>(value: T): T {
  return Object.fromEntries(
    Object.entries(value)
      .reverse()
      .map(([key, child]) => [key, Array.isArray(child) ? child.map((item: object) => reversedKeys(item)) : child]),
  ) as T;
}

describe('serializePurchaseOrder', () => {
  it('writes the DTO and row properties in the fixed order', () => {
    const parsed = JSON.parse(serializePurchaseOrder(dto)) as PurchaseOrderDTO;
    expect(Object.keys(parsed)).toEqual(DTO_KEYS);
    expect(Object.keys(parsed.rows[0]!)).toEqual(ROW_KEYS);
    expect(parsed).toEqual(dto);
  });

  it('produces the same bytes whatever the key order of the input object', () => {
    const shuffled = reversedKeys(dto);
    expect(Object.keys(shuffled)[0]).toBe('cancelledAt'); // the input really is in another order
    expect(Object.keys(shuffled.rows[0]!)[0]).toBe('amount');
    expect(serializePurchaseOrder(shuffled)).toBe(serializePurchaseOrder(dto));
  });

  it('is exactly this text (GET body and event payload come from here, byte for byte)', () => {
    expect(serializePurchaseOrder(dto)).toBe(
      '{"id":"po-1","reference":null,"status":"Draft","supplierName":"Société Générale d’Outillage","currency":"EUR",' +
        '"rows":[{"lineNumber":1,"itemId":"item-1","itemCode":"BOLT-M6","itemName":"Bolt \\"M6\\" \\\\ zinc 😀",' +
        '"description":null,"quantity":"3","unitPrice":"0.10","amount":"0.30"}],"totalAmount":"0.30","amends":null,' +
        '"createdAt":"2025-01-02T03:04:05.006Z","validatedAt":null,"cancelledAt":null}',
    );
  });

  it('leaves out properties that are not part of the DTO', () => {
    const withExtra = {
      ...dto,
      tenantId: 'secret-tenant',
      rows: [{ ...row, internal: 1 }],
    } as unknown as PurchaseOrderDTO;
    const text = serializePurchaseOrder(withExtra);
    expect(text).toBe(serializePurchaseOrder(dto));
    expect(text).not.toContain('tenantId');
    expect(text).not.toContain('internal');
  });

  it('keeps money as decimal strings (never numbers)', () => {
    const parsed = JSON.parse(serializePurchaseOrder(dto)) as Record<string, unknown>;
    expect(typeof parsed.totalAmount).toBe('string');
  });
});

const items: Item[] = [
  { id: 'i1', code: 'A', name: 'Alpha', unitPrice: '10.50', createdAt: '2025-01-01T00:00:00.000Z' },
  { id: 'i2', code: 'B', name: 'Beta', unitPrice: '0.1', createdAt: '2025-01-01T00:00:00.000Z' },
  { id: 'i3', code: 'C', name: 'Gamma', unitPrice: '999999999999.999999', createdAt: '2025-01-01T00:00:00.000Z' },
];

describe('draftPurchaseOrder', () => {
  const now = '2025-05-06T07:08:09.010Z';

  it('computes row amounts and the total exactly', () => {
    const draft = draftPurchaseOrder({
      id: 'po-9',
      supplierName: 'ACME',
      currency: 'EUR',
      rows: [
        { item: items[0]!, quantity: '3', description: 'three' },
        { item: items[1]!, quantity: '3', description: null },
        { item: items[1]!, quantity: '0.25', description: null },
      ],
      amends: null,
      now,
    });
    expect(draft.rows.map((r) => r.amount)).toEqual(['31.50', '0.3', '0.025']);
    expect(draft.totalAmount).toBe('31.825');
    expect(draft.rows.map((r) => r.lineNumber)).toEqual([1, 2, 3]);
    expect(draft.rows[0]).toEqual({
      lineNumber: 1,
      itemId: 'i1',
      itemCode: 'A',
      itemName: 'Alpha',
      description: 'three',
      quantity: '3',
      unitPrice: '10.50',
      amount: '31.50',
    });
    expect(draft).toMatchObject({
      id: 'po-9',
      reference: null,
      status: 'Draft',
      supplierName: 'ACME',
      currency: 'EUR',
      amends: null,
      createdAt: now,
      validatedAt: null,
      cancelledAt: null,
    });
  });

  it('keeps huge amounts exact', () => {
    const draft = draftPurchaseOrder({
      id: 'po-10',
      supplierName: 'ACME',
      currency: 'USD',
      rows: [
        { item: items[2]!, quantity: '1000000', description: null },
        { item: items[2]!, quantity: '0.000001', description: null },
      ],
      amends: 'po-1',
      now,
    });
    expect(draft.rows.map((r) => r.amount)).toEqual(['999999999999999999.000000', '999999.999999999999']);
    expect(draft.totalAmount).toBe('1000000000000999998.999999999999');
    expect(draft.amends).toBe('po-1');
  });

  it('totals an order without rows to zero', () => {
    const draft = draftPurchaseOrder({ id: 'p', supplierName: 's', currency: 'EUR', rows: [], amends: null, now });
    expect(draft.totalAmount).toBe('0');
    expect(draft.rows).toEqual([]);
  });
});

function inStatus(status: PurchaseOrderStatus): PurchaseOrderDTO {
  return {
    ...dto,
    status,
    reference: status === 'Draft' ? null : 'PO-000001',
    validatedAt: status === 'Validated' ? '2025-01-03T00:00:00.000Z' : null,
    cancelledAt: status === 'Cancelled' ? '2025-01-04T00:00:00.000Z' : null,
  };
}

function thrownBy(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}

describe('transitions', () => {
  const now = '2025-06-07T08:09:10.011Z';

  it('validates a draft: status, reference and validatedAt set, the input untouched', () => {
    const draft = inStatus('Draft');
    const snapshot = structuredClone(draft);
    const next = validated(draft, 'PO-000007', now);
    expect(next).toEqual({ ...draft, status: 'Validated', reference: 'PO-000007', validatedAt: now });
    expect(draft).toEqual(snapshot);
  });

  it.each(['Draft', 'Validated'] as const)('cancels an order in status %s', (status) => {
    const order = inStatus(status);
    const next = cancelled(order, now);
    expect(next).toEqual({ ...order, status: 'Cancelled', cancelledAt: now });
    expect(order.status).toBe(status);
  });

  it.each([
    ['validated', 'Validated', (o: PurchaseOrderDTO) => validated(o, 'PO-000009', now)],
    ['validated', 'Cancelled', (o: PurchaseOrderDTO) => validated(o, 'PO-000009', now)],
    ['cancelled', 'Cancelled', (o: PurchaseOrderDTO) => cancelled(o, now)],
  ] as const)('refuses to be %s from %s with IllegalTransitionError', (action, from, transition) => {
    const error = thrownBy(() => transition(inStatus(from)));
    expect(error).toBeInstanceOf(IllegalTransitionError);
    expect(error).toBeInstanceOf(DomainError);
    expect(error).toMatchObject({ code: 'PURCHASE_ORDER_ILLEGAL_TRANSITION', from, action });
    expect((error as Error).message).toBe(`a purchase order in status ${from} cannot be ${action}`);
  });
});

describe('amendmentDraft', () => {
  const now = '2025-06-07T08:09:10.011Z';
  const item: Item = { id: 'item-2', code: 'NUT', name: 'Nut', unitPrice: '0.25', createdAt: now };

  it('copies the order into a new draft amending it when nothing changes', () => {
    const original = inStatus('Validated');
    expect(amendmentDraft(original, { id: 'a1', now })).toEqual({
      ...original,
      id: 'a1',
      reference: null,
      status: 'Draft',
      amends: original.id,
      createdAt: now,
      validatedAt: null,
      cancelledAt: null,
    });
  });

  it('changes the given fields; new rows replace all rows, priced from their items', () => {
    const original = inStatus('Validated');
    const draft = amendmentDraft(original, {
      id: 'a2',
      supplierName: 'Beta',
      rows: [{ item, quantity: '4', description: 'M8' }],
      now,
    });
    expect(draft).toMatchObject({
      supplierName: 'Beta',
      currency: original.currency,
      totalAmount: '1.00',
      amends: 'po-1',
    });
    expect(draft.rows).toEqual([
      {
        lineNumber: 1,
        itemId: 'item-2',
        itemCode: 'NUT',
        itemName: 'Nut',
        description: 'M8',
        quantity: '4',
        unitPrice: '0.25',
        amount: '1.00',
      },
    ]);
    expect(amendmentDraft(original, { id: 'a3', currency: 'USD', now })).toMatchObject({
      currency: 'USD',
      rows: original.rows,
      totalAmount: original.totalAmount,
    });
  });

  it('refuses a second open amendment with a conflict naming the open draft', () => {
    const error = new AmendmentOpenError('p', 'a1');
    expect(error).toBeInstanceOf(DomainError);
    expect(error).toMatchObject({ code: 'PURCHASE_ORDER_AMENDMENT_OPEN', orderId: 'p', amendmentId: 'a1' });
    expect(error.message).toContain('a1');
  });
});

describe('formatReference', () => {
  it.each([
    [0n, 'PO-000000'],
    [1n, 'PO-000001'],
    [42n, 'PO-000042'],
    [999_999n, 'PO-999999'],
    [1_000_000n, 'PO-1000000'],
    [12_345_678_901_234_567_890n, 'PO-12345678901234567890'],
  ])('%s → %s', (sequence, expected) => {
    expect(formatReference(sequence)).toBe(expected);
  });
});
