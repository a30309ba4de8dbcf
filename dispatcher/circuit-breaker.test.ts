import { describe, expect, it } from 'vitest';
import { CircuitBreaker, failureOf, type CircuitState } from './circuit-breaker.ts';
import type { AttemptResult } from './outcome.ts';

const TIMEOUT: AttemptResult = { statusCode: null, errorMessage: 'timeout', durationMs: 30_000, failure: 'timeout' };
const REFUSED: AttemptResult = { statusCode: null, errorMessage: 'ECONNREFUSED', durationMs: 1, failure: 'connection' };
const ERROR_500: AttemptResult = { statusCode: 500, errorMessage: 'HTTP 500', durationMs: 3 };
const OK: AttemptResult = { statusCode: 204, errorMessage: null, durationMs: 3 };
const GONE: AttemptResult = { statusCode: 410, errorMessage: 'HTTP 410', durationMs: 3 };
const THROTTLED: AttemptResult = { statusCode: 429, errorMessage: 'HTTP 429', durationMs: 3, retryAfterMs: 1_000 };

function breaker(failures = 3) {
  const clock = { now: 1_000_000 };
  const transitions: [string, CircuitState, CircuitState][] = [];
  const circuit = new CircuitBreaker(
    { failures, openMs: 10_000, maxOpenMs: 40_000, probeTimeoutMs: 35_000 },
    (id, from, to) => transitions.push([id, from, to]),
    () => clock.now,
  );
  /** One attempt through the breaker: answers whether it was sent. */
  const attempt = (result: AttemptResult, id = 'sub-1') => {
    const gate = circuit.enter(id);
    if (gate.send) circuit.done(id, gate, result);
    return gate;
  };
  return { clock, transitions, circuit, attempt };
}

describe('circuit breaker', () => {
  it('opens after the configured consecutive failures, and defers attempts until the open period ends', () => {
    const { circuit, attempt, clock, transitions } = breaker();
    attempt(TIMEOUT);
    attempt(REFUSED);
    expect(circuit.state('sub-1')).toBe('closed');
    attempt(ERROR_500);
    expect(circuit.state('sub-1')).toBe('open');
    expect(transitions).toEqual([['sub-1', 'closed', 'open']]);
    const gate = circuit.enter('sub-1');
    expect(gate).toMatchObject({ send: false, retryAt: clock.now + 10_000 });
    expect(gate.send === false && gate.reason).toMatch(/^circuit open after repeated failures \(last: HTTP 500\)/);
    // Another subscription is not affected.
    expect(circuit.enter('sub-2')).toMatchObject({ send: true, probe: false });
  });

  it('a success, a 4xx or a 429 between failures resets the count', () => {
    for (const between of [OK, GONE, THROTTLED]) {
      const { circuit, attempt } = breaker();
      attempt(TIMEOUT);
      attempt(TIMEOUT);
      attempt(between);
      attempt(TIMEOUT);
      attempt(TIMEOUT);
      expect(circuit.state('sub-1')).toBe('closed');
      attempt(TIMEOUT);
      expect(circuit.state('sub-1')).toBe('open');
    }
  });

  it('lets one probe through when the open period ends; its success closes the circuit', () => {
    const { circuit, attempt, clock, transitions } = breaker();
    for (let i = 0; i < 3; i += 1) attempt(TIMEOUT);
    clock.now += 9_999;
    expect(circuit.enter('sub-1').send).toBe(false);
    clock.now += 1;
    const probe = circuit.enter('sub-1');
    expect(probe).toMatchObject({ send: true, probe: true });
    expect(circuit.state('sub-1')).toBe('half-open');
    // While the probe is out, the others wait.
    expect(circuit.enter('sub-1')).toMatchObject({ send: false });
    circuit.done('sub-1', probe as { probe: boolean }, OK);
    expect(circuit.state('sub-1')).toBe('closed');
    expect(circuit.enter('sub-1')).toMatchObject({ send: true, probe: false });
    expect(transitions.map(([, , to]) => to)).toEqual(['open', 'half-open', 'closed']);
  });

  it('a failed probe opens it again for twice as long, up to the maximum; a success starts over', () => {
    const { circuit, attempt, clock } = breaker();
    for (let i = 0; i < 3; i += 1) attempt(TIMEOUT);
    const periods: number[] = [];
    for (let round = 0; round < 4; round += 1) {
      const gate = circuit.enter('sub-1');
      expect(gate.send).toBe(false);
      if (gate.send) return;
      periods.push(gate.retryAt - clock.now);
      clock.now = gate.retryAt;
      attempt(REFUSED); // the probe
    }
    expect(periods).toEqual([10_000, 20_000, 40_000, 40_000]);
    clock.now += 40_000;
    attempt(OK);
    for (let i = 0; i < 3; i += 1) attempt(TIMEOUT);
    const gate = circuit.enter('sub-1');
    expect(gate.send === false && gate.retryAt - clock.now).toBe(10_000);
  });

  it('answers to attempts begun before a transition change nothing: twenty hanging requests open it once', () => {
    const { circuit, clock, transitions } = breaker();
    const gates = Array.from({ length: 20 }, () => circuit.enter('sub-1'));
    for (const gate of gates) if (gate.send) circuit.done('sub-1', gate, TIMEOUT);
    expect(transitions).toEqual([['sub-1', 'closed', 'open']]);
    // A late success of an attempt begun while closed does not close the open circuit.
    const late = circuit.enter('sub-2');
    circuit.done('sub-1', { probe: false, generation: 0 }, OK);
    expect(circuit.state('sub-1')).toBe('open');
    expect(late.send).toBe(true);
    clock.now += 10_000;
    const probe = circuit.enter('sub-1');
    expect(probe).toMatchObject({ send: true, probe: true });
  });

  it('a probe that never answers (its dispatcher died) stops blocking after the probe timeout', () => {
    const { circuit, attempt, clock } = breaker();
    for (let i = 0; i < 3; i += 1) attempt(TIMEOUT);
    clock.now += 10_000;
    expect(circuit.enter('sub-1')).toMatchObject({ send: true, probe: true });
    clock.now += 34_999;
    expect(circuit.enter('sub-1').send).toBe(false);
    clock.now += 1;
    expect(circuit.enter('sub-1')).toMatchObject({ send: true, probe: true });
  });

  it('is off with 0 failures', () => {
    const { circuit, attempt } = breaker(0);
    for (let i = 0; i < 50; i += 1) attempt(TIMEOUT);
    expect(circuit.state('sub-1')).toBe('closed');
    expect(circuit.openCount()).toBe(0);
  });

  it('tracks only failing subscriptions, at most maxTracked, dropping closed ones first', () => {
    const clock = { now: 0 };
    const circuit = new CircuitBreaker(
      { failures: 2, openMs: 1_000, maxOpenMs: 1_000, probeTimeoutMs: 1_000, maxTracked: 3 },
      () => {},
      () => clock.now,
    );
    const fail = (id: string) => {
      const gate = circuit.enter(id);
      if (gate.send) circuit.done(id, gate, TIMEOUT);
    };
    fail('open-1');
    fail('open-1');
    fail('a');
    fail('b');
    fail('c'); // makes room by dropping 'a', the oldest closed one
    fail('a'); // its first failure was forgotten: this is its first again
    expect(circuit.state('a')).toBe('closed');
    expect(circuit.state('open-1')).toBe('open');
    expect(circuit.openCount()).toBe(1);
  });

  it('classifies failures: timeouts, connections and 5xx; not 4xx, 429 or a blocked address', () => {
    expect(failureOf(TIMEOUT)).toBe('no answer in time');
    expect(failureOf(REFUSED)).toBe('no connection');
    expect(failureOf({ statusCode: 503, errorMessage: null, durationMs: 1 })).toBe('HTTP 503');
    expect(failureOf(GONE)).toBeUndefined();
    expect(failureOf(THROTTLED)).toBeUndefined();
    expect(failureOf({ statusCode: null, errorMessage: 'blocked address', durationMs: 0 })).toBeUndefined();
  });
});
