/** One receiver origin: the requests it has open, and each subscription's open and waiting ones. */
interface Origin {
  active: number;
  keys: Map<string, KeyState>;
  /** Subscriptions with requests waiting, in the order they get their turn. */
  turn: string[];
}

interface KeyState {
  active: number;
  waiting: (() => void)[];
}

/**
 * The connections the dispatcher opens to one receiver origin (DISPATCHER_CONNECTIONS_PER_ORIGIN), shared fairly
 * between the subscriptions sending to it. Many subscriptions share an origin (a platform's subscribers, one SaaS
 * receiver): a FIFO queue let the slow and hanging ones among them hold every connection while the fast ones waited,
 * tens of seconds behind them. Here a free connection goes to the next subscription in turn that holds less than its
 * fair share (the bound divided by the subscriptions using the origin), to one above it only when none under it
 * waits; and a quarter of the bound is kept for subscriptions that hold no connection yet.
 */
export class OriginGate {
  private readonly origins = new Map<string, Origin>();
  /** The origin each subscription with requests open or waiting sends to. */
  private readonly originOf = new Map<string, string>();

  /** Connections kept for the first request of subscriptions that hold none: a quarter of the bound. */
  private readonly reserve: number;

  constructor(private readonly perOrigin: number) {
    this.reserve = Math.floor(perOrigin / 4);
  }

  /** Resolves with the release function once the request of subscription `key` may open a connection to `origin`. */
  acquire(origin: string, key: string): Promise<() => void> {
    let state = this.origins.get(origin);
    if (!state) {
      state = { active: 0, keys: new Map(), turn: [] };
      this.origins.set(origin, state);
    }
    let keyState = state.keys.get(key);
    if (!keyState) {
      keyState = { active: 0, waiting: [] };
      state.keys.set(key, keyState);
    }
    this.originOf.set(key, origin);
    const admitted = new Promise<void>((resolve) => keyState.waiting.push(resolve));
    if (keyState.waiting.length === 1) state.turn.push(key);
    this.dispatch(state);
    const gate = state;
    const own = keyState;
    return admitted.then(() => () => this.release(origin, gate, key, own));
  }

  /**
   * Requests subscription `key` can have open at once now: its fair share while its origin is short of connections
   * (past the bound less the reserve), else no limit. The dispatcher narrows the subscription's lane to it, so its
   * records beyond the share wait in the lane (where a backlog is parked) rather than started and holding the
   * read-ahead buffer while they wait here for a connection.
   */
  limitFor(key: string): number {
    const origin = this.originOf.get(key);
    const state = origin === undefined ? undefined : this.origins.get(origin);
    if (!state || state.active < this.perOrigin - this.reserve) return Infinity;
    return Math.max(1, Math.floor(this.perOrigin / state.keys.size));
  }

  /** Requests open to `origin` now, in all and for `key`: for tests and metrics. */
  open(origin: string, key?: string): number {
    const state = this.origins.get(origin);
    if (!state) return 0;
    return key === undefined ? state.active : (state.keys.get(key)?.active ?? 0);
  }

  private release(origin: string, state: Origin, key: string, keyState: KeyState): void {
    state.active -= 1;
    keyState.active -= 1;
    if (keyState.active === 0 && keyState.waiting.length === 0) {
      state.keys.delete(key);
      this.originOf.delete(key);
    }
    this.dispatch(state);
    if (state.active === 0 && state.keys.size === 0) this.origins.delete(origin);
  }

  /**
   * Lets waiting requests in while the origin is under its bound: subscriptions under their share first, in turn.
   * A subscription that already holds a connection gets another only while a reserve (a quarter of the bound) stays
   * free: kept for the first request of those that hold none, so a fast subscription's request finds a connection at
   * once instead of waiting for a slow one's answer.
   */
  private dispatch(state: Origin): void {
    while (state.active < this.perOrigin && state.turn.length > 0) {
      const share = Math.max(1, Math.floor(this.perOrigin / state.keys.size));
      const fits = (held: number) => held === 0 || state.active < this.perOrigin - this.reserve;
      let index = state.turn.findIndex((key) => {
        const held = state.keys.get(key)!.active;
        return held < share && fits(held);
      });
      if (index < 0) index = state.turn.findIndex((key) => fits(state.keys.get(key)!.active));
      if (index < 0) return;
      const key = state.turn[index]!;
      const keyState = state.keys.get(key)!;
      state.turn.splice(index, 1);
      keyState.active += 1;
      state.active += 1;
      keyState.waiting.shift()!();
      // Its next request waits for its next turn, behind the others'.
      if (keyState.waiting.length > 0) state.turn.push(key);
    }
  }
}
