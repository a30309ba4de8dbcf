import { ConflictError } from '../core/errors.ts';
import { multiply, sum } from './money.ts';

export type PurchaseOrderStatus = 'Draft' | 'Validated' | 'Cancelled';

export interface Item {
  id: string;
  code: string;
  name: string;
  unitPrice: string;
  createdAt: string;
}

export interface PurchaseOrderRow {
  lineNumber: number;
  itemId: string;
  itemCode: string;
  itemName: string;
  description: string | null;
  quantity: string;
  unitPrice: string;
  amount: string;
}

/** PurchaseOrderDTO: the one shape of every response body and every event payload. */
export interface PurchaseOrderDTO {
  id: string;
  reference: string | null;
  status: PurchaseOrderStatus;
  supplierName: string;
  currency: string;
  rows: PurchaseOrderRow[];
  totalAmount: string;
  amends: string | null;
  createdAt: string;
  validatedAt: string | null;
  cancelledAt: string | null;
}

/**
 * The one serializer: GET bodies and event payloads both come from here, so a payload equals the GET body byte for
 * byte. Properties are written in a fixed order whatever order the input object has.
 */
export function serializePurchaseOrder(dto: PurchaseOrderDTO): string {
  return JSON.stringify({
    id: dto.id,
    reference: dto.reference,
    status: dto.status,
    supplierName: dto.supplierName,
    currency: dto.currency,
    rows: dto.rows.map((row) => ({
      lineNumber: row.lineNumber,
      itemId: row.itemId,
      itemCode: row.itemCode,
      itemName: row.itemName,
      description: row.description,
      quantity: row.quantity,
      unitPrice: row.unitPrice,
      amount: row.amount,
    })),
    totalAmount: dto.totalAmount,
    amends: dto.amends,
    createdAt: dto.createdAt,
    validatedAt: dto.validatedAt,
    cancelledAt: dto.cancelledAt,
  });
}

/** A new draft from validated input rows and the tenant's items. */
export function draftPurchaseOrder(input: {
  id: string;
  supplierName: string;
  currency: string;
  rows: { item: Item; quantity: string; description: string | null }[];
  amends: string | null;
  now: string;
}): PurchaseOrderDTO {
  const rows = input.rows.map((row, index) => ({
    lineNumber: index + 1,
    itemId: row.item.id,
    itemCode: row.item.code,
    itemName: row.item.name,
    description: row.description,
    quantity: row.quantity,
    unitPrice: row.item.unitPrice,
    amount: multiply(row.item.unitPrice, row.quantity),
  }));
  return {
    id: input.id,
    reference: null,
    status: 'Draft',
    supplierName: input.supplierName,
    currency: input.currency,
    rows,
    totalAmount: sum(rows.map((row) => row.amount)),
    amends: input.amends,
    createdAt: input.now,
    validatedAt: null,
    cancelledAt: null,
  };
}

/**
 * The draft amending a validated order: the order's fields with the given ones changed. New rows replace all rows and
 * are priced afresh from the items; without rows, the order's rows (and prices) are kept.
 */
export function amendmentDraft(
  original: PurchaseOrderDTO,
  changes: {
    id: string;
    supplierName?: string;
    currency?: string;
    rows?: { item: Item; quantity: string; description: string | null }[];
    now: string;
  },
): PurchaseOrderDTO {
  const supplierName = changes.supplierName ?? original.supplierName;
  const currency = changes.currency ?? original.currency;
  if (changes.rows) {
    return draftPurchaseOrder({
      id: changes.id,
      supplierName,
      currency,
      rows: changes.rows,
      amends: original.id,
      now: changes.now,
    });
  }
  return {
    ...original,
    id: changes.id,
    reference: null,
    status: 'Draft',
    supplierName,
    currency,
    amends: original.id,
    createdAt: changes.now,
    validatedAt: null,
    cancelledAt: null,
  };
}

/** Thrown when an order is amended while an amendment draft of it is still a Draft (answered with 409). */
export class AmendmentOpenError extends ConflictError {
  override readonly code = 'PURCHASE_ORDER_AMENDMENT_OPEN';
  constructor(
    readonly orderId: string,
    readonly amendmentId: string,
  ) {
    super(
      `purchase order ${orderId} already has an open amendment, the draft ${amendmentId}; validate or cancel it first`,
    );
  }
}

/** Thrown when a transition is not allowed from the order's state (answered with 409). */
export class IllegalTransitionError extends ConflictError {
  override readonly code = 'PURCHASE_ORDER_ILLEGAL_TRANSITION';
  constructor(
    readonly from: PurchaseOrderStatus,
    readonly action: string,
  ) {
    super(`a purchase order in status ${from} cannot be ${action}`);
  }
}

export function validated(dto: PurchaseOrderDTO, reference: string, now: string): PurchaseOrderDTO {
  if (dto.status !== 'Draft') throw new IllegalTransitionError(dto.status, 'validated');
  return { ...dto, status: 'Validated', reference, validatedAt: now };
}

export function cancelled(dto: PurchaseOrderDTO, now: string): PurchaseOrderDTO {
  if (dto.status === 'Cancelled') throw new IllegalTransitionError(dto.status, 'cancelled');
  return { ...dto, status: 'Cancelled', cancelledAt: now };
}

export function formatReference(sequence: bigint): string {
  return `PO-${sequence.toString().padStart(6, '0')}`;
}

/** The sequence value of a reference made by `formatReference`. */
export function parseReference(reference: string): bigint {
  return BigInt(reference.slice('PO-'.length));
}
