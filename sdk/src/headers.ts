import { DELIVERY_HEADERS, type DeliveryInfo } from './types.ts';

/**
 * Request headers as a framework hands them over: Node's `request.headers` (or any plain object, keys in any case,
 * values a string or an array of strings), or a fetch-style `Headers`.
 */
export type RequestHeaders =
  Readonly<Record<string, string | readonly string[] | number | undefined>> | { get(name: string): string | null };

/** Every value of the header `name`, looked up case-insensitively, in the order given. */
export function headerValues(headers: RequestHeaders, name: string): string[] {
  const wanted = name.toLowerCase();
  if (typeof headers.get === 'function') {
    const value = (headers as { get(name: string): string | null }).get(wanted);
    return value === null ? [] : [value];
  }
  const values: string[] = [];
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() !== wanted || value === undefined) continue;
    if (Array.isArray(value)) values.push(...value.map(String));
    else values.push(String(value));
  }
  return values;
}

/** The first value of the header `name`, or null. */
export function headerValue(headers: RequestHeaders, name: string): string | null {
  return headerValues(headers, name)[0] ?? null;
}

/**
 * The X-Webhook-* headers of a delivery, for logs and metrics. They are not signed: decide on the verified body
 * (its eventId equals X-Webhook-Event-Id), never on these alone.
 */
export function readDeliveryInfo(headers: RequestHeaders): DeliveryInfo {
  const attempt = headerValue(headers, DELIVERY_HEADERS.attempt);
  return {
    eventId: headerValue(headers, DELIVERY_HEADERS.eventId),
    deliveryId: headerValue(headers, DELIVERY_HEADERS.deliveryId),
    eventType: headerValue(headers, DELIVERY_HEADERS.eventType),
    subscriptionId: headerValue(headers, DELIVERY_HEADERS.subscriptionId),
    attempt: attempt !== null && /^\d+$/.test(attempt) ? Number(attempt) : null,
    test: headerValue(headers, DELIVERY_HEADERS.test) === 'true',
  };
}
