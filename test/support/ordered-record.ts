import type { DeliveryRecord } from '../../core/deliveries/delivery-record.ts';

/** A delivery record of an ordered subscription (entity po-1 unless told), at place `seq` of its entity's order. */
export function orderedRecord(
  deliveryId: string,
  seq: number,
  overrides: Partial<Omit<DeliveryRecord, 'orderSeq'>> = {},
): DeliveryRecord & { orderSeq: number } {
  return {
    deliveryId,
    tenantId: 'tenant-a',
    subscriptionId: 'sub-1',
    eventId: `evt-${deliveryId}`,
    eventType: 'purchaseOrder.validated',
    entityId: 'po-1',
    occurredAt: '2026-11-27T11:59:00.000Z',
    queuedAt: 0,
    attempt: 1,
    dueAt: 0,
    envelope: Buffer.from('{}'),
    signature: null,
    replayOf: null,
    orderSeq: seq,
    ...overrides,
  };
}
