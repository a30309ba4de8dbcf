/**
 * Routings of one event in this process, one after another. Two copies of an event (two gateways' relays published
 * it, one from its commit and one from its sweep) can sit side by side in a fetch; routed at once, neither finds the
 * other's rows and both go out as new records, which a dispatcher may send twice. A copy that finds another copy
 * being routed here waits for it and is routed as a possible repeat: it finds the rows the first one wrote and
 * publishes only what is still queued, marked. Copies that are not routed at once need none of this.
 */
export class EventTurns {
  private readonly routing = new Map<string, Promise<unknown>>();

  /** Runs `route` once no other routing of `key` is under way here; `afterAnother` says whether one was. */
  async run<T>(key: string, route: (afterAnother: boolean) => Promise<T>): Promise<T> {
    const before = this.routing.get(key);
    // A copy whose routing failed will be tried again: the one after it routes as a repeat all the same.
    const mine = before === undefined ? route(false) : before.then(noop, noop).then(() => route(true));
    this.routing.set(key, mine);
    try {
      return await mine;
    } finally {
      if (this.routing.get(key) === mine) this.routing.delete(key);
    }
  }
}

const noop = () => undefined;
