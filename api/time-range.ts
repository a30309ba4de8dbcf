import { InvalidInputError } from '../core/errors.ts';

/** A range of queue times from a request: `from` inclusive, `to` exclusive, epoch ms; either may be open. */
export interface TimeRange {
  from?: number;
  to?: number;
}

/**
 * The `from` and `to` of a request (RFC 3339 date-times, validated as such by the route schema) as epoch ms; a `to`
 * that is not after `from` is refused (400 naming `to`): no schema can say it.
 */
export function timeRange(from: string | undefined, to: string | undefined): TimeRange {
  const range: TimeRange = {};
  if (from !== undefined) range.from = instant(from, 'from');
  if (to !== undefined) range.to = instant(to, 'to');
  if (range.from !== undefined && range.to !== undefined && range.to <= range.from) {
    throw new InvalidInputError([{ path: 'to', message: `must be after from (${from})` }]);
  }
  return range;
}

/** Epoch ms of an RFC 3339 date-time (validated by the schema); a leap second (…:60) is the next second's start. */
function instant(text: string, path: string): number {
  const parsed = Date.parse(text);
  if (!Number.isNaN(parsed)) return parsed;
  const leap = Date.parse(text.replace(/(T\d{2}:\d{2}):60/i, '$1:59')) + 1_000;
  if (Number.isNaN(leap)) throw new InvalidInputError([{ path, message: 'is not a date-time this service reads' }]);
  return leap;
}
