import type { Delivery, DeliveryStatus } from '../core/deliveries/delivery.ts';
import { HOUR, type DeliveryStore } from '../core/deliveries/delivery-store.ts';
import { InvalidInputError } from '../core/errors.ts';

export interface HistoryQuery {
  tenantId: string;
  subscriptionId?: string;
  eventId?: string;
  eventType?: string;
  status?: DeliveryStatus;
  /** Queued at or after this time (epoch ms). */
  from?: number;
  /** Queued before this time (epoch ms). */
  to?: number;
  limit: number;
  cursor?: string;
}

/** Where a listing continues: an index partition (an hour, or EVENT_LISTING) and the last row read in it. */
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

/** An index row: a delivery and when it was queued (the clustering key). */
type Entry = { queuedAt: Date; id: string };

/** The `hour` of every cursor of an eventId listing: its one partition has no hour. */
const EVENT_LISTING = -1;

/**
 * Newest-first delivery history through the index tables: one partition per tenant (and filter) per hour, read in
 * order from the cursor back to the retention horizon, or the one partition of an event. The most selective filter
 * picks the index; the others, and status (which changes too often to index), are applied to the rows read, at most
 * INDEX_ROWS_PER_REQUEST of them.
 */
export async function listDeliveries(
  store: HistoryReader,
  query: HistoryQuery,
  retentionMs: number,
  now = Date.now(),
): Promise<{ items: Delivery[]; nextCursor: string | null }> {
  const position: Position | undefined = query.cursor ? decodeCursor(query.cursor) : undefined;
  const matches = (delivery: Delivery | undefined): delivery is Delivery =>
    delivery !== undefined &&
    (query.subscriptionId === undefined || delivery.subscriptionId === query.subscriptionId) &&
    (query.eventType === undefined || delivery.eventType === query.eventType) &&
    (query.eventId === undefined || delivery.eventId === query.eventId) &&
    (query.status === undefined || delivery.status === query.status) &&
    (query.from === undefined || delivery.queuedAt.getTime() >= query.from) &&
    (query.to === undefined || delivery.queuedAt.getTime() < query.to);
  // A time range bounds the hours read; rows at its edges are filtered like any other condition.
  const ranged = query.from !== undefined || query.to !== undefined;
  const newPage = (filtered: boolean): Page => ({
    store,
    tenantId: query.tenantId,
    limit: query.limit,
    matches,
    filtered,
    items: [],
    budget: INDEX_ROWS_PER_REQUEST,
  });

  if (query.eventId !== undefined) {
    const eventId = query.eventId;
    // A cursor of another listing (an hour position) is no position in this one.
    if (position && (position.hour !== EVENT_LISTING || position.id === '')) throw invalidCursor();
    const page = newPage(
      query.subscriptionId !== undefined || query.eventType !== undefined || query.status !== undefined || ranged,
    );
    const stop = await scanPartition(
      page,
      (before, size) => store.eventIndex(query.tenantId, eventId, before, size),
      position && entryOf(position),
    );
    return { items: page.items, nextCursor: stop ? encodeCursor(positionOf(EVENT_LISTING, stop)) : null };
  }

  const index =
    query.subscriptionId !== undefined
      ? { table: 'subscription' as const, tenantId: query.tenantId, key: query.subscriptionId }
      : query.eventType !== undefined
        ? { table: 'eventType' as const, tenantId: query.tenantId, key: query.eventType }
        : { table: 'tenant' as const, tenantId: query.tenantId };
  const page = newPage(
    query.status !== undefined || ranged || (index.table === 'subscription' && query.eventType !== undefined),
  );
  if (position && position.hour < 0) throw invalidCursor();
  const horizon = Math.max(
    Math.floor((now - retentionMs) / HOUR),
    query.from === undefined ? -Infinity : Math.floor(query.from / HOUR),
  );
  const newest = Math.min(
    Math.floor(now / HOUR),
    query.to === undefined ? Infinity : Math.floor((query.to - 1) / HOUR),
  );
  let hour = position ? Math.min(position.hour, newest) : newest;
  for (let scanned = 0; hour >= horizon && scanned < HOURS_PER_PAGE && page.budget > 0; scanned += 1, hour -= 1) {
    // A cursor with an empty id starts an hour from its newest row.
    const before = position && position.hour === hour && position.id !== '' ? entryOf(position) : undefined;
    const stop = await scanPartition(page, (after, size) => store.indexPage(index, hour, after, size), before);
    if (stop) return { items: page.items, nextCursor: encodeCursor(positionOf(hour, stop)) };
  }
  return { items: page.items, nextCursor: hour >= horizon ? encodeCursor({ hour, queuedAt: 0, id: '' }) : null };
}

/** One page being filled: the items found so far and the index rows it may still read. */
interface Page {
  store: HistoryReader;
  tenantId: string;
  limit: number;
  matches: (delivery: Delivery | undefined) => delivery is Delivery;
  /** Whether rows the index returns may fail the query (then they are read in chunks larger than the page). */
  filtered: boolean;
  items: Delivery[];
  budget: number;
}

/**
 * Reads one index partition newest first, strictly after `before`, adding the matching deliveries to the page. Answers
 * the row after which the next page continues in this partition (the page is full or the budget spent), or
 * undefined once the partition has been read to its end.
 */
async function scanPartition(
  page: Page,
  read: (before: Entry | undefined, size: number) => Promise<Entry[]>,
  before: Entry | undefined,
): Promise<Entry | undefined> {
  let after = before;
  while (page.budget > 0) {
    const want = page.limit - page.items.length;
    const size = Math.min(page.budget, page.filtered ? Math.max(want, FILTERED_CHUNK) : want);
    const entries = await read(after, size);
    page.budget -= entries.length;
    const ids = entries.map((entry) => entry.id);
    const deliveries = await page.store.getMany(page.tenantId, ids);
    for (const [at, entry] of entries.entries()) {
      const delivery = deliveries[at];
      if (page.matches(delivery)) page.items.push(delivery);
      // The page is full: continue after this row (rows after it in the chunk are read again by the next page).
      if (page.items.length === page.limit) return entry;
    }
    const last = entries.at(-1);
    if (entries.length < size || !last) return undefined;
    after = last;
  }
  // The budget is spent inside this partition: continue after the last row read.
  return after;
}

function entryOf(position: Position): Entry {
  return { queuedAt: new Date(position.queuedAt), id: position.id };
}

function positionOf(hour: number, entry: Entry): Position {
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
