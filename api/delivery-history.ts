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
 * Newest-first delivery history through the index tables: one partition per tenant (and filter) per hour, read in
 * order from the cursor back to the retention horizon. The most selective filter picks the index; the others,
 * and status (which changes too often to index), are applied to the rows read.
 */
export async function listDeliveries(
  store: DeliveryStore,
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
  const horizon = Math.floor((now - retentionMs) / HOUR);
  let position: Position | undefined = query.cursor ? decodeCursor(query.cursor) : undefined;
  let hour = position?.hour ?? Math.floor(now / HOUR);
  const items: Delivery[] = [];
  for (let scanned = 0; hour >= horizon && scanned < HOURS_PER_PAGE; scanned += 1) {
    // A cursor with an empty id starts an hour from its newest row.
    const before =
      position && position.hour === hour && position.id !== ''
        ? { queuedAt: new Date(position.queuedAt), id: position.id }
        : undefined;
    const want = query.limit - items.length;
    const entries = await store.indexPage(index, hour, before, want);
    for (const delivery of await load(entries.map((entry) => entry.id))) items.push(delivery);
    const last = entries.at(-1);
    if (items.length >= query.limit && last) {
      return { items, nextCursor: encodeCursor({ hour, queuedAt: last.queuedAt.getTime(), id: last.id }) };
    }
    if (entries.length === want && last) {
      // Rows were filtered out: stay in this hour, after the last row read.
      position = { hour, queuedAt: last.queuedAt.getTime(), id: last.id };
      scanned -= 1;
      continue;
    }
    hour -= 1;
    position = undefined;
  }
  return { items, nextCursor: hour >= horizon ? encodeCursor({ hour, queuedAt: 0, id: '' }) : null };
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
