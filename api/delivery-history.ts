import type { Delivery, DeliveryStatus } from '../core/deliveries/delivery.ts';
import { HOUR, type DeliveryStore } from '../core/deliveries/delivery-store.ts';
import { InvalidInputError } from '../core/errors.ts';

export interface HistoryQuery {
  tenantId: string;
  subscriptionId?: string;
  eventId?: string;
  eventType?: string;
  status?: DeliveryStatus;
  limit: number;
  cursor?: string;
}

interface Position {
  hour: number;
  queuedAt: number;
  id: string;
}

/** Hour partitions read by one page request at most; a sparse history answers short pages with a cursor. */
const HOURS_PER_PAGE = 72;

/**
 * Index rows (and deliveries loaded to filter them) read by one page request at most. A filter that matches little
 * in a busy hour would otherwise read the whole hour (millions of rows) in one request; when the budget is spent the
 * page answers what it found, possibly nothing, with a cursor after the last row read. 2,000 is four times the
 * largest page (500), so a page whose rows all match is always full, and one request stays at a few dozen
 * milliseconds of Cassandra reads.
 */
export const INDEX_ROWS_PER_REQUEST = 2_000;

/** Index rows read per query when filters may reject rows (a one-item page would otherwise read one row a time). */
const FILTERED_CHUNK = 100;

/** What the history reads of the delivery store. */
export type HistoryReader = Pick<DeliveryStore, 'indexPage' | 'eventIndex' | 'getMany'>;

/**
 * Newest-first delivery history through the index tables: one partition per tenant (and filter) per hour, read in
 * order from the cursor back to the retention horizon. The most selective filter picks the index; the others,
 * and status (which changes too often to index), are applied to the rows read, at most INDEX_ROWS_PER_REQUEST of them.
 */
export async function listDeliveries(
  store: HistoryReader,
  query: HistoryQuery,
  retentionMs: number,
  now = Date.now(),
): Promise<{ items: Delivery[]; nextCursor: string | null }> {
  const matches = (delivery: Delivery | undefined): delivery is Delivery =>
    delivery !== undefined &&
    (query.subscriptionId === undefined || delivery.subscriptionId === query.subscriptionId) &&
    (query.eventType === undefined || delivery.eventType === query.eventType) &&
    (query.eventId === undefined || delivery.eventId === query.eventId) &&
    (query.status === undefined || delivery.status === query.status);
  const load = async (ids: string[]) => (await store.getMany(query.tenantId, ids)).filter(matches);

  if (query.eventId !== undefined) {
    // One event has few deliveries: a single partition, paged in memory.
    const all = await store.eventIndex(query.tenantId, query.eventId);
    const position = query.cursor ? decodeCursor(query.cursor) : { hour: 0, queuedAt: 0, id: '0' };
    const offset = /^\d{1,9}$/.test(position.id) ? Number(position.id) : NaN;
    // A cursor of another listing (an hour position) is no offset into this one.
    if (Number.isNaN(offset) || position.hour !== 0) throw invalidCursor();
    const items = await load(all.slice(offset, offset + query.limit).map((entry) => entry.id));
    const next = offset + query.limit;
    return { items, nextCursor: next < all.length ? encodeCursor({ hour: 0, queuedAt: 0, id: String(next) }) : null };
  }

  const index =
    query.subscriptionId !== undefined
      ? { table: 'subscription' as const, tenantId: query.tenantId, key: query.subscriptionId }
      : query.eventType !== undefined
        ? { table: 'eventType' as const, tenantId: query.tenantId, key: query.eventType }
        : { table: 'tenant' as const, tenantId: query.tenantId };
  // Rows the index key does not decide (status, or a second filter) are only known after loading the delivery:
  // read them in chunks larger than the page, since most may be rejected.
  const filtered = query.status !== undefined || (index.table === 'subscription' && query.eventType !== undefined);
  const horizon = Math.floor((now - retentionMs) / HOUR);
  let position: Position | undefined = query.cursor ? decodeCursor(query.cursor) : undefined;
  let hour = position?.hour ?? Math.floor(now / HOUR);
  let budget = INDEX_ROWS_PER_REQUEST;
  const items: Delivery[] = [];
  for (let scanned = 0; hour >= horizon && scanned < HOURS_PER_PAGE && budget > 0;) {
    // A cursor with an empty id starts an hour from its newest row.
    const before =
      position && position.hour === hour && position.id !== ''
        ? { queuedAt: new Date(position.queuedAt), id: position.id }
        : undefined;
    const want = query.limit - items.length;
    const size = Math.min(budget, filtered ? Math.max(want, FILTERED_CHUNK) : want);
    const entries = await store.indexPage(index, hour, before, size);
    budget -= entries.length;
    const ids = entries.map((entry) => entry.id);
    const deliveries = await store.getMany(query.tenantId, ids);
    for (const [at, entry] of entries.entries()) {
      const delivery = deliveries[at];
      if (matches(delivery)) items.push(delivery);
      // The page is full: continue after this row (rows after it in the chunk are read again by the next page).
      if (items.length === query.limit) return { items, nextCursor: encodeCursor(positionOf(hour, entry)) };
    }
    const last = entries.at(-1);
    if (entries.length === size && last) {
      // The hour may have more rows: stay in it, after the last row read, unless the budget is spent.
      position = positionOf(hour, last);
      if (budget === 0) return { items, nextCursor: encodeCursor(position) };
      continue;
    }
    hour -= 1;
    scanned += 1;
    position = undefined;
  }
  return { items, nextCursor: hour >= horizon ? encodeCursor({ hour, queuedAt: 0, id: '' }) : null };
}

function positionOf(hour: number, entry: { queuedAt: Date; id: string }): Position {
  return { hour, queuedAt: entry.queuedAt.getTime(), id: entry.id };
}

function encodeCursor(position: Position): string {
  return Buffer.from(JSON.stringify([position.hour, position.queuedAt, position.id])).toString('base64url');
}

function decodeCursor(cursor: string): Position {
  try {
    const [hour, queuedAt, id] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown[];
    // Integers only: a fractional hour or time would reach Cassandra as an unbindable bigint or timestamp.
    if (Number.isSafeInteger(hour) && Number.isSafeInteger(queuedAt) && typeof id === 'string') {
      return { hour: hour as number, queuedAt: queuedAt as number, id };
    }
  } catch {
    // fall through
  }
  throw invalidCursor();
}

function invalidCursor(): InvalidInputError {
  return new InvalidInputError([{ path: 'cursor', message: 'is not a cursor returned by this endpoint' }]);
}
