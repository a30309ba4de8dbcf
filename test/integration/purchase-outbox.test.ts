// The purchase store's compare-and-set and the outbox relay against real Cassandra, with a collecting publisher, so
// races are set up step by step: a writer held between its pointer and its batch, a publication that fails.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { OutboxRelay, type OutboxRelayOptions } from '../../producer/outbox-relay.ts';
import { cancelled, formatReference, validated, type PurchaseOrderDTO } from '../../producer/purchase-order.ts';
import {
  MINUTE,
  POINTER_SHARDS,
  PurchaseStore,
  type OutboxRow,
  type PointerHold,
} from '../../producer/purchase-store.ts';
import { MAX_LEASE } from '../../producer/reference-leases.ts';
import { oneRowDraft } from '../support/drafts.ts';
import { testEnv, waitFor } from '../support/harness.ts';

/** The store as one tenant's relay sees it: other tests' pointers are not this relay's business. */
class TenantStore extends PurchaseStore {
  constructor(
    db: CassandraClient,
    private readonly tenantId: string,
  ) {
    super(db);
  }

  /** Reads of an order's outbox rows made so far. */
  reads = 0;

  override async pointers(bucket: number) {
    return (await super.pointers(bucket)).filter((pointer) => pointer.tenantId === this.tenantId);
  }

  override async unpublished(tenantId: string, orderId: string) {
    this.reads += 1;
    return super.unpublished(tenantId, orderId);
  }
}

/**
 * A writer held between its pointer and its batch: its client's batches wait until `open()`; `reached` resolves once
 * the writer has written its pointer and is waiting to run its batch.
 */
function heldWriter(db: CassandraClient) {
  let open!: () => void;
  let arrive!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  const reached = new Promise<void>((resolve) => (arrive = resolve));
  const client = new Proxy(db, {
    get(target, property) {
      if (property === 'batch') {
        return async (...args: Parameters<CassandraClient['batch']>) => {
          arrive();
          await opened;
          return target.batch(...args);
        };
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { store: new PurchaseStore(client), reached, open };
}

/** A client that counts the statements it executes that match `pattern`. */
function counting(db: CassandraClient, pattern: RegExp) {
  const counted = { count: 0 };
  const client = new Proxy(db, {
    get(target, property) {
      if (property === 'execute') {
        return (...args: Parameters<CassandraClient['execute']>) => {
          if (pattern.test(String(args[0]))) counted.count += 1;
          return target.execute(...args);
        };
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { client, counted };
}

/** `count` draft orders of a tenant (ids `<tenant>-<index>`), each of one row, stored through `writer`. */
function storedDrafts(writer: PurchaseStore, tenantId: string, count: number, description: string | null = null) {
  return Promise.all(
    Array.from({ length: count }, async (_, index) => {
      const order = oneRowDraft(`${tenantId}-${index}`, '1', description);
      await writer.createOrder(tenantId, order);
      return order;
    }),
  );
}

const SETTLE_MS = 30_000;

describe('purchase store and outbox relay', () => {
  let db: CassandraClient;
  const logger = createLogger('test-relay', 'warn');

  beforeAll(async () => {
    db = await connectCassandra(loadConfig(testEnv()));
  });

  afterAll(async () => {
    await db?.shutdown();
  });

  const setup = async (options: Partial<OutboxRelayOptions> = {}) => {
    const tenantId = `relay-${randomBytes(4).toString('hex')}`;
    const store = new TenantStore(db, tenantId);
    const published: OutboxRow[] = [];
    const failures = { remaining: 0 };
    // The relay's clock: real time unless a test sets it (to reach a pointer's settling read without waiting).
    const clock: { at?: number } = {};
    const relay = new OutboxRelay(
      store,
      async (row) => {
        if (failures.remaining > 0) {
          failures.remaining -= 1;
          throw new Error('broker unavailable');
        }
        published.push(row);
      },
      logger,
      {
        name: `test-${tenantId}`,
        intervalMs: 50,
        lookbackMinutes: 2,
        settleMs: SETTLE_MS,
        concurrency: 4,
        window: 16,
        windowBytes: 64 * 1024 * 1024,
        now: () => clock.at ?? Date.now(),
        ...options,
      },
    );
    const order = oneRowDraft(randomBytes(8).toString('hex'), '3');
    await store.createOrder(tenantId, order);
    /** The order's pointers in the last two minute buckets. */
    const pointers = async () => {
      const current = Math.floor(Date.now() / MINUTE);
      return [...(await store.pointers(current - 1)), ...(await store.pointers(current))];
    };
    /** Runs sweeps until `probe` holds. */
    const sweepUntil = <T>(probe: () => T | undefined | false, what: string) =>
      waitFor(async () => {
        await relay.pass().catch(() => undefined);
        return probe();
      }, what);
    return { tenantId, store, relay, published, failures, clock, order, pointers, sweepUntil };
  };

  const transition = (store: PurchaseStore, tenantId: string, dto: PurchaseOrderDTO, version: number) =>
    store.transition(
      tenantId,
      dto,
      version,
      dto.status === 'Validated' ? 'purchaseOrder.validated' : 'purchaseOrder.cancelled',
      new Date().toISOString(),
    );

  it('applies one of twenty concurrent compare-and-sets on one version, with one outbox row', async () => {
    const { tenantId, store, order } = await setup();
    const now = new Date().toISOString();
    const bodies = await Promise.all(
      Array.from({ length: 20 }, (_, index) =>
        transition(store, tenantId, validated(order, `PO-${String(index + 1).padStart(6, '0')}`, now), 1),
      ),
    );
    const applied = bodies.filter((body) => body !== undefined);
    expect(applied).toHaveLength(1);
    expect((await store.getOrder(tenantId, order.id))?.body).toBe(applied[0]);
    expect(await store.unpublished(tenantId, order.id)).toMatchObject([{ payload: applied[0] }]);
  });

  it('hands out distinct consecutive references to concurrent validations in two processes', async () => {
    const tenantId = `refs-${randomBytes(4).toString('hex')}`;
    const processes = [new PurchaseStore(db), new PurchaseStore(db)];
    const references = await Promise.all(
      Array.from({ length: 200 }, (_, index) => processes[index % 2]!.nextReference(tenantId)),
    );
    expect([...references].sort()).toEqual(
      Array.from({ length: 200 }, (_, index) => formatReference(BigInt(index + 1))),
    );
    expect(await processes[0]!.nextReference(tenantId)).toBe('PO-000201');
  });

  describe('reference leases', () => {
    const sequence = (from: number, count: number) =>
      Array.from({ length: count }, (_, index) => formatReference(BigInt(from + index)));
    const counterOf = async (tenantId: string) =>
      Number(
        (await db.execute('SELECT last_value FROM reference_sequences WHERE tenant_id = ?', [tenantId])).first()
          ?.last_value,
      );

    it('takes a busy tenant its references by blocks, and gives the unused tail back on close', async () => {
      const tenantId = `lease-${randomBytes(4).toString('hex')}`;
      // The compare-and-sets on reference counters.
      const { client, counted } = counting(db, /reference_sequences .* IF |IF NOT EXISTS/s);
      const store = new PurchaseStore(client);
      const taken: string[] = [];
      for (let burst = 0; burst < 10; burst += 1) {
        taken.push(...(await Promise.all(Array.from({ length: 50 }, () => store.nextReference(tenantId)))));
      }
      expect([...taken].sort()).toEqual(sequence(1, 500));
      // One compare-and-set per block, blocks doubling up to MAX_LEASE: far fewer than one per reference.
      expect(counted.count).toBeLessThanOrEqual(Math.ceil(500 / MAX_LEASE) + 3);
      expect(await counterOf(tenantId)).toBeGreaterThanOrEqual(500);

      await store.close();
      expect(await counterOf(tenantId)).toBe(500);
      expect(await new PurchaseStore(db).nextReference(tenantId)).toBe(formatReference(501n));
    });

    it('leases a quiet tenant one reference at a time', async () => {
      const tenantId = `quiet-${randomBytes(4).toString('hex')}`;
      const store = new PurchaseStore(db);
      expect(await store.nextReference(tenantId)).toBe('PO-000001');
      expect(await counterOf(tenantId)).toBe(1);
    });

    it('hands a reference given back out again, and gives it back to the counter on close if it ends the block', async () => {
      const tenantId = `back-${randomBytes(4).toString('hex')}`;
      const store = new PurchaseStore(db);
      const [first, second] = await Promise.all([store.nextReference(tenantId), store.nextReference(tenantId)]);
      expect([first, second]).toEqual(sequence(1, 2));
      store.returnReference(tenantId, first!);
      expect(await store.nextReference(tenantId)).toBe(first);
      store.returnReference(tenantId, second!);
      await store.close();
      expect(await counterOf(tenantId)).toBe(1); // PO-000002 went back with the block's unused tail
    });

    it('leaves a gap only where another process leased after a block it could not give back', async () => {
      const tenantId = `gap-${randomBytes(4).toString('hex')}`;
      const [one, two] = [new PurchaseStore(db), new PurchaseStore(db)];
      // Two quick bursts make the first process lease a block larger than it then uses.
      await Promise.all(Array.from({ length: 4 }, () => one.nextReference(tenantId)));
      await one.nextReference(tenantId);
      const leasedByOne = await counterOf(tenantId);
      expect(leasedByOne).toBeGreaterThan(5);
      expect(await two.nextReference(tenantId)).toBe(formatReference(BigInt(leasedByOne + 1)));
      await one.close(); // a later block exists: the counter stays where the second process left it
      expect(await counterOf(tenantId)).toBe(leasedByOne + 1);
      await two.close();
      expect(await counterOf(tenantId)).toBe(leasedByOne + 1);
      // Never a duplicate: a new process continues after every block.
      expect(await new PurchaseStore(db).nextReference(tenantId)).toBe(formatReference(BigInt(leasedByOne + 2)));
    });
  });

  it('publishes the event of a writer that was between its pointer and its batch when the relay read the order', async () => {
    const { tenantId, relay, published, clock, order, pointers } = await setup();
    const writer = heldWriter(db);
    const committing = transition(writer.store, tenantId, validated(order, 'PO-000001', new Date().toISOString()), 1);
    await writer.reached;

    expect(await relay.pass()).toBe(0); // the batch has not been applied: nothing to publish yet
    expect(await pointers()).toHaveLength(1); // and the pointer is kept for a later read

    writer.open();
    const body = await committing;
    expect(body).toBeDefined();
    // The settling read, once the pointer is settleMs old, sees the batch and deletes the pointer.
    clock.at = Date.now() + SETTLE_MS;
    expect(await relay.pass()).toBe(1);
    expect(published.map((row) => row.payload)).toEqual([body]);
    expect(await pointers()).toEqual([]);
  });

  it('keeps the pointer of a second transition written while the first one was being settled', async () => {
    const { tenantId, store, relay, published, clock, order, pointers } = await setup();
    const validatedBody = await transition(store, tenantId, validated(order, 'PO-000001', new Date().toISOString()), 1);
    const firstListed = Date.now();
    clock.at = firstListed;
    expect(await relay.pass()).toBe(1);

    // The cancellation rewrites the same pointer (same minute, same order) and is held before its batch while the
    // relay's settling read of the first pointer write deletes what it covered: the rewritten pointer must survive.
    await waitFor(() => Date.now() > firstListed + 1, 'the clock to move past the first listing');
    const beforeRewrite = Date.now();
    const writer = heldWriter(db);
    const validatedDto = JSON.parse(validatedBody!) as PurchaseOrderDTO;
    const committing = transition(writer.store, tenantId, cancelled(validatedDto, new Date().toISOString()), 2);
    await writer.reached;
    clock.at = beforeRewrite - 1 + SETTLE_MS; // settles the first write, not the rewrite
    expect(await relay.pass()).toBe(0);
    expect(await pointers()).toHaveLength(1);

    writer.open();
    const cancelledBody = await committing;
    clock.at += SETTLE_MS;
    expect(await relay.pass()).toBe(1); // the surviving pointer is read and published
    expect(published.map((row) => row.payload)).toEqual([validatedBody, cancelledBody]);
  });

  it('publishes at least once when a publication fails, and marks the row only after it succeeded', async () => {
    const { tenantId, store, relay, published, failures, order, sweepUntil } = await setup();
    failures.remaining = 1;
    const body = await transition(store, tenantId, validated(order, 'PO-000001', new Date().toISOString()), 1);
    // The failed publication costs its order only: the pass finishes, publishing nothing, and the row stays unpublished.
    expect(await relay.pass()).toBe(0);
    expect(failures.remaining).toBe(0);
    expect(await store.unpublished(tenantId, order.id)).toHaveLength(1);
    await sweepUntil(() => published.length > 0, 'the event to be published on a later sweep');
    expect(published.map((row) => row.payload)).toEqual([body]);
    expect(await store.unpublished(tenantId, order.id)).toEqual([]);
  });

  it('holds at most its window of rows while Kafka is down, and publishes every event once when it is back', async () => {
    const WINDOW = 4;
    const ORDERS = 40;
    const tenantId = `outage-${randomBytes(4).toString('hex')}`;
    /** The tenant's store, counting the reads of outbox rows in progress (each may be a body of tens of MB). */
    const store = new (class extends TenantStore {
      reading = 0;
      override async unpublished(tenant: string, orderId: string) {
        this.reading += 1;
        try {
          return await super.unpublished(tenant, orderId);
        } finally {
          this.reading -= 1;
        }
      }
    })(db, tenantId);
    // Kafka is down: the producer retries without end, so a publication neither succeeds nor fails until it is back.
    let endOutage!: () => void;
    const outage = new Promise<void>((resolve) => (endOutage = resolve));
    const published: OutboxRow[] = [];
    const held = { now: 0, peak: 0 };
    const relay = new OutboxRelay(
      store,
      async (row) => {
        held.now += 1;
        held.peak = Math.max(held.peak, held.now);
        try {
          await outage;
          published.push(row);
        } finally {
          held.now -= 1;
        }
      },
      logger,
      {
        name: `test-${tenantId}`,
        intervalMs: 50,
        lookbackMinutes: 2,
        settleMs: SETTLE_MS,
        concurrency: 2 * WINDOW, // the sweep asks for more than the window: the window still holds
        window: WINDOW,
        windowBytes: 64 * 1024 * 1024,
      },
    );
    const writer = new PurchaseStore(db, (row) => relay.nudge(row));
    const now = new Date().toISOString();
    const orders = await storedDrafts(writer, tenantId, ORDERS, 'x'.repeat(2000));
    for (const [index, order] of orders.entries()) {
      expect(
        await transition(writer, tenantId, validated(order, formatReference(BigInt(index + 1)), now), 1),
      ).toBeDefined();
    }
    // A sweep during the outage finds every order's pointer: it too must wait for room in the window.
    const sweeping = relay.pass();
    // Every nudge was made (and, unbounded, would have started its read) before the last transition returned.
    await waitFor(async () => {
      await new Promise(setImmediate); // lets the nudges of the last commits start
      return store.reading === 0 && held.now > 0;
    }, 'the relay to read what it may publish');
    expect(held.now).toBe(WINDOW);
    expect(published).toEqual([]);

    endOutage();
    await sweeping;
    await waitFor(async () => {
      await relay.pass();
      return published.length >= ORDERS;
    }, 'every event to be published once Kafka is back');
    await relay.idle();
    expect(held.peak).toBe(WINDOW);
    expect(published).toHaveLength(ORDERS); // each once
    expect(new Set(published.map((row) => row.orderId))).toEqual(new Set(orders.map((order) => order.id)));
    for (const order of orders) expect(await store.unpublished(tenantId, order.id)).toEqual([]);
  });

  it('a nudge finding the window full is published as soon as there is room, without waiting for a sweep', async () => {
    // No sweep runs here: before, a nudge that found the window full was dropped and its event waited for the
    // sweep's settling read (30 s after its pointer).
    const WINDOW = 2;
    const ORDERS = 12;
    const tenantId = `burst-${randomBytes(4).toString('hex')}`;
    const store = new TenantStore(db, tenantId);
    const published: OutboxRow[] = [];
    const relay = new OutboxRelay(
      store,
      async (row) => {
        await new Promise((resolve) => setTimeout(resolve, 20)); // a broker taking its time
        published.push(row);
      },
      logger,
      {
        name: `test-${tenantId}`,
        intervalMs: 50,
        lookbackMinutes: 2,
        settleMs: SETTLE_MS,
        concurrency: 4,
        window: WINDOW,
        windowBytes: 64 * 1024 * 1024,
      },
    );
    const writer = new PurchaseStore(db, (row) => relay.nudge(row));
    const now = new Date().toISOString();
    const orders = await storedDrafts(writer, tenantId, ORDERS);
    await Promise.all(
      orders.map((order, index) =>
        transition(writer, tenantId, validated(order, formatReference(BigInt(index + 1)), now), 1),
      ),
    );
    await relay.idle();
    expect(new Set(published.map((row) => row.orderId))).toEqual(new Set(orders.map((order) => order.id)));
    expect(published).toHaveLength(ORDERS);
  });

  it('publishes at once when nudged after a commit, without waiting for a sweep', async () => {
    const { tenantId, relay, published, order } = await setup();
    const store = new PurchaseStore(db, (row) => relay.nudge(row));
    const body = await transition(store, tenantId, validated(order, 'PO-000001', new Date().toISOString()), 1);
    await relay.idle();
    expect(published.map((row) => row.payload)).toEqual([body]);
    expect(await store.unpublished(tenantId, order.id)).toEqual([]);
  });

  it('publishes a nudged row as committed, and its writer deletes the pointer: the sweep never reads the order', async () => {
    const { tenantId, store, relay, published, clock, order, pointers } = await setup();
    const writer = new PurchaseStore(db, (row, pointer) => relay.nudge(row, pointer));
    const body = await transition(writer, tenantId, validated(order, 'PO-000001', new Date().toISOString()), 1);
    await relay.idle();
    expect(published.map((row) => row.payload)).toEqual([body]);
    await waitFor(async () => (await pointers()).length === 0, 'the writer to delete its pointer');
    // Neither at the first listing nor once the pointer would have settled: nothing left to read.
    expect(await relay.pass()).toBe(0);
    clock.at = Date.now() + SETTLE_MS + MINUTE;
    expect(await relay.pass()).toBe(0);
    expect(store.reads).toBe(0);
    expect(await store.unpublished(tenantId, order.id)).toEqual([]);
    expect(published).toHaveLength(1);
  });

  it("marks a nudged row published and deletes its writer's pointer in one request, when nothing else holds it", async () => {
    const { tenantId, relay, published, order, pointers } = await setup();
    const writer = new PurchaseStore(db, (row, pointer) => relay.nudge(row, pointer));
    // Every request the writer and the relay make, as the statements it carries.
    const execute = vi.spyOn(db, 'execute');
    const batch = vi.spyOn(db, 'batch');
    let requests: string[][];
    try {
      const body = await transition(writer, tenantId, validated(order, 'PO-000001', new Date().toISOString()), 1);
      await relay.idle();
      expect(published.map((row) => row.payload)).toEqual([body]);
      await waitFor(async () => (await pointers()).length === 0, 'the writer to delete its pointer');
    } finally {
      requests = [
        ...execute.mock.calls.map(([query]) => [String(query)]),
        ...batch.mock.calls.map(([queries]) =>
          queries.map((query) => (typeof query === 'string' ? query : query.query)),
        ),
      ];
      execute.mockRestore();
      batch.mockRestore();
    }
    const afterPublishing = requests.filter((statements) =>
      statements.some((query) => /SET published = true|^DELETE FROM outbox_writer_pointers/.test(query)),
    );
    expect(afterPublishing).toEqual([
      [
        expect.stringMatching(/^UPDATE purchase_orders USING TIMESTAMP \? SET published = true/),
        expect.stringMatching(/^DELETE FROM outbox_writer_pointers USING TIMESTAMP/),
      ],
    ]);
    expect(await writer.unpublished(tenantId, order.id)).toEqual([]);
  });

  it("marks a nudged row alone while its caller still holds the pointer, which the caller's release then deletes", async () => {
    const { tenantId, relay, published, order, pointers } = await setup();
    const writer = new PurchaseStore(db, (row, pointer) => relay.nudge(row, pointer));
    // The API request's own hold, as the routes take it beside their read of the order, still held when the row is out.
    const pointer = writer.writePointer(tenantId, order.id);
    const body = await writer.transition(
      tenantId,
      validated(order, 'PO-000001', new Date().toISOString()),
      1,
      'purchaseOrder.validated',
      new Date().toISOString(),
      undefined,
      { pointer },
    );
    await relay.idle();
    expect(published.map((row) => row.payload)).toEqual([body]);
    expect(await writer.unpublished(tenantId, order.id)).toEqual([]);
    expect(await pointers()).toHaveLength(1);
    pointer.release(true);
    await waitFor(async () => (await pointers()).length === 0, "the caller's release to delete the pointer");
  });

  it('leaves the pointer to the sweep when the nudged publication fails', async () => {
    const { tenantId, relay, published, failures, order, pointers, sweepUntil } = await setup();
    const writer = new PurchaseStore(db, (row, pointer) => relay.nudge(row, pointer));
    failures.remaining = 1;
    const body = await transition(writer, tenantId, validated(order, 'PO-000001', new Date().toISOString()), 1);
    await relay.idle();
    expect(published).toEqual([]);
    expect(await pointers()).toHaveLength(1);
    await sweepUntil(() => published.length > 0, 'the sweep to publish the event');
    expect(published.map((row) => row.payload)).toEqual([body]);
  });

  it('keeps the pointer of a batch that applied but whose answer was lost, and the sweep publishes its row', async () => {
    const { tenantId, relay, published, order, pointers } = await setup();
    const nudged: OutboxRow[] = [];
    // The batch reaches Cassandra and applies; its answer does not come back (a connection dropped, say).
    const client = new Proxy(db, {
      get(target, property) {
        if (property === 'batch') {
          return async (...args: Parameters<CassandraClient['batch']>) => {
            await target.batch(...args);
            throw new Error('connection reset by peer');
          };
        }
        const value: unknown = Reflect.get(target, property, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
    const writer = new PurchaseStore(client, (row, pointer) => {
      nudged.push(row);
      pointer.release(true);
    });
    await expect(
      transition(writer, tenantId, validated(order, 'PO-000001', new Date().toISOString()), 1),
    ).rejects.toThrow('connection reset');
    expect(nudged).toEqual([]); // the writer cannot tell that it committed
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await pointers()).toHaveLength(1);
    expect(await relay.pass()).toBe(1);
    expect(published.map((row) => row.eventType)).toEqual(['purchaseOrder.validated']);
  });

  /** The driver's error for a request pending on a connection that closed (a node draining), as it raises it. */
  const socketClosed = () =>
    Object.assign(new Error('Socket was closed'), { name: 'DriverError', isSocketError: true });

  /** A writer whose batches fail with a closed socket, after reaching Cassandra (`applied`) or before. */
  const closingWriter = (applied: boolean, onCommitted: ConstructorParameters<typeof PurchaseStore>[1]) => {
    const client = new Proxy(db, {
      get(target, property) {
        if (property === 'batch') {
          return async (...args: Parameters<CassandraClient['batch']>) => {
            if (applied) await target.batch(...args);
            throw socketClosed();
          };
        }
        const value: unknown = Reflect.get(target, property, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
    return new PurchaseStore(client, onCommitted);
  };

  it('tells from a serial read that a batch applied though its connection closed before the answer', async () => {
    // The driver does not retry a compare-and-set after a socket error (it may have applied): the API answered 503
    // for a validation that stood (a Cassandra roll's drain). Like a timeout, the outcome is read, not guessed.
    const { tenantId, order } = await setup();
    const nudged: OutboxRow[] = [];
    const writer = closingWriter(true, (row, pointer) => {
      nudged.push(row);
      pointer.release(true);
    });
    const body = await transition(writer, tenantId, validated(order, 'PO-000001', new Date().toISOString()), 1);
    expect(JSON.parse(body!)).toMatchObject({ status: 'Validated', reference: 'PO-000001' });
    expect(nudged.map((row) => row.eventType)).toEqual(['purchaseOrder.validated']);
  });

  it('tells from a serial read that a batch did not apply when its connection closed before it reached Cassandra', async () => {
    const { tenantId, order, store } = await setup();
    const writer = closingWriter(false, (_row, pointer) => pointer.release(true));
    const dto = validated(order, 'PO-000001', new Date().toISOString());
    expect(await transition(writer, tenantId, dto, 1)).toBeUndefined();
    // Not applied, for certain: the caller tries again on the same version.
    expect(await transition(store, tenantId, dto, 1)).toBeDefined();
  });

  it("deletes a writer's pointer only once every commit under it is published, and never another writer's", async () => {
    const { tenantId, relay, published, order, pointers } = await setup();
    const holds: PointerHold[] = [];
    const writer = new PurchaseStore(db, (_row, pointer) => holds.push(pointer));
    // Another gateway (no relay) has written its pointer for the same order and not yet committed.
    const other = new PurchaseStore(db);
    const otherPointer = other.writePointer(tenantId, order.id);
    await otherPointer.written;

    const validatedBody = await transition(
      writer,
      tenantId,
      validated(order, 'PO-000001', new Date().toISOString()),
      1,
    );
    const validatedDto = JSON.parse(validatedBody!) as PurchaseOrderDTO;
    // A second transition of this writer in the same minute rewrites its pointer row while the first is unpublished.
    const cancelledBody = await transition(writer, tenantId, cancelled(validatedDto, new Date().toISOString()), 2);
    expect(holds).toHaveLength(2);
    holds[1]!.release(true);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await pointers()).toHaveLength(2); // the first commit still holds this writer's

    holds[0]!.release(true);
    await waitFor(async () => (await pointers()).length === 1, "the writer's pointer to be deleted");
    // The other writer's pointer is its own row: it survives, and the sweep reads the order through it.
    otherPointer.release(false);
    expect(await relay.pass()).toBe(2); // neither row was marked published here (the holds were released by hand)
    expect(published.map((row) => row.payload)).toEqual([validatedBody, cancelledBody]);
  });

  it('a transition given the pointer its caller wrote beside its read writes none itself, and the sweep finds it', async () => {
    const { tenantId, relay, published, order } = await setup();
    const { client, counted: pointerWrites } = counting(db, /^INSERT INTO outbox_writer_pointers/);
    // A writer without a relay (nothing nudged): only the sweep can publish its event, through the pointer.
    const writer = new PurchaseStore(client);
    const pointer = writer.writePointer(tenantId, order.id);
    const loaded = await writer.getOrder(tenantId, order.id);
    const body = await writer.transition(
      tenantId,
      validated(order, 'PO-000001', new Date().toISOString()),
      loaded!.version,
      'purchaseOrder.validated',
      new Date().toISOString(),
      undefined,
      { pointer },
    );
    expect(pointerWrites.count).toBe(1);
    expect(await relay.pass()).toBe(1);
    expect(published.map((row) => row.payload)).toEqual([body]);
  });

  it("lists every pointer of a bucket, past the driver's first page (5,000 rows)", async () => {
    // A bucket of its own, far from the clock's: at 250 validations/s a minute holds 15,000 pointers, each kept 30 s.
    const bucket = Math.floor(Date.now() / MINUTE) + 1_000_000 + Math.floor(Math.random() * 1_000_000);
    const tenantId = `relay-${randomBytes(4).toString('hex')}`;
    const ids = Array.from({ length: 5_100 }, (_, index) => `order-${String(index).padStart(5, '0')}`);
    for (let start = 0; start < ids.length; start += 200) {
      await Promise.all(
        ids
          .slice(start, start + 200)
          .map((orderId) =>
            db.execute('INSERT INTO outbox_pointers (bucket, tenant_id, order_id) VALUES (?, ?, ?)', [
              bucket,
              tenantId,
              orderId,
            ]),
          ),
      );
    }
    const listed = await new PurchaseStore(db).pointers(bucket);
    expect(listed.length).toBe(ids.length);
    expect(new Set(listed.map((pointer) => pointer.orderId))).toEqual(new Set(ids));
  });

  it("lists a writer's pointers from every shard of the minute, beside an earlier version's", async () => {
    const tenantId = `relay-${randomBytes(4).toString('hex')}`;
    const writer = new PurchaseStore(db);
    const ids = Array.from({ length: 64 }, (_, index) => `order-${index}`);
    const writes = ids.map((orderId) => writer.writePointer(tenantId, orderId));
    await Promise.all(writes.map((write) => write.written));
    const bucket = Math.floor(Date.now() / MINUTE);
    await db.execute('INSERT INTO outbox_pointers (bucket, tenant_id, order_id) VALUES (?, ?, ?)', [
      bucket,
      tenantId,
      'earlier',
    ]);
    const listed = [...(await writer.pointers(bucket - 1)), ...(await writer.pointers(bucket))].filter(
      (pointer) => pointer.tenantId === tenantId,
    );
    expect(listed.map((pointer) => pointer.orderId).sort()).toEqual([...ids, 'earlier'].sort());
    expect(new Set(listed.map((pointer) => pointer.writer?.shard)).size).toBe(POINTER_SHARDS + 1); // and null
    for (const write of writes) write.release(true);
    await waitFor(
      async () => (await writer.pointers(bucket)).filter((pointer) => pointer.tenantId === tenantId).length === 1,
      'the writer to delete its pointers',
    );
  });

  it('publishes at the next sweep a later transition of a nudged order made by a writer that runs no relay', async () => {
    const { tenantId, store, relay, published, order } = await setup();
    const writer = new PurchaseStore(db, (row) => relay.nudge(row));
    const validatedBody = await transition(
      writer,
      tenantId,
      validated(order, 'PO-000001', new Date().toISOString()),
      1,
    );
    await relay.idle();
    // The cancellation comes from a gateway without a relay (PURCHASE_OUTBOX_RELAY=false): it rewrites the same pointer.
    const validatedDto = JSON.parse(validatedBody!) as PurchaseOrderDTO;
    const cancelledBody = await transition(store, tenantId, cancelled(validatedDto, new Date().toISOString()), 2);
    expect(await relay.pass()).toBe(1); // not held until the pointer settles (30 s)
    expect(published.map((row) => row.payload)).toEqual([validatedBody, cancelledBody]);
  });
});
