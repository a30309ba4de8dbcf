import type { Logger } from '../core/log.ts';
import { MINUTE, type ListedPointer, type OutboxRow, type PointerHold, type PurchaseStore } from './purchase-store.ts';
import { outsideBudget } from '../core/budget.ts';
import { Turns } from '../core/turns.ts';
import type { PurchaseMetrics } from '../core/metrics.ts';

/**
 * Publishes one outbox row; resolves only once the broker acknowledged it (acks=all). `mayBeDuplicate` marks a row
 * published by the sweep, which another process (or this one, before a crash) may have published already: the router
 * then checks what it routed before instead of routing it as new.
 */
export type PublishEvent = (row: OutboxRow, mayBeDuplicate: boolean) => Promise<void>;

/** Nudged orders remembered while the window is full (ids only): beyond this, the sweep publishes them. */
const MAX_DEFERRED = 100_000;

/** Settings of an outbox relay (see the class comment for how the sweep uses them). */
export interface OutboxRelayOptions {
  /** Name under which the sweep's progress is saved. */
  name: string;
  /** Pause between two sweeps. */
  intervalMs: number;
  /**
   * Least time between two listings of the pointers (each reads every pointer of the open buckets, and at a few hundred
   * validations a second those are thousands: the pointers live `settleMs`). A sweep in between reads only the orders
   * of pointers already listed whose read is due (a held row, a settling read). 0 (the default) lists on every sweep.
   * With a `peerGraceMs` as long, a row a writer's relay did not publish is published within twice the grace of its
   * commit: its pointer is listed within one, and its order read once the pointer has been listed for another.
   */
  listEveryMs?: number;
  /** How far back the first sweep of a relay without saved progress looks. */
  lookbackMinutes: number;
  /**
   * Longest time a writer can take between writing its pointer and its batch being applied (plus clock skew between
   * hosts). A read of an order made this long after its pointer was written has seen that writer's batch.
   */
  settleMs: number;
  /** Orders read at once by a sweep. */
  concurrency: number;
  /**
   * A row committed less than this long before the sweep reads it is left to the relay of the gateway that committed it,
   * which publishes it at once: the sweep publishes it only once it is older, if it is still unpublished. Without it,
   * with several gateways, each sweep publishes again every row a peer is still publishing (the sweep reads every
   * 100 ms). 0 (the default) publishes at once: what gateways that run no relay (PURCHASE_OUTBOX_RELAY=false) need.
   */
  peerGraceMs?: number;
  /**
   * Orders whose rows the relay holds at once, nudges and sweeps together: while Kafka is down a publication neither
   * succeeds nor fails (the producer retries without end), so this bounds what an outage piles up in memory.
   */
  window: number;
  /**
   * Payload bytes (UTF-8) the relay holds at once: a publication starts only while fewer are held, so at most this
   * plus `window` bodies (a body's size is known once read) are held.
   */
  windowBytes: number;
  /** The clock (epoch ms); tests drive it to reach a pointer's settling read at once. */
  now?: () => number;
  /** Where the stages from commit to Kafka's acknowledgement, and the events published, are recorded. */
  metrics?: PurchaseMetrics;
}

/** What the sweep knows of one listed pointer. */
interface Tracked {
  pointer: ListedPointer;
  /** Upper bound of the pointer's write time: when the sweep first listed it (or the end of its bucket). */
  writtenBy: number;
  nextReadAt: number;
}

/**
 * Publishes every committed outbox row at least once.
 *
 * Fast path: `nudge` is called in-process once a state change and its outbox row committed, with that row and a hold
 * on its pointer, and publishes it at once without reading it back; once it is published and marked, the hold is
 * released and the writer deletes its pointer (PurchaseStore.writePointer), so the sweep never reads the order. Sweep:
 * for the pointers left behind (a writer without a relay, a failed publication, a crash, or one the writer has not
 * deleted yet), listed by minute bucket from the oldest still open to now (at most every `listEveryMs`; the sweeps
 * between read only the orders due), each order is read once its pointer has been listed for `peerGraceMs` and again
 * once the pointer has settled, and only then is the pointer deleted, with a write time (`USING TIMESTAMP`) that
 * removes the pointer writes that read has covered and no later one. So a writer still between its pointer and its
 * batch, or a second transition of the same order in the same minute, keeps its pointer. A crash at any point leaves
 * the row to a later read. Without a nudge (the writer's process runs no relay, or died before publishing), an event
 * whose batch landed just after its order's first read waits for the settling read, up to settleMs; any other is
 * published by the next sweep.
 *
 * Window: publications hold the rows they read (a body may be tens of MB) until Kafka acknowledges them, which during
 * an outage is when it comes back. So the relay holds at most `window` orders and about `windowBytes` at once: a nudge
 * finding the window full waits as an id (its row is read when its turn comes), and the sweep waits for room. Nothing
 * else is queued in memory; once Kafka is back, the held publications finish and the sweep resumes from the pointers
 * in Cassandra.
 */
export class OutboxRelay {
  private readonly tracked = new Map<number, Map<string, Tracked>>();
  /** One publication at a time per order, so this process never publishes a row twice. */
  private readonly perOrder = new Turns();
  private readonly nudges = new Set<Promise<unknown>>();
  /** Orders nudged while the window was full, in order, each once, with when their first waiting row committed. */
  private readonly deferred = new Map<string, { tenantId: string; orderId: string; committedAt: number }>();
  /** Publications in progress, and the payload bytes they hold (see `window`). */
  private inFlight = 0;
  private heldBytes = 0;
  /** Sweep workers waiting for room in the window. */
  private waiting: (() => void)[] = [];
  /** When the next sweep lists the pointers again (see `listEveryMs`). */
  private nextListingAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly store: PurchaseStore,
    private readonly publish: PublishEvent,
    private readonly logger: Logger,
    private readonly options: OutboxRelayOptions,
  ) {}

  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.pass();
      } catch (error) {
        this.logger.error({ err: error }, 'outbox relay pass failed; retrying');
      }
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          resolve();
        };
        const timer = setTimeout(done, this.options.intervalMs);
        signal.addEventListener('abort', done, { once: true });
      });
    }
    await this.idle();
  }

  /**
   * Publishes a row that has just committed, as it is (unread), or, when the window is full, the order's unpublished
   * rows as soon as it has room: the order's id waits (ids only, up to MAX_DEFERRED; the rows are read when their turn
   * comes). A failure leaves them to the sweep.
   */
  nudge(row: OutboxRow, pointer?: PointerHold): void {
    // Called within the committing API request, whose answer does not wait for it.
    const committedAt = performance.now();
    outsideBudget(() => this.nudgeOrder(row.tenantId, row.orderId, committedAt, row, pointer));
  }

  /**
   * `pointer`, the hold on the committed row's pointer, is released `true` once the row is published and marked (its
   * writer then deletes the pointer, and the sweep never reads the order), `false` if it is not (the sweep publishes it).
   */
  private nudgeOrder(
    tenantId: string,
    orderId: string,
    committedAt: number,
    committed?: OutboxRow,
    pointer?: PointerHold,
  ): void {
    if (!this.hasRoom()) {
      pointer?.release(false); // remembered as an id only: the pointer stays, in case this process dies first
      const key = `${tenantId}\u0000${orderId}`;
      if (this.deferred.has(key)) return;
      if (this.deferred.size < MAX_DEFERRED) this.deferred.set(key, { tenantId, orderId, committedAt });
      else this.logger.debug({ tenantId, orderId }, 'outbox relay backlog full; the sweep will publish the order');
      return;
    }
    this.inFlight += 1;
    const nudge = this.publishInWindow(tenantId, orderId, { committedAt, row: committed, pointer }).then(
      () => pointer?.release(true),
      (error: unknown) => {
        pointer?.release(false);
        this.logger.warn({ err: error, tenantId, orderId }, 'outbox publication failed; the sweep will retry it');
      },
    );
    this.nudges.add(nudge);
    void nudge.finally(() => this.nudges.delete(nudge));
  }

  /** Resolves once every nudge in flight, and every one waiting for room, has finished. */
  async idle(): Promise<void> {
    while (this.nudges.size > 0 || this.deferred.size > 0) {
      // Deferred nudges start when a place in the window (perhaps a sweep's) is given back.
      if (this.nudges.size > 0) await Promise.all([...this.nudges]);
      else await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  /** Starts the nudges that waited for room, as far as the window now allows. */
  private resumeDeferred(): void {
    for (const [key, { tenantId, orderId, committedAt }] of this.deferred) {
      if (!this.hasRoom()) return;
      this.deferred.delete(key);
      this.nudgeOrder(tenantId, orderId, committedAt);
    }
  }

  /**
   * One sweep over the open buckets; returns how many events were published. A request that fails (a Cassandra node
   * restarting, say) costs only its order, or its bucket's listing: the pass goes on with the others, and the bucket
   * stays open, so the next pass reads what was missed. Before, the first failure ended the pass, and each pass began
   * again from the oldest open bucket: through a rolling restart of the Cassandra nodes, where one request in many timed
   * out, the sweep kept starting over and left published rows waiting for minutes.
   */
  async pass(): Promise<number> {
    const clock = this.options.now ?? Date.now;
    const now = clock();
    if (now < this.nextListingAt) return this.readDue(now);
    this.nextListingAt = now + (this.options.listEveryMs ?? 0);
    const current = Math.floor(now / MINUTE);
    const saved = await this.store.relayProgress(this.options.name);
    const oldest = Math.min(saved ?? current - this.options.lookbackMinutes, current);
    let published = 0;
    let oldestOpen = current;
    const failed: unknown[] = [];
    for (let bucket = oldest; bucket <= current; bucket += 1) {
      let pointers: ListedPointer[];
      try {
        pointers = await this.store.pointers(bucket);
      } catch (error) {
        failed.push(error);
        oldestOpen = Math.min(oldestOpen, bucket);
        this.nextListingAt = now; // listed again by the next sweep
        continue;
      }
      const before = this.tracked.get(bucket);
      const listed = new Map<string, Tracked>();
      for (const pointer of pointers) {
        const key = `${pointer.tenantId}\u0000${pointer.orderId}\u0000${pointer.writer?.id ?? ''}`;
        // A pointer of a bucket that ended was written by then (give or take the clock skew settleMs allows for).
        const writtenBy = Math.min(now, (bucket + 1) * MINUTE);
        // A pointer listed for the first time is read once its writer's relay has had its grace: by then that relay has
        // most often published the rows, and a read sooner would find them young, hold them and read them again.
        const firstRead = now + (this.options.peerGraceMs ?? 0);
        listed.set(key, before?.get(key) ?? { pointer, writtenBy, nextReadAt: firstRead });
      }
      if (listed.size > 0) this.tracked.set(bucket, listed);
      else this.tracked.delete(bucket);
      published += await this.readOrders(bucket, listed, now, failed);
      // A bucket stays open for two minutes: a writer's clock may be a little behind the relay's.
      if (pointers.length > 0 || bucket >= current - 1) oldestOpen = Math.min(oldestOpen, bucket);
    }
    for (const bucket of this.tracked.keys()) if (bucket < oldestOpen) this.tracked.delete(bucket);
    if (oldestOpen !== saved) await this.store.saveRelayProgress(this.options.name, oldestOpen);
    this.report(published, failed);
    return published;
  }

  /** A sweep between two listings: the orders of listed pointers whose read is due, and nothing else. */
  private async readDue(now: number): Promise<number> {
    let published = 0;
    const failed: unknown[] = [];
    for (const [bucket, listed] of this.tracked) published += await this.readOrders(bucket, listed, now, failed);
    this.report(published, failed);
    return published;
  }

  /**
   * Reads the orders of a bucket's listed pointers whose read is due, publishes what they hold, and deletes the
   * pointers that have settled; a failed read leaves its pointer listed, due, for the next sweep.
   */
  private async readOrders(bucket: number, listed: Map<string, Tracked>, now: number, failed: unknown[]) {
    const clock = this.options.now ?? Date.now;
    const { settleMs } = this.options;
    let published = 0;
    const due = [...listed].filter(([, tracked]) => tracked.nextReadAt <= now);
    const errors = await forEach(due, this.options.concurrency, async ([key, tracked]) => {
      const { tenantId, orderId } = tracked.pointer;
      await this.enterWindow();
      const readAt = clock();
      let heldUntil: number | undefined;
      const ms = this.options.peerGraceMs ?? 0;
      const grace = ms > 0 ? { ms, notAfter: readAt - ms, held: (until: number) => (heldUntil = until) } : undefined;
      // Not `published += await …`: that reads the sum before the wait, and workers running at once overwrite it.
      const count = await this.publishInWindow(tenantId, orderId, undefined, grace);
      published += count;
      if (heldUntil !== undefined) {
        // A row its writer's relay is most likely publishing right now: read again once that has had its time.
        tracked.nextReadAt = heldUntil;
      } else if (readAt - settleMs >= tracked.writtenBy) {
        // Removes the pointer writes older than settleMs before the read, whose batches that read has seen; a
        // pointer written again since survives and is listed (and read) afresh by the next listing.
        await this.store.dropPointer(bucket, tracked.pointer, (readAt - settleMs) * 1000);
        listed.delete(key);
      } else {
        tracked.nextReadAt = tracked.writtenBy + settleMs;
      }
    });
    failed.push(...errors);
    return published;
  }

  /**
   * The stages of `rows`, acknowledged now, whose publication started at `publishing`: a nudge's from its commit here,
   * the sweep's from the time each row records (its request's, a little before its commit, on its writer's clock).
   */
  private record(rows: OutboxRow[], publishing: number, nudged: Nudged | undefined): void {
    const metrics = this.options.metrics;
    if (!metrics) return;
    const acknowledged = performance.now();
    if (nudged) {
      metrics.stage('commit_to_publish', publishing - nudged.committedAt);
      metrics.stage('outbox_publish', acknowledged - publishing);
      metrics.stage('commit_to_topic', acknowledged - nudged.committedAt);
    } else {
      const now = Date.now();
      for (const row of rows) metrics.stage('sweep_to_topic', now - Date.parse(row.occurredAt));
    }
    metrics.published(nudged ? 'nudge' : 'sweep', rows.length);
  }

  private report(published: number, failed: unknown[]): void {
    if (published > 0) this.logger.debug({ published }, 'outbox relay published events');
    if (failed.length > 0) {
      this.logger.warn(
        { err: failed[0], failed: failed.length, published },
        'outbox relay: requests failed in this pass; the next pass reads their orders again',
      );
    }
  }

  private hasRoom(): boolean {
    return this.inFlight < this.options.window && this.heldBytes < this.options.windowBytes;
  }

  /** Takes a place in the window, waiting until there is room. */
  private async enterWindow(): Promise<void> {
    while (!this.hasRoom()) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.inFlight += 1;
  }

  /**
   * Publishes the order's rows in the place taken in the window, and gives the place (and the bytes) back: a nudge's
   * (`nudged`) or the sweep's (none).
   */
  private async publishInWindow(tenantId: string, orderId: string, nudged?: Nudged, grace?: Grace): Promise<number> {
    let bytes = 0;
    try {
      const onRead = (rows: OutboxRow[]) => {
        bytes = rows.reduce((total, row) => total + Buffer.byteLength(row.payload), 0);
        this.heldBytes += bytes;
      };
      return await this.publishOrder(tenantId, orderId, onRead, nudged, grace);
    } finally {
      this.inFlight -= 1;
      this.heldBytes -= bytes;
      // Nudges that found the window full go first (their events are the freshest), then every sweep worker waiting
      // checks again: one leaving may make room for several (or, by bytes, for none).
      this.resumeDeferred();
      const waiting = this.waiting;
      this.waiting = [];
      for (const wake of waiting) wake();
    }
  }

  /**
   * Publishes, then marks published, the order's unpublished rows; one run at a time per order. A row committed just
   * now (`nudged.row`) is published as it is when no other run for its order is under way here: one that is (the
   * sweep, listing the pointer first) may have published it already, and only a read after it tells.
   */
  private publishOrder(
    tenantId: string,
    orderId: string,
    onRead: (rows: OutboxRow[]) => void,
    nudged?: Nudged,
    grace?: Grace,
  ): Promise<number> {
    const viaSweep = nudged === undefined;
    return this.perOrder.run(`${tenantId}\u0000${orderId}`, async (afterAnother) => {
      // After another run for the order, the row handed in may be published already: only a read tells.
      let rows = nudged?.row && !afterAnother ? [nudged.row] : await this.store.unpublished(tenantId, orderId);
      if (grace) {
        const young = rows.filter((row) => Date.parse(row.occurredAt) > grace.notAfter);
        if (young.length > 0) {
          grace.held(Math.min(...young.map((row) => Date.parse(row.occurredAt))) + grace.ms);
          rows = rows.filter((row) => Date.parse(row.occurredAt) <= grace.notAfter);
        }
      }
      onRead(rows);
      // Handed to the publisher in occurredAt order (no ordering is promised to subscribers, but it costs nothing).
      const publishing = performance.now();
      await Promise.all(rows.map((row) => this.publish(row, viaSweep)));
      if (rows.length > 0) this.record(rows, publishing, nudged);
      // A nudge's one row takes its pointer's deletion along when the hold is the last (one request for both).
      const pointer = rows.length === 1 ? nudged?.pointer : undefined;
      await Promise.all(rows.map((row) => this.store.markPublished(row, pointer)));
      return rows.length;
    });
  }
}

/** A publication nudged by a commit in this process: when it committed, and its row (unless it waited as an id). */
interface Nudged {
  committedAt: number;
  row?: OutboxRow;
  /** The hold on the committed row's pointer, released `true` once the order's rows are published and marked. */
  pointer?: PointerHold;
}

/** The sweep's rows committed after `notAfter` wait `ms` from their commit for their writer's relay; `held` says until when. */
interface Grace {
  ms: number;
  notAfter: number;
  held: (until: number) => void;
}

/** Runs `task` over `items` with at most `limit` at once; resolves, once all have settled, with their failures. */
async function forEach<T>(items: T[], limit: number, task: (item: T) => Promise<void>): Promise<unknown[]> {
  let next = 0;
  const failures: unknown[] = [];
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++]!;
      try {
        await task(item);
      } catch (error) {
        failures.push(error);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return failures;
}
