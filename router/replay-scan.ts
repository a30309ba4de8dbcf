import { HOUR } from '../core/deliveries/delivery-store.ts';
import type { Delivery } from '../core/deliveries/delivery.ts';
import { matchesAny } from '../core/event-types.ts';
import type { ReplayFilters } from '../core/replay-jobs/replay-job.ts';

/** An index row of the history: a delivery and when it was queued (the clustering key). */
type Entry = { queuedAt: Date; id: string };

/** The history a replay job reads: the index tables (one partition per hour) and the delivery rows. */
export interface ScanReader {
  indexPage(
    index: { table: 'tenant' | 'subscription' | 'eventType'; tenantId: string; key?: string },
    hour: number,
    before: Entry | undefined,
    limit: number,
  ): Promise<Entry[]>;
  getMany(tenantId: string, ids: string[]): Promise<(Delivery | undefined)[]>;
}

/** How much one page may read and find. */
export interface ScanLimits {
  /** Matching deliveries a page answers at most. */
  matches: number;
  /** Index rows a page reads at most (a filter matching little must not read a whole busy hour at once). */
  rows: number;
  /** Hour partitions a page moves through at most (a sparse history is read in several pages). */
  hours: number;
}

/** Where a scan continues: an hour partition, and the row below which it goes on there (none: from its top). */
interface Position {
  hour: number;
  before: { queuedAt: number; id: string } | null;
}

/** Index rows read per query when rows may not match (a small page would otherwise read them one by one). */
const CHUNK = 100;

/**
 * One page of the deliveries a job replays: newest first through the history's hour partitions, those queued in
 * [lower, upper) that match the filters and `keep`, read on from `cursor` (null: from `upper`). Answers them and the
 * cursor of the next page, or null once the scan has passed `lower`. The cursor is the job's own: it is persisted after
 * every page, so a job resumed elsewhere goes on where this page ended.
 */
export async function scanPage(
  reader: ScanReader,
  tenantId: string,
  filters: ReplayFilters,
  bounds: { lower: number; upper: number },
  cursor: string | null,
  limits: ScanLimits,
  keep: (delivery: Delivery) => boolean,
): Promise<{ matches: Delivery[]; cursor: string | null }> {
  if (bounds.upper <= bounds.lower) return { matches: [], cursor: null };
  // `upper` is exclusive: strictly below (upper, '') in its hour, so no row queued at `upper` itself.
  let position: Position = cursor
    ? decodeCursor(cursor)
    : { hour: Math.floor((bounds.upper - 1) / HOUR), before: { queuedAt: bounds.upper, id: '' } };
  const lowest = Math.floor(bounds.lower / HOUR);
  const index = indexFor(tenantId, filters);
  const matches: Delivery[] = [];
  let rows = 0;
  let hours = 0;
  while (position.hour >= lowest) {
    if (rows >= limits.rows || hours >= limits.hours) return { matches, cursor: encodeCursor(position) };
    const size = Math.min(limits.rows - rows, Math.max(limits.matches - matches.length, CHUNK));
    const before = position.before
      ? { queuedAt: new Date(position.before.queuedAt), id: position.before.id }
      : undefined;
    const entries = await reader.indexPage(index, position.hour, before, size);
    rows += entries.length;
    const deliveries = await reader.getMany(
      tenantId,
      entries.map((entry) => entry.id),
    );
    for (const [at, entry] of entries.entries()) {
      // Newest first: once below `lower`, every row left is too.
      if (entry.queuedAt.getTime() < bounds.lower) return { matches, cursor: null };
      position = { hour: position.hour, before: { queuedAt: entry.queuedAt.getTime(), id: entry.id } };
      const delivery = deliveries[at];
      if (delivery && selected(delivery, filters) && keep(delivery)) matches.push(delivery);
      if (matches.length >= limits.matches) return { matches, cursor: encodeCursor(position) };
    }
    if (entries.length < size) {
      position = { hour: position.hour - 1, before: null };
      hours += 1;
    }
  }
  return { matches, cursor: null };
}

/** The most selective index for the filters: the subscription's, one exact event type's, else the tenant's. */
function indexFor(tenantId: string, filters: ReplayFilters) {
  if (filters.subscriptionId !== undefined) {
    return { table: 'subscription' as const, tenantId, key: filters.subscriptionId };
  }
  const [only, ...others] = filters.eventTypes ?? [];
  if (only !== undefined && others.length === 0 && !only.split('.').includes('*')) {
    return { table: 'eventType' as const, tenantId, key: only };
  }
  return { table: 'tenant' as const, tenantId };
}

/** The filters the index did not apply, on the delivery's current row (its status changes, so it is read, not indexed). */
function selected(delivery: Delivery, filters: ReplayFilters): boolean {
  return (
    (filters.subscriptionId === undefined || delivery.subscriptionId === filters.subscriptionId) &&
    (filters.eventTypes === undefined || matchesAny(filters.eventTypes, delivery.eventType)) &&
    (filters.status === undefined || delivery.status === filters.status)
  );
}

function encodeCursor(position: Position): string {
  const { hour, before } = position;
  return Buffer.from(JSON.stringify([hour, before?.queuedAt ?? null, before?.id ?? null])).toString('base64url');
}

function decodeCursor(cursor: string): Position {
  const [hour, queuedAt, id] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown[];
  if (!Number.isSafeInteger(hour)) throw new Error(`not a replay scan cursor: ${cursor}`);
  if (queuedAt === null) return { hour: hour as number, before: null };
  if (!Number.isSafeInteger(queuedAt) || typeof id !== 'string') throw new Error(`not a replay scan cursor: ${cursor}`);
  return { hour: hour as number, before: { queuedAt: queuedAt as number, id } };
}
