import { isOperationalEventType } from './operational-events.ts';

/** Event type names: dotted segments of letters, digits, `_` and `-`. */
const SEGMENT = /^[A-Za-z][A-Za-z0-9_-]*$/;

/** Whether `name` is a valid concrete event type (no wildcard). */
export function isEventTypeName(name: string): boolean {
  return name.length <= 200 && name.split('.').every((segment) => SEGMENT.test(segment));
}

/** Whether `pattern` is a valid subscription pattern: segments, each a name or `*` (one whole segment). */
export function isEventTypePattern(pattern: string): boolean {
  return pattern.length <= 200 && pattern.split('.').every((segment) => segment === '*' || SEGMENT.test(segment));
}

/**
 * `*` matches exactly one segment: `purchaseOrder.*` matches `purchaseOrder.validated`, not `purchaseOrder.row.added`.
 * An operational event type is matched only by a pattern that names its first segment (`subscription.*`, not `*.*`):
 * a subscription to every business event does not start receiving the service's own events.
 */
export function matchesEventType(pattern: string, eventType: string): boolean {
  const wanted = pattern.split('.');
  const actual = eventType.split('.');
  if (wanted[0] === '*' && isOperationalEventType(eventType)) return false;
  return (
    wanted.length === actual.length && wanted.every((segment, index) => segment === '*' || segment === actual[index])
  );
}

export function matchesAny(patterns: readonly string[], eventType: string): boolean {
  return patterns.some((pattern) => matchesEventType(pattern, eventType));
}
