import { describe, expect, it } from 'vitest';
import { OriginGate } from './origin-gate.ts';

const ORIGIN = 'https://receiver.example.com';
const tick = () => new Promise((resolve) => setImmediate(resolve));

/** Requests through the gate: which were admitted, and their release functions. */
function requests(gate: OriginGate) {
  const admitted: string[] = [];
  const releases = new Map<string, (() => void)[]>();
  const ask = (key: string, label = key) => {
    void gate.acquire(ORIGIN, key).then((release) => {
      admitted.push(label);
      releases.set(key, [...(releases.get(key) ?? []), release]);
    });
  };
  const release = (key: string) => releases.get(key)!.shift()!();
  return { admitted, ask, release };
}

describe('origin gate', () => {
  it('starts requests at once while a quarter of the bound is free, and the first of any subscription up to it', async () => {
    const gate = new OriginGate(4); // a reserve of 1
    const r = requests(gate);
    for (let i = 1; i <= 4; i += 1) r.ask('slow', `slow-${i}`);
    await tick();
    // One subscription alone gets three of four: the last is kept for a subscription holding none.
    expect(r.admitted).toEqual(['slow-1', 'slow-2', 'slow-3']);
    r.ask('fast', 'fast-1');
    await tick();
    expect(r.admitted.at(-1)).toBe('fast-1');
    expect(gate.open(ORIGIN)).toBe(4);
    expect(gate.open(ORIGIN, 'slow')).toBe(3);
  });

  it('a freed connection goes to a subscription under its fair share before one above it, which waited longer', async () => {
    const gate = new OriginGate(8); // a reserve of 2
    const r = requests(gate);
    for (let i = 1; i <= 7; i += 1) r.ask('slow', `slow-${i}`);
    await tick();
    expect(r.admitted).toHaveLength(6);
    r.ask('busy', 'busy-1');
    r.ask('busy', 'busy-2');
    r.ask('busy', 'busy-3');
    await tick();
    // busy-1 takes the reserve (busy held none); busy-2 and busy-3 wait, behind slow-7.
    expect(r.admitted.slice(6)).toEqual(['busy-1']);
    r.release('slow');
    r.release('slow');
    await tick();
    // Share 4 each: busy (1) is under it, slow (4) is not: busy goes first though slow-7 asked before.
    expect(r.admitted.slice(6)).toEqual(['busy-1', 'busy-2']);
    r.release('slow');
    await tick();
    // Now both are under their share: turns, and slow-7 asked first.
    expect(r.admitted.slice(6)).toEqual(['busy-1', 'busy-2', 'slow-7']);
    r.release('slow');
    await tick();
    expect(r.admitted.slice(6)).toEqual(['busy-1', 'busy-2', 'slow-7', 'busy-3']);
  });

  it('takes turns between subscriptions under their share', async () => {
    const gate = new OriginGate(8);
    const r = requests(gate);
    for (let i = 1; i <= 6; i += 1) r.ask('hanging', `hanging-${i}`);
    await tick();
    for (const key of ['a', 'b', 'c']) for (let i = 1; i <= 2; i += 1) r.ask(key, `${key}-${i}`);
    await tick();
    // The reserve's two connections go to the first requests of a and b; c waits for one to free.
    expect(r.admitted.slice(6)).toEqual(['a-1', 'b-1']);
    for (let i = 0; i < 3; i += 1) r.release('hanging');
    await tick();
    // c holds none: it gets the first freed connection; a and b, holding one, wait while the reserve is not free.
    expect(r.admitted.slice(6)).toEqual(['a-1', 'b-1', 'c-1']);
    r.release('hanging');
    r.release('hanging');
    await tick();
    // Share 2 each (8 / 4): a and b in turn; c's second request after them.
    expect(r.admitted.slice(6)).toEqual(['a-1', 'b-1', 'c-1', 'a-2', 'b-2']);
  });

  it('limits a subscription to its fair share only while its origin is short of connections', async () => {
    const gate = new OriginGate(8); // a reserve of 2: short of connections from 6 open
    const r = requests(gate);
    expect(gate.limitFor('slow')).toBe(Infinity); // never seen
    for (let i = 1; i <= 5; i += 1) r.ask('slow', `slow-${i}`);
    await tick();
    expect(gate.limitFor('slow')).toBe(Infinity); // 5 open: plenty left
    r.ask('slow', 'slow-6');
    r.ask('other', 'other-1');
    r.ask('third', 'third-1');
    await tick();
    // 8 open among three subscriptions: a share of 2 each (8 / 3), whatever each holds now.
    expect(gate.open(ORIGIN)).toBe(8);
    expect([gate.limitFor('slow'), gate.limitFor('other'), gate.limitFor('third')]).toEqual([2, 2, 2]);
    r.release('other');
    r.release('third');
    r.release('slow');
    await tick();
    // 5 open, by one subscription: no limit again; the others, gone from the origin, are not limited either.
    expect([gate.limitFor('slow'), gate.limitFor('other')]).toEqual([Infinity, Infinity]);
  });

  it('forgets an origin once nothing is open or waiting', async () => {
    const gate = new OriginGate(1);
    const release = await gate.acquire(ORIGIN, 'a');
    release();
    expect(gate.open(ORIGIN)).toBe(0);
    const again = await gate.acquire(ORIGIN, 'b');
    expect(gate.open(ORIGIN, 'b')).toBe(1);
    again();
  });
});
