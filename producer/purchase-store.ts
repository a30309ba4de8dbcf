import { queryPage, statementSender, types, type CassandraClient } from '../core/cassandra.ts';
import { newId } from '../core/ids.ts';
import { partitionOf } from '../core/partitioner.ts';
import { casOutcomeUnknown } from './cas.ts';
import {
  formatReference,
  parseReference,
  serializePurchaseOrder,
  type Item,
  type PurchaseOrderDTO,
} from './purchase-order.ts';
import type { SendStatements, WriteStatement } from '../core/write-batcher.ts';
import { ReferenceLeases } from './reference-leases.ts';

const MINUTE = 60_000;
/** Bodies up to this many UTF-16 units stay inline (at most ~1.5 MB of UTF-8, twice in one batch). */
const INLINE_BODY_CHARS = 512 * 1024;
/** Chunk size of larger bodies: at most ~3 MB of UTF-8 per write. */
const BODY_CHUNK_CHARS = 1024 * 1024;
/** Pointers read per request when a bucket is listed. */
const POINTERS_PAGE = 5_000;
/** Partitions a minute's pointers are spread over (migration 016: a listing reads the deleted ones too). */
export const POINTER_SHARDS = 8;

/** An integration event waiting in a purchase order's partition until the relay has published it. */
export interface OutboxRow {
  tenantId: string;
  orderId: string;
  outboxId: string;
  eventType: string;
  occurredAt: string;
  reference: string | null;
  payload: string;
  /** The W3C traceparent of the request that made the change, while tracing is on (core/tracing.ts). */
  traceparent?: string | null;
}

/**
 * Told once a state change and its outbox row have committed, with that row (an in-process relay publishes it at once)
 * and a hold on the pointer written for it, which the listener must release: `true` once the row is published and
 * marked, `false` to leave the pointer to the sweep.
 */
export type TransitionListener = (row: OutboxRow, pointer: PointerHold) => void;

/** A hold on a pointer this process wrote; the pointer is deleted once every hold is released `true`. */
export interface PointerHold {
  /**
   * Releases the hold: `published` when nothing it covers needs the sweep any more (the row committed under it is
   * published and marked, or nothing committed under it); `false` when it may (a publication failed, a batch whose
   * outcome is unknown), which leaves the pointer to the sweep.
   */
  release(published: boolean): void;
  /**
   * Releases the hold `true` if it is the last on its pointer (none other left, none released `false`) and returns the
   * pointer's deletion, for the caller to send in the same request as its own write (`markPublished`); otherwise
   * returns undefined and leaves the hold as it was.
   */
  releaseLast?(): WriteStatement | undefined;
}

/** A pointer written by this process (`writePointer`): its write, and the writer's hold on it. */
export interface PointerWrite extends PointerHold {
  /** Resolves once the pointer is written; a transition's batch waits for it. */
  readonly written: Promise<void>;
  /** Takes one more hold (a committed transition's, handed to the listener until its row is published). */
  hold(): PointerHold;
}

/** A pointer as the sweep lists it: `writer` null for one an earlier version wrote to the table without writers. */
export interface ListedPointer {
  tenantId: string;
  orderId: string;
  writer: { id: string; shard: number } | null;
}

/** One pointer row of this process's with holds on it (see `writePointer`). */
interface HeldPointer {
  bucket: number;
  pointer: ListedPointer & { writer: { id: string; shard: number } };
  holds: number;
  /** The write time of this process's last write of the row, in microseconds. */
  writtenAt: number;
  /** A hold was released `false`: the row is left to the sweep. */
  keep: boolean;
}

/** Cassandra store of items, purchase orders, their outbox rows and reference sequences. */
export class PurchaseStore {
  private readonly references: ReferenceLeases;
  /** This store's name in the pointers it writes (one per process start): no other writer writes its rows. */
  private readonly writer = newId();
  /** Pointer rows of this writer with holds, by bucket, tenant and order. */
  private readonly held = new Map<string, HeldPointer>();
  /** Sends a row's mark and its pointer's deletion in one request. */
  private readonly send: SendStatements;
  /** Last write time given to a pointer write (µs): strictly increasing, so a deletion covers only earlier writes. */
  private lastWriteMicros = 0;

  constructor(
    private readonly db: CassandraClient,
    private readonly onCommitted?: TransitionListener,
  ) {
    this.references = new ReferenceLeases(db);
    this.send = statementSender(db);
  }

  async createItem(tenantId: string, item: Item): Promise<void> {
    await this.db.execute(
      'INSERT INTO items (tenant_id, id, code, name, unit_price, created_at) VALUES (?, ?, ?, ?, ?, ?)',
      [tenantId, item.id, item.code, item.name, item.unitPrice, new Date(item.createdAt)],
    );
  }

  /** A page of the tenant's items, for GET /Items. */
  async pageItems(tenantId: string, limit: number, cursor: string | undefined) {
    const page = await queryPage(this.db, 'SELECT * FROM items WHERE tenant_id = ?', [tenantId], limit, cursor);
    return { items: page.rows.map(itemFromRow), nextCursor: page.nextCursor };
  }

  /** The tenant's items among `ids`, by id: one query whatever the size of the catalogue. */
  async itemsById(tenantId: string, ids: string[]): Promise<Map<string, Item>> {
    const unique = [...new Set(ids)];
    if (unique.length === 0) return new Map();
    const result = await this.db.execute('SELECT * FROM items WHERE tenant_id = ? AND id IN ?', [tenantId, unique], {
      fetchSize: unique.length,
    });
    return new Map(result.rows.map((row) => [String(row.id), itemFromRow(row)]));
  }

  /**
   * The order's serialized DTO (the exact GET body), its version for compare-and-set, and the id of the last
   * amendment draft made of it (see `claimAmendment`).
   */
  async getOrder(
    tenantId: string,
    id: string,
    options?: { serial: boolean },
  ): Promise<{ body: string; version: number; openAmendment: string | null } | undefined> {
    const row = (
      await this.db.execute(
        'SELECT dto, body_id, version, open_amendment FROM purchase_orders WHERE tenant_id = ? AND id = ? LIMIT 1',
        [tenantId, id],
        options?.serial ? { consistency: types.consistencies.localSerial } : {},
      )
    ).first();
    if (!row || row.version === null) return undefined;
    const body = row.body_id ? await this.readBody(tenantId, id, String(row.body_id)) : String(row.dto);
    return { body, version: Number(row.version), openAmendment: (row.open_amendment as string | null) ?? null };
  }

  /**
   * Records `amendmentId` as the order's open amendment by compare-and-set: only if the order is still at
   * `expectedVersion` (so still in the state the caller saw) and its open amendment is still `expectedOpen`. Of
   * concurrent amends of one order, in any process, one applies. Returns whether this one did.
   */
  async claimAmendment(
    tenantId: string,
    orderId: string,
    expectedVersion: number,
    expectedOpen: string | null,
    amendmentId: string,
  ): Promise<boolean> {
    try {
      const result = await this.db.execute(
        'UPDATE purchase_orders SET open_amendment = ? WHERE tenant_id = ? AND id = ? IF version = ? AND open_amendment = ?',
        [amendmentId, tenantId, orderId, expectedVersion, expectedOpen],
      );
      return result.wasApplied();
    } catch (error) {
      if (!casOutcomeUnknown(error)) throw error;
      // Outcome unknown: a serial read finishes any round left in progress; the amendment id is unique to this call.
      const row = (
        await this.db.execute(
          'SELECT open_amendment FROM purchase_orders WHERE tenant_id = ? AND id = ? LIMIT 1',
          [tenantId, orderId],
          { consistency: types.consistencies.localSerial },
        )
      ).first();
      return row?.open_amendment === amendmentId;
    }
  }

  /** Deletes an order nobody has seen (the draft of an amend that lost its claim), with its body chunks. */
  async discardOrder(tenantId: string, id: string): Promise<void> {
    const row = (
      await this.db.execute('SELECT body_id FROM purchase_orders WHERE tenant_id = ? AND id = ? LIMIT 1', [
        tenantId,
        id,
      ])
    ).first();
    if (row?.body_id) {
      await this.db.execute('DELETE FROM purchase_order_bodies WHERE tenant_id = ? AND order_id = ? AND body_id = ?', [
        tenantId,
        id,
        String(row.body_id),
      ]);
    }
    await this.db.execute('DELETE FROM purchase_orders WHERE tenant_id = ? AND id = ?', [tenantId, id]);
  }

  async createOrder(tenantId: string, dto: PurchaseOrderDTO): Promise<string> {
    const body = serializePurchaseOrder(dto);
    const stored = await this.storeBody(tenantId, dto.id, body);
    await this.db.execute(
      'INSERT INTO purchase_orders (tenant_id, id, status, dto, body_id, version) VALUES (?, ?, ?, ?, ?, 1)',
      [tenantId, dto.id, dto.status, stored.inline, stored.bodyId],
    );
    return body;
  }

  /**
   * Stores a state change and its event atomically: one conditional batch on the order's partition (the new DTO in
   * static columns, the event as an outbox row). A pointer written first lets the relay find the partition; a pointer
   * whose batch never applied leads to nothing. Returns the new body, or undefined if the version moved (a race).
   */
  async transition(
    tenantId: string,
    dto: PurchaseOrderDTO,
    expectedVersion: number,
    eventType: string,
    occurredAt: string,
    traceparent?: string,
    /** The order's pointer, written by the caller (`writePointer`) beside its read of the order: not written again. */
    options: { pointer?: PointerWrite } = {},
  ): Promise<string | undefined> {
    const pointer = options.pointer ?? this.writePointer(tenantId, dto.id);
    let settled = false;
    try {
      const body = await this.commit(tenantId, dto, expectedVersion, eventType, occurredAt, traceparent, pointer);
      settled = true;
      return body;
    } finally {
      // Refused or committed (the commit took its own hold), the outcome is known: this hold covers nothing more.
      if (pointer !== options.pointer) pointer.release(settled);
    }
  }

  private async commit(
    tenantId: string,
    dto: PurchaseOrderDTO,
    expectedVersion: number,
    eventType: string,
    occurredAt: string,
    traceparent: string | undefined,
    pointer: PointerWrite,
  ): Promise<string | undefined> {
    const body = serializePurchaseOrder(dto);
    // A large body is written in chunks first, under an id only this attempt uses: a lost race leaves it unreferenced.
    const [stored] = await Promise.all([this.storeBody(tenantId, dto.id, body), pointer.written]);
    const outboxId = newId();
    let applied: boolean;
    try {
      const result = await this.db.batch(
        [
          {
            query:
              'UPDATE purchase_orders SET status = ?, dto = ?, body_id = ?, version = ? WHERE tenant_id = ? AND id = ? IF version = ?',
            params: [dto.status, stored.inline, stored.bodyId, expectedVersion + 1, tenantId, dto.id, expectedVersion],
          },
          {
            query: `INSERT INTO purchase_orders (tenant_id, id, outbox_id, event_type, occurred_at, reference, payload,
                    payload_body_id, traceparent, published) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, false)`,
            params: [
              tenantId,
              dto.id,
              outboxId,
              eventType,
              occurredAt,
              dto.reference,
              stored.inline,
              stored.bodyId,
              traceparent,
            ],
          },
        ],
        { prepare: true, logged: true },
      );
      applied = result.wasApplied();
    } catch (error) {
      if (!casOutcomeUnknown(error)) throw error;
      // The compare-and-set may or may not have applied. A serial read finishes any round left in progress and tells
      // which: the body is unique to this attempt (its reference and time), so finding it means it applied.
      const row = (
        await this.db.execute(
          'SELECT dto, body_id, version FROM purchase_orders WHERE tenant_id = ? AND id = ? LIMIT 1',
          [tenantId, dto.id],
          {
            consistency: types.consistencies.localSerial,
          },
        )
      ).first();
      applied =
        row !== null &&
        Number(row.version) === expectedVersion + 1 &&
        (stored.bodyId === null ? row.dto === body : row.body_id === stored.bodyId);
    }
    if (!applied) return undefined;
    const hold = pointer.hold();
    if (this.onCommitted) {
      this.onCommitted(
        {
          tenantId,
          orderId: dto.id,
          outboxId,
          eventType,
          occurredAt,
          reference: dto.reference,
          payload: body,
          traceparent: traceparent ?? null,
        },
        hold,
      );
    } else {
      hold.release(false); // nothing here publishes it: the sweep does, through the pointer
    }
    return body;
  }

  /**
   * Writes the pointer by which the relay finds an order's partition; `transition` writes it unless given. It must
   * land before the batch: a caller may write it ahead, while it reads the order (the two requests share a round trip
   * and most often a socket write). One written for a transition that then does not happen leads to nothing.
   *
   * The pointer is this writer's own row (its key names the writer), and this process deletes it itself once every
   * hold on it is released `true`: the caller's (released when its request is over: `true` if no batch of its may
   * have applied unseen) and each committed transition's (released by the relay once its row is published and
   * marked). The deletion's write time is this process's last write of the row, so it removes no later write; the
   * rows of other writers are other rows. The sweep then never reads the order: it reads only the pointers left
   * behind (a writer without a relay, a failed publication, a crash), as before. A deletion that fails leaves the
   * pointer to the sweep.
   */
  writePointer(tenantId: string, orderId: string): PointerWrite {
    const bucket = Math.floor(Date.now() / MINUTE);
    const key = `${bucket}\u0000${tenantId}\u0000${orderId}`;
    this.lastWriteMicros = Math.max(Date.now() * 1000, this.lastWriteMicros + 1);
    const writtenAt = this.lastWriteMicros;
    const row = this.held.get(key) ?? {
      bucket,
      pointer: {
        tenantId,
        orderId,
        writer: { id: this.writer, shard: partitionOf(`${tenantId}\u0000${orderId}`, POINTER_SHARDS) },
      },
      holds: 0,
      writtenAt,
      keep: false,
    };
    this.held.set(key, row);
    row.writtenAt = writtenAt;
    const written = this.db
      .execute(
        'INSERT INTO outbox_writer_pointers (bucket, shard, tenant_id, order_id, writer) VALUES (?, ?, ?, ?, ?)',
        [bucket, row.pointer.writer.shard, tenantId, orderId, this.writer],
        { timestamp: types.Long.fromNumber(writtenAt) },
      )
      .then(noop);
    const hold = (): PointerHold => {
      row.holds += 1;
      let released = false;
      return {
        release: (published) => {
          if (released) return;
          released = true;
          this.release(key, row, published);
        },
        releaseLast: () => {
          if (released || row.holds > 1 || row.keep) return undefined;
          released = true;
          row.holds = 0;
          if (this.held.get(key) === row) this.held.delete(key);
          return pointerDeletion(row.bucket, row.pointer, row.writtenAt);
        },
      };
    };
    const own = hold();
    return { written, hold, release: own.release };
  }

  private release(key: string, row: HeldPointer, published: boolean): void {
    if (!published) row.keep = true;
    row.holds -= 1;
    if (row.holds > 0) return;
    if (this.held.get(key) === row) this.held.delete(key);
    if (row.keep) return;
    // A deletion that fails leaves the pointer, and the sweep deletes it after its reads.
    this.dropPointer(row.bucket, row.pointer, row.writtenAt).catch(noop);
  }

  /**
   * Next business reference of a tenant, unique across processes; see ReferenceLeases for how the sequence stays
   * contiguous. A caller whose validation certainly did not commit gives the reference back (`returnReference`).
   */
  async nextReference(tenantId: string): Promise<string> {
    return formatReference(await this.references.next(tenantId));
  }

  /** Gives back a reference from `nextReference` that no committed state change carries: it is handed out again. */
  returnReference(tenantId: string, reference: string): void {
    this.references.giveBack(tenantId, parseReference(reference));
  }

  /** Gives the unused references of this process's leases back (call once no request can ask for one). */
  async close(): Promise<void> {
    await this.references.close();
  }

  /**
   * Orders that may hold unpublished outbox rows, from one minute bucket of pointers: all of them, page after page (a
   * bucket holds thousands at a few hundred validations a second; the driver's first page alone is 5,000 rows).
   */
  async pointers(bucket: number): Promise<ListedPointer[]> {
    const list = async (query: string, params: unknown[], shard: number | null) => {
      const listed: ListedPointer[] = [];
      for await (const row of await this.db.execute(query, params, { fetchSize: POINTERS_PAGE })) {
        const writer = shard === null ? null : { id: String(row.writer), shard };
        listed.push({ tenantId: String(row.tenant_id), orderId: String(row.order_id), writer });
      }
      return listed;
    };
    const lists = await Promise.all([
      ...Array.from({ length: POINTER_SHARDS }, (_, shard) =>
        list(
          'SELECT tenant_id, order_id, writer FROM outbox_writer_pointers WHERE bucket = ? AND shard = ?',
          [bucket, shard],
          shard,
        ),
      ),
      // The table without writers holds what gateways of an earlier version wrote (migration 016): listed too.
      list('SELECT tenant_id, order_id FROM outbox_pointers WHERE bucket = ?', [bucket], null),
    ]);
    return lists.flat();
  }

  async unpublished(tenantId: string, orderId: string): Promise<OutboxRow[]> {
    const result = await this.db.execute(
      'SELECT outbox_id, event_type, occurred_at, reference, payload, payload_body_id, traceparent, published FROM purchase_orders WHERE tenant_id = ? AND id = ?',
      [tenantId, orderId],
    );
    const rows = await Promise.all(
      result.rows
        .filter((row) => row.outbox_id !== null && row.published === false)
        .map(async (row) => ({
          tenantId,
          orderId,
          outboxId: String(row.outbox_id),
          eventType: String(row.event_type),
          occurredAt: String(row.occurred_at),
          reference: (row.reference as string | null) ?? null,
          payload: row.payload_body_id
            ? await this.readBody(tenantId, orderId, String(row.payload_body_id))
            : String(row.payload),
          traceparent: (row.traceparent as string | null) ?? null,
        })),
    );
    return rows.sort((a, b) => a.occurredAt.localeCompare(b.occurredAt));
  }

  /**
   * Keeps a body inline when it is small; otherwise writes it in chunks (each its own write, far below Cassandra's
   * request and mutation limits) under a new body id.
   */
  private async storeBody(tenantId: string, orderId: string, body: string) {
    if (body.length <= INLINE_BODY_CHARS) return { inline: body, bodyId: null };
    const bodyId = newId();
    const parts: string[] = [];
    for (let start = 0; start < body.length;) {
      let end = Math.min(start + BODY_CHUNK_CHARS, body.length);
      // Never split a surrogate pair: each part must be valid text on its own.
      const last = body.charCodeAt(end - 1);
      if (end < body.length && last >= 0xd800 && last <= 0xdbff) end -= 1;
      parts.push(body.slice(start, end));
      start = end;
    }
    await Promise.all(
      parts.map((part, chunk) =>
        this.db.execute(
          'INSERT INTO purchase_order_bodies (tenant_id, order_id, body_id, chunk, part) VALUES (?, ?, ?, ?, ?)',
          [tenantId, orderId, bodyId, chunk, part],
        ),
      ),
    );
    return { inline: null, bodyId };
  }

  private async readBody(tenantId: string, orderId: string, bodyId: string): Promise<string> {
    const result = await this.db.execute(
      'SELECT part FROM purchase_order_bodies WHERE tenant_id = ? AND order_id = ? AND body_id = ?',
      [tenantId, orderId, bodyId],
      { fetchSize: 4 },
    );
    const parts: string[] = [];
    for await (const row of result) parts.push(String(row.part));
    return parts.join('');
  }

  /**
   * Marks a published row. Given the hold on its pointer, and that hold the pointer's last, the pointer's deletion goes
   * in the same request (an unlogged batch: one request of the gateway's five per validation, not two); the hold is then
   * released. Either write may apply without the other if the request fails: the row is published by then, so that
   * costs at most a second publication, never an event.
   */
  async markPublished(row: OutboxRow, pointer?: PointerHold): Promise<void> {
    // Stamped with the clock's time in its text, so it can share a request with the deletion's own write time.
    const mark = {
      query:
        'UPDATE purchase_orders USING TIMESTAMP ? SET published = true WHERE tenant_id = ? AND id = ? AND outbox_id = ?',
      params: [types.Long.fromNumber(Date.now() * 1000), row.tenantId, row.orderId, row.outboxId],
    };
    const deletion = pointer?.releaseLast?.();
    await this.send(deletion === undefined ? [mark] : [mark, deletion]);
  }

  /** Deletes the pointer's writes made at or before `writtenUpToMicros` (write time); a later write survives. */
  async dropPointer(bucket: number, pointer: ListedPointer, writtenUpToMicros: number): Promise<void> {
    const { query, params } = pointerDeletion(bucket, pointer, writtenUpToMicros);
    await this.db.execute(query, params);
  }

  async relayProgress(relay: string): Promise<number | undefined> {
    const row = (
      await this.db.execute('SELECT oldest_open_bucket FROM outbox_relay_progress WHERE relay = ?', [relay])
    ).first();
    return row ? Number(row.oldest_open_bucket) : undefined;
  }

  async saveRelayProgress(relay: string, bucket: number): Promise<void> {
    await this.db.execute('INSERT INTO outbox_relay_progress (relay, oldest_open_bucket) VALUES (?, ?)', [
      relay,
      bucket,
    ]);
  }
}

export { MINUTE };

function itemFromRow(row: Record<string, unknown>): Item {
  return {
    id: String(row.id),
    code: String(row.code),
    name: String(row.name),
    unitPrice: String(row.unit_price),
    createdAt: (row.created_at as Date).toISOString(),
  };
}

/** The deletion of a pointer's writes made at or before `writtenUpToMicros` (write time). */
function pointerDeletion(bucket: number, pointer: ListedPointer, writtenUpToMicros: number): WriteStatement {
  const at = types.Long.fromNumber(writtenUpToMicros);
  const { tenantId, orderId, writer } = pointer;
  return writer === null
    ? {
        query: 'DELETE FROM outbox_pointers USING TIMESTAMP ? WHERE bucket = ? AND tenant_id = ? AND order_id = ?',
        params: [at, bucket, tenantId, orderId],
      }
    : {
        query:
          'DELETE FROM outbox_writer_pointers USING TIMESTAMP ? WHERE bucket = ? AND shard = ? AND tenant_id = ? AND order_id = ? AND writer = ?',
        params: [at, bucket, writer.shard, tenantId, orderId, writer.id],
      };
}

const noop = () => undefined;
