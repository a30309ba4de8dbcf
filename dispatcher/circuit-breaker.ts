import type { AttemptResult } from './outcome.ts';

/** How a subscription's circuit opens and closes (DISPATCHER_CIRCUIT_* in the configuration). */
export interface BreakerSettings {
  /** Consecutive failed attempts (no answer in time, no connection, a 5xx) that open the circuit; 0 switches it off. */
  failures: number;
  /** How long the circuit first stays open; each failed probe doubles it, up to maxOpenMs. */
  openMs: number;
  maxOpenMs: number;
  /** A probe not answered in this long (its dispatcher died) no longer blocks the next one. */
  probeTimeoutMs: number;
  /** Subscriptions tracked at most; closed circuits with no failure are forgotten first. */
  maxTracked?: number;
}

export type CircuitState = 'closed' | 'open' | 'half-open';

/** What the breaker says before an attempt: send it (as the one probe of a half-open circuit, or not), or defer it. */
export type Gate = { send: true; probe: boolean } | { send: false; retryAt: number; reason: string };

/** Told each transition: metrics and logs. */
export type TransitionListener = (subscriptionId: string, from: CircuitState, to: CircuitState, detail: string) => void;

interface Circuit {
  state: CircuitState;
  /** Consecutive failed attempts while closed; the last one's kind. */
  failures: number;
  lastFailure: string;
  /** When an open circuit lets its next probe through; and the open period that set it. */
  openUntil: number;
  openMs: number;
  /** When the probe in flight began (half-open), 0 when none is. */
  probeAt: number;
  /** Each attempt is counted once by the generation it began in: answers from before a transition change nothing. */
  generation: number;
}

/**
 * A circuit breaker per subscription (the pattern of Nygard's Release It!, as Convoy and Hookdeck apply it to webhook
 * endpoints). Closed: attempts go out; `failures` consecutive failures (timeouts, refused or dropped connections, 5xx)
 * open it. Open: no attempt goes out until `openUntil`; deliveries are deferred to their retry tiers without one. Then
 * half-open: one attempt at a time goes out as a probe; its success closes the circuit, its failure opens it again
 * for twice as long (up to maxOpenMs). Other answers (2xx, 3xx, 4xx including 429, which the concurrency limiter and
 * Retry-After handle) show the endpoint is there: they reset the count. Answers to attempts begun before the last
 * transition do not count: twenty requests hanging at once open the circuit once, not twenty times.
 */
export class CircuitBreaker {
  private readonly circuits = new Map<string, Circuit>();
  private readonly maxTracked: number;

  constructor(
    private readonly settings: BreakerSettings,
    private readonly onTransition: TransitionListener = () => {},
    private readonly now: () => number = Date.now,
  ) {
    this.maxTracked = settings.maxTracked ?? 10_000;
  }

  /** Asks before an attempt to the subscription's endpoint; `done` must follow each attempt let through. */
  enter(subscriptionId: string): Gate & { generation?: number } {
    const circuit = this.circuits.get(subscriptionId);
    if (!circuit || circuit.state === 'closed') return { send: true, probe: false, generation: circuit?.generation };
    const now = this.now();
    if (circuit.state === 'open' && now >= circuit.openUntil)
      this.move(subscriptionId, circuit, 'half-open', 'probing');
    if (
      circuit.state === 'half-open' &&
      (circuit.probeAt === 0 || now - circuit.probeAt >= this.settings.probeTimeoutMs)
    ) {
      circuit.probeAt = now;
      return { send: true, probe: true, generation: circuit.generation };
    }
    const retryAt = circuit.state === 'open' ? circuit.openUntil : now + circuit.openMs;
    return { send: false, retryAt, reason: this.describe(circuit) };
  }

  /** The result of an attempt `enter` let through (undefined: it threw before an answer was read). */
  done(subscriptionId: string, gate: { probe: boolean; generation?: number }, result: AttemptResult | undefined): void {
    // No answer and no failure of the endpoint (a blocked address, a failed token request): nothing learnt about it.
    if (this.settings.failures <= 0 || result === undefined || (result.statusCode === null && !result.failure)) return;
    const failure = failureOf(result);
    let circuit = this.circuits.get(subscriptionId);
    if (!circuit) {
      if (failure === undefined) return; // a closed circuit with no failure is not tracked
      circuit = {
        state: 'closed',
        failures: 0,
        lastFailure: '',
        openUntil: 0,
        openMs: this.settings.openMs,
        probeAt: 0,
        generation: 0,
      };
      this.track(subscriptionId, circuit);
    }
    if ((gate.generation ?? 0) !== circuit.generation) return;
    if (circuit.state === 'half-open') {
      if (!gate.probe) return;
      circuit.probeAt = 0;
      if (failure === undefined) {
        circuit.openMs = this.settings.openMs;
        this.move(subscriptionId, circuit, 'closed', 'the probe succeeded');
        circuit.failures = 0;
      } else {
        circuit.lastFailure = failure;
        circuit.openMs = Math.min(circuit.openMs * 2, this.settings.maxOpenMs);
        this.open(subscriptionId, circuit, `the probe failed (${failure})`);
      }
      return;
    }
    if (circuit.state !== 'closed') return;
    if (failure === undefined) {
      // Reachable again: forget it (a closed circuit with no failure is not tracked).
      this.circuits.delete(subscriptionId);
      return;
    }
    circuit.failures += 1;
    circuit.lastFailure = failure;
    if (circuit.failures >= this.settings.failures) {
      this.open(subscriptionId, circuit, `${circuit.failures} consecutive failures, the last ${failure}`);
    }
  }

  /** The circuit's state (closed for a subscription never tracked). */
  state(subscriptionId: string): CircuitState {
    return this.circuits.get(subscriptionId)?.state ?? 'closed';
  }

  /** Circuits open or half-open now, for the gauge. */
  openCount(): number {
    let count = 0;
    for (const circuit of this.circuits.values()) if (circuit.state !== 'closed') count += 1;
    return count;
  }

  private open(subscriptionId: string, circuit: Circuit, detail: string): void {
    circuit.openUntil = this.now() + circuit.openMs;
    this.move(subscriptionId, circuit, 'open', detail);
  }

  private move(subscriptionId: string, circuit: Circuit, to: CircuitState, detail: string): void {
    const from = circuit.state;
    circuit.state = to;
    circuit.generation += 1;
    this.onTransition(subscriptionId, from, to, detail);
  }

  private describe(circuit: Circuit): string {
    const until = new Date(circuit.state === 'open' ? circuit.openUntil : this.now() + circuit.openMs).toISOString();
    return circuit.state === 'open'
      ? `circuit open after repeated failures (last: ${circuit.lastFailure}); not attempted, next probe at ${until}`
      : `circuit half-open (last: ${circuit.lastFailure}); not attempted while a probe is in flight`;
  }

  /** Tracks a circuit, making room by forgetting the oldest closed one (Map order is insertion order). */
  private track(subscriptionId: string, circuit: Circuit): void {
    if (this.circuits.size >= this.maxTracked) {
      for (const [key, other] of this.circuits) {
        if (other.state === 'closed') {
          this.circuits.delete(key);
          break;
        }
      }
    }
    this.circuits.set(subscriptionId, circuit);
  }
}

/** Why an attempt counts as a failure of the endpoint, or undefined when its answer shows the endpoint is there. */
export function failureOf(result: AttemptResult): string | undefined {
  if (result.failure === 'timeout') return 'no answer in time';
  if (result.failure === 'connection') return 'no connection';
  if (result.statusCode === null) return undefined; // blocked address, failed token request: not the endpoint's load
  if (result.statusCode >= 500) return `HTTP ${result.statusCode}`;
  return undefined;
}
