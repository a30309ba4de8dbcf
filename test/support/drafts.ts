import { draftPurchaseOrder, type PurchaseOrderDTO } from '../../producer/purchase-order.ts';

/** A draft purchase order of one row (item i1, a bolt at 2), as the purchase store's tests write them. */
export function oneRowDraft(id: string, quantity = '1', description: string | null = null): PurchaseOrderDTO {
  const now = new Date().toISOString();
  return draftPurchaseOrder({
    id,
    supplierName: 'Acme',
    currency: 'EUR',
    rows: [{ item: { id: 'i1', code: 'C1', name: 'Bolt', unitPrice: '2', createdAt: now }, quantity, description }],
    amends: null,
    now,
  });
}
