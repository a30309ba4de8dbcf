// Sample deliveries for the kit's tests, written the way the service writes them: the envelope text around the
// payload bytes, in the service's field order (core/envelope.ts), signed over the exact bytes.
import type { PurchaseOrderDTO } from '../src/types.ts';
import { signWebhook } from '../src/verify.ts';

export const SECRET = 'c2VjcmV0LW9mLXRoZS1zdWJzY3JpcHRpb24tMDAwMDA=';

/** A validated order whose text is not ASCII (é, “ ”, an emoji), so bytes and characters differ. */
export const validatedOrder: PurchaseOrderDTO = {
  id: '6f1d2a7e-0c9b-4f3e-8a51-2b7c9d0e4f11',
  reference: 'PO-000042',
  status: 'Validated',
  supplierName: 'Société “Acme” 🚀',
  currency: 'EUR',
  rows: [
    {
      lineNumber: 1,
      itemId: 'b3c4d5e6-0000-4000-8000-000000000001',
      itemCode: 'BOLT-M8',
      itemName: 'Boulon ½" inox',
      description: null,
      quantity: '100',
      unitPrice: '0.125',
      amount: '12.500',
    },
  ],
  totalAmount: '12.500',
  amends: null,
  createdAt: '2025-03-04T05:06:07.089Z',
  validatedAt: '2025-03-04T05:07:00.001Z',
  cancelledAt: null,
};

/** The envelope bytes the service would send for `order` (payload null when `omitted`). */
export function envelopeBody(
  order: PurchaseOrderDTO,
  options: { eventType?: string; eventId?: string; omitted?: boolean } = {},
): Buffer {
  const fields = {
    eventId: options.eventId ?? '0b7c6f1e-3a52-4c1b-9d7e-2f4a6b8c0d1e',
    eventType: options.eventType ?? 'purchaseOrder.validated',
    occurredAt: order.validatedAt ?? order.createdAt,
    entityId: order.id,
    reference: order.reference,
    resourceUrl: `/CorePurchase/REST/PurchaseOrders/${order.id}`,
    subscriptionId: 'a1b2c3d4-1111-4222-8333-444455556666',
  };
  const head = JSON.stringify(fields).slice(0, -1);
  const payload = options.omitted ? 'null' : JSON.stringify(order);
  return Buffer.from(`${head},"payload":${payload},"payloadOmitted":${options.omitted === true}}`, 'utf8');
}

/** The headers the dispatcher sends with `body`, signed with `secret`. */
export function deliveryHeaders(
  body: Buffer,
  secret = SECRET,
  overrides: Record<string, string> = {},
): Record<string, string> {
  const envelope = JSON.parse(body.toString('utf8')) as { eventId: string; eventType: string; subscriptionId: string };
  return {
    'content-type': 'application/json',
    'user-agent': 'CoreWebhooks/1.0',
    'x-webhook-event-id': envelope.eventId,
    'x-webhook-delivery-id': '9e8d7c6b-5a49-4838-a727-161504f3e2d1',
    'x-webhook-event-type': envelope.eventType,
    'x-webhook-subscription-id': envelope.subscriptionId,
    'x-webhook-attempt': '1',
    'x-webhook-signature': signWebhook(secret, body),
    ...overrides,
  };
}
