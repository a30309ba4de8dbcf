// The shape of a subscription's `filter` (README "Filters on the payload"), for integrators who build filters in
// code: the service checks the same rules when the filter is set (core/subscriptions/filter.ts) and answers 400 with
// the place of each mistake.

/** Any JSON value. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** A JSON scalar: what `$in` and `$nin` list. */
export type JsonScalar = string | number | boolean | null;

/** The envelope fields a filter can read, besides `payload.…` paths. */
export type FilterEnvelopeField = 'eventId' | 'eventType' | 'occurredAt' | 'entityId' | 'reference' | 'resourceUrl';

/** A field path: an envelope field, or `payload` and dotted names into it (a name meeting an array applies to each element). */
export type FilterPath = FilterEnvelopeField | 'payload' | `payload.${string}`;

/**
 * Operators on one path, all of which must hold. Numbers and decimal strings ("124.80") compare as exact decimals;
 * other strings by their characters; other mixes compare false. A missing field satisfies only `$neq`, `$nin` and
 * `$exist: false`.
 */
export interface FilterCondition {
  $eq?: JsonValue;
  $neq?: JsonValue;
  $gt?: number | string;
  $gte?: number | string;
  $lt?: number | string;
  $lte?: number | string;
  /** 1 to 100 values. */
  $in?: JsonScalar[];
  $nin?: JsonScalar[];
  $exist?: boolean;
  $startsWith?: string;
  $endsWith?: string;
}

/** A filter: every key must hold. A path maps to a value (equality) or to a condition. */
export type SubscriptionFilter = {
  $and?: SubscriptionFilter[];
  $or?: SubscriptionFilter[];
  $not?: SubscriptionFilter;
} & { [path in FilterPath]?: JsonScalar | JsonValue[] | FilterCondition };

/**
 * A subscription's `ordering`: 'entity' delivers the events of one entity (the envelope's `entityId`) one at a time, in
 * the order they were raised, each once the one before it was acknowledged, abandoned or superseded; 'none' (the
 * default) promises no order. Replays and test deliveries are outside the order either way.
 */
export type SubscriptionOrdering = 'none' | 'entity';
