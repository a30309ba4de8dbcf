import type { EventTypeEntry } from '../core/catalogue.ts';
import type { OutgoingRecord } from '../core/kafka.ts';

/** The event types the purchase service declares; `purchaseOrder.sent` is declared and never raised yet. */
export const PURCHASE_EVENT_TYPES: EventTypeEntry[] = [
  {
    eventType: 'purchaseOrder.validated',
    service: 'purchase',
    description:
      'A purchase order was validated and assigned its business reference (amendments too, under their own id).',
  },
  {
    eventType: 'purchaseOrder.cancelled',
    service: 'purchase',
    description: 'A purchase order was cancelled and will not be executed.',
  },
  {
    eventType: 'purchaseOrder.sent',
    service: 'purchase',
    description:
      'A purchase order was sent to its supplier. Declared; nothing raises it until the sending flow exists.',
  },
];

/** Catalogue records keyed by event type, for the compacted catalogue topic. */
export async function catalogueRecords(
  topic: string,
  encode: (entry: EventTypeEntry) => Promise<Buffer>,
): Promise<OutgoingRecord[]> {
  return Promise.all(
    PURCHASE_EVENT_TYPES.map(async (entry) => ({ topic, key: entry.eventType, value: await encode(entry) })),
  );
}
