// @core-webhooks/receiver-kit: verify and type Core Webhooks deliveries with Node's standard library only.
export { VERIFICATION_ERRORS, WebhookVerificationError, type WebhookVerificationErrorCode } from './errors.ts';
export type {
  FilterCondition,
  FilterEnvelopeField,
  FilterPath,
  JsonScalar,
  JsonValue,
  SubscriptionFilter,
  SubscriptionOrdering,
} from './filter.ts';
export { headerValue, headerValues, readDeliveryInfo, type RequestHeaders } from './headers.ts';
export {
  DELIVERY_HEADERS,
  PURCHASE_EVENT_TYPES,
  type CancelledPurchaseOrder,
  type DeliveryInfo,
  type Envelope,
  type EnvelopeFields,
  type PurchaseEventType,
  type PurchaseOrderCancelledEnvelope,
  type PurchaseOrderDTO,
  type PurchaseOrderEnvelope,
  type PurchaseOrderRow,
  type PurchaseOrderSentEnvelope,
  type PurchaseOrderStatus,
  type PurchaseOrderValidatedEnvelope,
  type ValidatedPurchaseOrder,
  type WebhookDeliveryHeaders,
} from './types.ts';
export {
  signWebhook,
  verifyStandardWebhook,
  verifyWebhook,
  type RawBody,
  type VerifyStandardWebhookOptions,
  type VerifyWebhookOptions,
} from './verify.ts';
