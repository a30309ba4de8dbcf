import { describe, expect, it } from 'vitest';
import { headerValue, headerValues, readDeliveryInfo } from './headers.ts';

describe('delivery headers', () => {
  const sent = {
    'content-type': 'application/json',
    'x-webhook-event-id': 'event-1',
    'x-webhook-delivery-id': 'delivery-1',
    'x-webhook-event-type': 'purchaseOrder.cancelled',
    'x-webhook-subscription-id': 'subscription-1',
    'x-webhook-attempt': '3',
  };

  it('reads the X-Webhook-* headers of a delivery', () => {
    expect(readDeliveryInfo(sent)).toEqual({
      eventId: 'event-1',
      deliveryId: 'delivery-1',
      eventType: 'purchaseOrder.cancelled',
      subscriptionId: 'subscription-1',
      attempt: 3,
      test: false,
    });
    expect(readDeliveryInfo({ ...sent, 'x-webhook-test': 'true' }).test).toBe(true);
  });

  it('gives null for absent headers and an attempt that is not a number', () => {
    expect(readDeliveryInfo({ 'x-webhook-attempt': 'two' })).toEqual({
      eventId: null,
      deliveryId: null,
      eventType: null,
      subscriptionId: null,
      attempt: null,
      test: false,
    });
  });

  it('looks names up case-insensitively in plain objects and fetch Headers, keeping every value', () => {
    expect(headerValues({ 'X-Webhook-Event-Id': 'a', 'x-webhook-event-id': ['b', 'c'] }, 'X-WEBHOOK-EVENT-ID')).toEqual(
      ['a', 'b', 'c'],
    );
    expect(headerValue(new Headers({ 'X-Webhook-Attempt': '2' }), 'x-webhook-attempt')).toBe('2');
    expect(headerValue({ 'content-length': 12 }, 'Content-Length')).toBe('12');
    expect(headerValue({}, 'x-webhook-event-id')).toBeNull();
  });
});
