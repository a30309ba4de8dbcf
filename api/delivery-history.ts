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

/** Empty hour partitions read at once at most (see listDeliveries). */
const READ_AHEAD_HOURS = 16;

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
    const { stop } = await scanPartition(
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
  const last = Math.max(horizon, hour - HOURS_PER_PAGE + 1);
  // Hours are read newest first, the first read of several at once: twice as many after a stretch of empty hours
  // (1, 2, 4 … READ_AHEAD_HOURS), half as many after one with rows. A sparse history's empty hours cost a few round
  // trips instead of one each, and an hour that fills the first page is the only one read.
  let ahead = 1;
  while (hour >= last && page.budget > 0) {
    const size = chunkSize(page);
    // The first read of each hour of the stretch, started together (at most the budget's worth of rows).
    const stretch = Math.max(1, Math.min(ahead, hour - last + 1, Math.floor(page.budget / size)));
    const firstReads = Array.from({ length: stretch }, (_, offset) => {
      const at = hour - offset;
      // A cursor with an empty id starts an hour from its newest row.
      const before = position && position.hour === at && position.id !== '' ? entryOf(position) : undefined;
      const read = store.indexPage(index, at, before, size);
      // Reads past the hour where the page stops are not awaited; their failure is not this request's.
      read.catch(() => {});
      return { at, before, rows: read };
    });
    let found = false;
    for (const { at, before, rows } of firstReads) {
      const scan = await scanPartition(page, (after, chunk) => store.indexPage(index, at, after, chunk), before, {
        rows,
        size,
      });
      if (scan.stop) return { items: page.items, nextCursor: encodeCursor(positionOf(at, scan.stop)) };
      found ||= scan.read > 0;
      hour = at - 1;
      if (page.budget <= 0) break;
    }
    ahead = found ? Math.max(1, ahead / 2) : Math.min(ahead * 2, READ_AHEAD_HOURS);
  }
  return { items: page.items, nextCursor: hour >= horizon ? encodeCursor({ hour, queuedAt: 0, id: '' }) : null };
}

/** How many rows a page reads from an index partition at a time: its want, or more when filters may reject rows. */
function chunkSize(page: Page): number {
  const want = page.limit - page.items.length;
  return Math.max(1, Math.min(page.budget, page.filtered ? Math.max(want, FILTERED_CHUNK) : want));
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
 * Reads one index partition newest first, strictly after `before`, adding the matching deliveries to the page; `first`
 * is its first read when already started. Answers `stop`, the row after which the next page continues in this
 * partition (the page is full or the budget spent), undefined once the partition has been read to its end; and the
 * index rows it read.
 */
async function scanPartition(
  page: Page,
  read: (before: Entry | undefined, size: number) => Promise<Entry[]>,
  before: Entry | undefined,
  first?: { rows: Promise<Entry[]>; size: number },
): Promise<{ stop: Entry | undefined; read: number }> {
  let after = before;
  let pending = first;
  let total = 0;
  while (page.budget > 0) {
    const size = pending?.size ?? chunkSize(page);
    const entries = await (pending?.rows ?? read(after, size));
    pending = undefined;
    total += entries.length;
    page.budget -= entries.length;
    if (entries.length > 0) {
      const deliveries = await page.store.getMany(
        page.tenantId,
        entries.map((entry) => entry.id),
      );
      for (const [at, entry] of entries.entries()) {
        const delivery = deliveries[at];
        if (page.matches(delivery)) page.items.push(delivery);
        // The page is full: continue after this row (rows after it in the chunk are read again by the next page).
        if (page.items.length === page.limit) return { stop: entry, read: total };
      }
    }
    const last = entries.at(-1);
    if (entries.length < size || !last) return { stop: undefined, read: total };
    after = last;
  }
  // The budget is spent inside this partition: continue after the last row read.
  return { stop: after, read: total };
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
