import { outsideBudget } from './budget.ts';

/** One CQL write with its values. Its write time and TTL are in its own text (USING TTL … AND TIMESTAMP ?), not in the
 * request's options, so it can share a batch with writes stamped differently. */
export interface WriteStatement {
  query: string;
  params: unknown[];
}

/** Sends statements in one request: a lone statement as itself, several as one unlogged batch. */
export type SendStatements = (statements: WriteStatement[]) => Promise<void>;

export interface WriteBatcherOptions {
  /** Statements in one request at most (a write of more goes alone). */
  maxStatements: number;
  /** Estimated bytes of one request at most: Cassandra refuses a batch of several partitions past
   * batch_size_fail_threshold (50 KiB by default), so a bigger write goes alone. */
  maxBytes: number;
  /** Requests in flight at once; writes made meanwhile wait and ride together in the next ones. */
  maxInFlight: number;
  /**
   * How long a write made while no request is in flight waits for others to share its request (default 0: until the
   * end of the current turn of the event loop). Worth a few ms only where nobody waits on the write to answer anyone
   * (a dispatcher's attempt history): at moderate load it turns one request per write into one per few writes. A
   * request's worth of statements leaves at once.
   */
  lingerMs?: number;
}

export const DEFAULT_WRITE_BATCHING: WriteBatcherOptions = { maxStatements: 160, maxBytes: 48_000, maxInFlight: 4 };

interface Pending {
  statements: WriteStatement[];
  bytes: number;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/**
 * Group commit for Cassandra writes. Each write (a few statements that belong together, such as a delivery's row and
 * its index rows) resolves once Cassandra has acknowledged it. Writes made while `maxInFlight` requests are
 * outstanding, or within one turn of the event loop, go out together as one unlogged batch: at volume one request
 * carries tens of writes instead of one, which is most of what a write costs Cassandra and the driver; when idle, a
 * write leaves at once. Every write is idempotent (explicit write times), so a failed batch is sent again write by
 * write: one bad write fails alone, and a write that fails reaches its own caller, who decides whether to retry.
 */
export class WriteBatcher {
  private readonly queue: Pending[] = [];
  private inFlight = 0;
  private scheduled = false;
  /** Statements queued, to cut a linger short once they fill a request. */
  private queuedStatements = 0;
  private lingering: NodeJS.Timeout | undefined;

  constructor(
    private readonly send: SendStatements,
    private readonly options: WriteBatcherOptions = DEFAULT_WRITE_BATCHING,
  ) {}

  /** Resolves once every statement of the write is applied; rejects with the error of its request. */
  write(statements: WriteStatement[]): Promise<void> {
    if (statements.length === 0) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ statements, bytes: estimateBytes(statements), resolve, reject });
      this.queuedStatements += statements.length;
      if (this.lingering && this.queuedStatements >= this.options.maxStatements) {
        clearTimeout(this.lingering);
        this.lingering = undefined;
        this.scheduled = false;
      }
      this.schedule(true);
    });
  }

  /** `fresh`: called for a new write (which may linger), not for writes that already waited for a slot. */
  private schedule(fresh = false): void {
    if (this.scheduled || this.inFlight >= this.options.maxInFlight || this.queue.length === 0) return;
    this.scheduled = true;
    const run = () => {
      this.scheduled = false;
      this.lingering = undefined;
      this.flush();
    };
    const linger = this.options.lingerMs ?? 0;
    // Idle: linger for company if asked to. Otherwise one turn of the event loop lets writes made by the same burst of
    // callbacks share the request (and while requests are in flight, writes gather in the queue anyway).
    // A batch carries writes of several callers (API requests among them): none's budget (budget.ts) bounds it.
    outsideBudget(() => {
      if (fresh && linger > 0 && this.inFlight === 0 && this.queuedStatements < this.options.maxStatements) {
        this.lingering = setTimeout(run, linger);
      } else {
        setImmediate(run);
      }
    });
  }

  private flush(): void {
    while (this.inFlight < this.options.maxInFlight && this.queue.length > 0) {
      const taken = this.take();
      this.inFlight += 1;
      void this.sendAll(taken).finally(() => {
        this.inFlight -= 1;
        this.schedule();
      });
    }
  }

  /** The oldest writes that fit one request (at least one, whatever its size). */
  private take(): Pending[] {
    const { maxStatements, maxBytes } = this.options;
    const taken = [this.queue.shift()!];
    let count = taken[0]!.statements.length;
    let bytes = taken[0]!.bytes;
    while (this.queue.length > 0) {
      const next = this.queue[0]!;
      if (count + next.statements.length > maxStatements || bytes + next.bytes > maxBytes) break;
      taken.push(this.queue.shift()!);
      count += next.statements.length;
      bytes += next.bytes;
    }
    this.queuedStatements -= count;
    return taken;
  }

  private async sendAll(writes: Pending[]): Promise<void> {
    try {
      await this.send(writes.flatMap((write) => write.statements));
      for (const write of writes) write.resolve();
    } catch (error) {
      if (writes.length === 1) {
        writes[0]!.reject(error);
        return;
      }
      // Which write failed is unknown: each is sent once more on its own, and answers its caller alone.
      await Promise.all(
        writes.map((write) =>
          this.send(write.statements).then(
            () => write.resolve(),
            (cause: unknown) => write.reject(cause),
          ),
        ),
      );
    }
  }
}

/** A statement's size as Cassandra counts a batch: its values' bytes, plus a little per row. */
function estimateBytes(statements: WriteStatement[]): number {
  let bytes = 0;
  for (const statement of statements) {
    bytes += 32;
    for (const value of statement.params) {
      if (typeof value === 'string') bytes += Buffer.byteLength(value);
      else if (Buffer.isBuffer(value)) bytes += value.length;
      else bytes += 8;
    }
  }
  return bytes;
}
