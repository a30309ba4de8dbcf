import type { EventTypeEntry } from '../core/catalogue.ts';
import type { OutgoingRecord } from '../core/kafka.ts';
import {
  cancelledPurchaseOrderExample,
  purchaseOrderJsonSchema,
  validatedPurchaseOrderExample,
} from './purchase-order-schema.ts';

/** An event type the purchase service declares, with its payload's schema and an example payload. */
export interface PurchaseEventType {
  eventType: string;
  description: string;
  payloadSchema: object;
  example: unknown;
}

/** The event types the purchase service declares; `purchaseOrder.sent` is declared and never raised yet. */
export const PURCHASE_EVENT_TYPES: PurchaseEventType[] = [
  {
    eventType: 'purchaseOrder.validated',
    description:
      'A purchase order was validated and assigned its business reference (amendments too, under their own id).',
    payloadSchema: purchaseOrderJsonSchema,
    example: validatedPurchaseOrderExample,
  },
  {
    eventType: 'purchaseOrder.cancelled',
    description: 'A purchase order was cancelled and will not be executed.',
    payloadSchema: purchaseOrderJsonSchema,
    example: cancelledPurchaseOrderExample,
  },
  {
    eventType: 'purchaseOrder.sent',
    description:
      'A purchase order was sent to its supplier. Declared; nothing raises it until the sending flow exists.',
    payloadSchema: purchaseOrderJsonSchema,
    example: validatedPurchaseOrderExample,
  },
];

/** Catalogue records keyed by event type, for the compacted catalogue topic. */
export async function catalogueRecords(
  topic: string,
  encode: (entry: EventTypeEntry) => Promise<Buffer>,
): Promise<OutgoingRecord[]> {
  return Promise.all(
    PURCHASE_EVENT_TYPES.map(async (declared) => {
      const entry: EventTypeEntry = {
        eventType: declared.eventType,
        service: 'purchase',
        description: declared.description,
        payloadSchema: JSON.stringify(declared.payloadSchema),
        example: JSON.stringify(declared.example),
      };
      return { topic, key: entry.eventType, value: await encode(entry) };
    }),
  );
}
