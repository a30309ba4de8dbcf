import { createHash, randomBytes, randomUUID } from 'node:crypto';

/** A new random identifier. */
export function newId(): string {
  return randomUUID();
}

/**
 * A delivery id that is the same every time the same event is routed to the same subscription, so reprocessing an
 * event after a crash rewrites the same delivery instead of starting a second series.
 */
export function deliveryIdFor(eventId: string, subscriptionId: string): string {
  return stableIdFor(eventId, subscriptionId);
}

/** An identifier derived from `parts` (the same parts give the same id), formatted as a v8 UUID. */
export function stableIdFor(...parts: string[]): string {
  const hex = createHash('sha256').update(parts.join('\u0000')).digest('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/**
 * A new random identifier whose text sorts by creation time (RFC 9562 version 7: 48 bits of epoch milliseconds, then
 * random bits), so a table clustered on it lists rows newest first without another column.
 */
export function newTimeOrderedId(now = Date.now()): string {
  const hex = now.toString(16).padStart(12, '0').slice(-12) + randomBytes(10).toString('hex');
  const variant = ((parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-7${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}
