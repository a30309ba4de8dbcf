// One time budget per API request (GATEWAY_REQUEST_BUDGET), shared by every Cassandra and Kafka call the request
// makes, each of which also has its own bound (GATEWAY_DEPENDENCY_TIMEOUT): a validation makes several Cassandra
// requests one after another, and a bound on each alone let a call wait a multiple of it.
import { AsyncLocalStorage } from 'node:async_hooks';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { DependencyUnavailableError } from './errors.ts';

/**
 * A deadline that may come sooner while the work runs: `limit` says when it ends now (undefined: no sooner than
 * `deadline`), and calls `onSooner` when that may have changed (RequestBudget: a window opening).
 */
export interface BudgetLimit {
  endsAt(): number | undefined;
  watch(onSooner: () => void): () => void;
}

interface Budget {
  deadline: number;
  limit?: BudgetLimit;
}

const budgets = new AsyncLocalStorage<Budget>();

/**
 * Runs `work` with `ms` to spend on dependencies, counted from now, or less if `limit` comes sooner; an enclosing budget
 * that ends sooner still rules.
 */
export function withinBudget<T>(ms: number, work: () => T, limit?: BudgetLimit): T {
  const deadline = Date.now() + ms;
  const enclosing = budgets.getStore();
  if (enclosing === undefined) return budgets.run({ deadline, limit }, work);
  return budgets.run({ deadline: Math.min(enclosing.deadline, deadline), limit: limit ?? enclosing.limit }, work);
}

/**
 * Runs `work` outside any budget: for work a request starts but does not wait for, or shares with other requests
 * (publishing an outbox row once the answer is sent, a batch of several requests' writes), which must not fail when
 * the request that happened to start it runs out of time.
 */
export function outsideBudget<T>(work: () => T): T {
  return budgets.exit(work);
}

/** What is left of the current budget in ms (0 once spent), or undefined outside any budget (background work). */
export function budgetLeft(): number | undefined {
  const budget = budgets.getStore();
  return budget === undefined ? undefined : leftOf(budget);
}

function leftOf(budget: Budget): number {
  const sooner = budget.limit?.endsAt();
  const deadline = sooner === undefined ? budget.deadline : Math.min(budget.deadline, sooner);
  return Math.max(0, deadline - Date.now());
}

/**
 * How long a call to `dependency` may wait: its own bound, cut to what is left of the budget. A spent budget throws
 * DependencyUnavailableError (the API answers 503) without calling at all.
 */
export function callTimeout(dependency: string, ownBoundMs: number): number {
  const left = budgetLeft();
  if (left === undefined) return ownBoundMs;
  if (left === 0) throw new DependencyUnavailableError(dependency);
  return Math.min(ownBoundMs, left);
}

/**
 * `work`, or DependencyUnavailableError naming `dependency` once `ms` have passed or the budget is spent, whichever
 * comes first (onBudgetSpent). The work itself goes on (a write may still apply): the caller's 503 says the outcome is
 * not known.
 */
export async function settleWithin<T>(work: Promise<T>, ms: number, dependency: string): Promise<T> {
  let cancel: (() => void) | undefined;
  const late = new Promise<never>((_, reject) => {
    cancel = onBudgetSpent(() => reject(new DependencyUnavailableError(dependency)), ms);
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    cancel?.();
  }
}

/**
 * Calls `onSpent` once the current budget is spent, or after `ms` if that comes first (after `ms` alone outside any
 * budget, never without either); re-timed when the budget's limit comes sooner meanwhile, so a wait under way when a
 * dependency is found unavailable ends with the degraded budget, not at its own bound. Returns what cancels it.
 */
export function onBudgetSpent(onSpent: () => void, ms = Number.POSITIVE_INFINITY): () => void {
  // Read here: a window is opened from the context of another request.
  const budget = budgets.getStore();
  const endsAt = Date.now() + ms;
  let timer: NodeJS.Timeout | undefined;
  let spent = false;
  const arm = () => {
    // Once: a window opening after the call gave up must not call it again.
    if (spent) return;
    clearTimeout(timer);
    const wait = Math.min(endsAt - Date.now(), budget === undefined ? Number.POSITIVE_INFINITY : leftOf(budget));
    const spend = () => {
      spent = true;
      onSpent();
    };
    timer = Number.isFinite(wait) ? setTimeout(spend, Math.max(0, wait)) : undefined;
  };
  arm();
  const unwatch = budget?.limit?.watch(arm);
  return () => {
    clearTimeout(timer);
    unwatch?.();
  };
}

/**
 * The budget a request starts with: `normalMs`, or `degradedMs` for `windowMs` after a request found a dependency
 * unavailable. A Cassandra that lost its quorum and is getting it back answers, but slowly, and a call making several
 * requests could wait its whole budget before its 503 (or its 200): while it recovers, callers hear at once.
 */
export class RequestBudget {
  private failedAt = Number.NEGATIVE_INFINITY;
  /** Calls in flight of requests that arrived with the normal budget, told when the window opens (settleWithin). */
  private readonly watchers = new Set<() => void>();

  constructor(
    readonly normalMs: number,
    readonly degradedMs: number,
    readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** A request found a dependency unavailable: a window opening cuts the requests under way too (`limitFrom`). */
  failed(): void {
    const opens = !this.degraded;
    this.failedAt = this.now();
    if (opens) for (const watcher of [...this.watchers]) watcher();
  }

  /**
   * The limit of a request that arrived at `arrivedAt` (Date.now's clock): while the window is open, the degraded
   * budget counted from its arrival. A request under way when it opens ends by then too: answered 503 within the
   * degraded budget, where it could otherwise wait out several calls' bounds, one after another, within the normal one.
   */
  limitFrom(arrivedAt: number): BudgetLimit {
    return {
      endsAt: () => (this.degraded ? arrivedAt + this.degradedMs : undefined),
      watch: (onSooner) => {
        this.watchers.add(onSooner);
        return () => this.watchers.delete(onSooner);
      },
    };
  }

  /** Whether a dependency failed within the window. */
  get degraded(): boolean {
    return this.now() - this.failedAt < this.windowMs;
  }

  /** The budget of a request arriving now. */
  get ms(): number {
    return this.degraded ? Math.min(this.normalMs, this.degradedMs) : this.normalMs;
  }
}

/**
 * Gives every request of `app` its budget (`budget.ms` when it arrives, counted from its arrival), and tells `budget`
 * of requests that failed for a dependency: one that `isUnreachable` (the driver found no host, or not enough replicas),
 * or one whose bound ran out while it had the normal budget. A request that ran out of the degraded budget does not
 * prolong it: a call that is slow even when all is well (a 5,000-row order) and is retried would otherwise keep the
 * degraded budget, and its own 503s, going for ever.
 * The callback-style hooks call the rest (later hooks, then the handler) inside `done`, so whatever they await carries
 * it: from onRequest, so that the hooks before the handler (authentication's directory lookup) are bounded too, and
 * again from preHandler, since a body read from the socket in between is not awaited in that context.
 */
export function installRequestBudget(
  app: FastifyInstance,
  budget: RequestBudget,
  isUnreachable: (error: Error) => boolean,
): void {
  const degraded = new WeakSet<object>();
  // The budget each request arrived with: the same from both hooks, though a window may open between them.
  const given = new WeakMap<object, number>();
  const run = (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    let ms = given.get(request);
    if (ms === undefined) {
      ms = budget.ms;
      given.set(request, ms);
      if (budget.degraded) degraded.add(request);
    }
    withinBudget(ms - reply.elapsedTime, done, budget.limitFrom(Date.now() - reply.elapsedTime));
  };
  app.addHook('onRequest', run);
  app.addHook('preHandler', run);
  app.addHook('onError', async (request, _reply, error) => {
    const ranOut = error instanceof DependencyUnavailableError && !degraded.has(request);
    if (ranOut || isUnreachable(error)) budget.failed();
  });
}
