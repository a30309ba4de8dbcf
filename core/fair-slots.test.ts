import { describe, expect, it } from 'vitest';

import { FairSlots } from './fair-slots.ts';

/** Takes a slot for `group`/`lane` and notes, in `order`, the label once it is granted. */
function taker(slots: FairSlots, order: string[]) {
  const releases = new Map<string, () => void>();
  return {
    take: (group: string, lane: string, label = `${group}/${lane}`) => {
      void slots.take(group, lane).then((release) => {
        order.push(label);
        releases.set(label, release);
      });
    },
    release: async (label: string) => {
      const release = releases.get(label);
      expect(release, `${label} holds a slot`).toBeDefined();
      releases.delete(label);
      release!();
      await flush();
    },
    holding: () => [...releases.keys()],
  };
}

const flush = () => new Promise((resolve) => setImmediate(resolve));

describe('FairSlots', () => {
  it('grants at once while slots are free, then holds the next ones until a slot comes back', async () => {
    const slots = new FairSlots(2);
    const order: string[] = [];
    const t = taker(slots, order);
    t.take('a', '1', 'first');
    t.take('a', '1', 'second');
    t.take('a', '1', 'third');
    await flush();
    expect(order).toEqual(['first', 'second']);
    expect([slots.inUse, slots.waiting]).toEqual([2, 1]);
    await t.release('first');
    expect(order).toEqual(['first', 'second', 'third']);
    expect([slots.inUse, slots.waiting]).toEqual([2, 0]);
  });

  it("gives a tenant's first record the next slot, ahead of another tenant's thousand waiting", async () => {
    const slots = new FairSlots(4);
    const order: string[] = [];
    const t = taker(slots, order);
    for (let index = 0; index < 1_000; index += 1) t.take('big', `sub-${index % 10}`, `big-${index}`);
    await flush();
    expect(order).toHaveLength(4);
    t.take('small', 'only', 'small-first');
    await flush();
    await t.release('big-0');
    expect(order.at(-1)).toBe('small-first');
    expect(slots.waiting).toBe(996);
  });

  it('takes the groups in turn, and within a group its lanes in turn, each lane first come first served', async () => {
    const slots = new FairSlots(1);
    const order: string[] = [];
    const t = taker(slots, order);
    t.take('x', 'hold', 'holder');
    await flush();
    for (const label of ['a1-1', 'a1-2', 'a1-3', 'a2-1', 'a2-2']) t.take('a', label.slice(0, 2), label);
    for (const label of ['b1-1', 'b1-2']) t.take('b', label.slice(0, 2), label);
    t.take('c', 'c1', 'c1-1');
    await flush();
    // One slot: each release hands it to the next in turn.
    let holder = 'holder';
    for (let step = 0; step < 8; step += 1) {
      await t.release(holder);
      holder = order.at(-1)!;
    }
    expect(order.slice(1)).toEqual(['a1-1', 'b1-1', 'c1-1', 'a2-1', 'b1-2', 'a1-2', 'a2-2', 'a1-3']);
  });

  it('bounds what one group holds at once, even with slots free; another group takes them', async () => {
    const slots = new FairSlots(10, 3);
    const order: string[] = [];
    const t = taker(slots, order);
    for (let index = 0; index < 8; index += 1) t.take('greedy', 'one', `g${index}`);
    await flush();
    expect(order).toEqual(['g0', 'g1', 'g2']);
    for (let index = 0; index < 4; index += 1) t.take('other', 'one', `o${index}`);
    await flush();
    expect(order.slice(3)).toEqual(['o0', 'o1', 'o2']); // at its bound too
    expect([slots.inUse, slots.waiting]).toEqual([6, 6]);
    await t.release('g1');
    expect(order.at(-1)).toBe('g3');
    await t.release('o0');
    expect(order.at(-1)).toBe('o3');
    expect(slots.inUse).toBe(6);
  });

  it('counts a release once, however often it is called', async () => {
    const slots = new FairSlots(1);
    const order: string[] = [];
    const first = await slots.take('a', '1');
    void slots.take('a', '1').then(() => order.push('second'));
    void slots.take('a', '1').then(() => order.push('third'));
    first();
    first();
    await flush();
    expect(order).toEqual(['second']);
    expect(slots.inUse).toBe(1);
  });

  it.each([1, 2, 3, 4, 5])(
    'random arrivals and releases (seed %i): never over capacity or a group bound, everyone served',
    async (seed) => {
      let state = seed;
      const random = () => {
        state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
        return state / 2_147_483_648;
      };
      const capacity = 7;
      const perGroup = 3;
      const slots = new FairSlots(capacity, perGroup);
      const holders: { group: string; release: () => void }[] = [];
      const perGroupHeld = new Map<string, number>();
      let granted = 0;
      const total = 400;
      for (let index = 0; index < total; index += 1) {
        const group = `t${Math.floor(random() * 5)}`;
        void slots.take(group, `s${Math.floor(random() * 4)}`).then((release) => {
          granted += 1;
          perGroupHeld.set(group, (perGroupHeld.get(group) ?? 0) + 1);
          expect(perGroupHeld.get(group)).toBeLessThanOrEqual(perGroup);
          expect(slots.inUse).toBeLessThanOrEqual(capacity);
          holders.push({ group, release });
        });
        if (random() < 0.5) await flush();
        while (holders.length > 0 && random() < 0.4) {
          const [holder] = holders.splice(Math.floor(random() * holders.length), 1);
          perGroupHeld.set(holder!.group, perGroupHeld.get(holder!.group)! - 1);
          holder!.release();
        }
      }
      while (granted < total) {
        await flush();
        const holder = holders.shift();
        if (!holder) continue;
        perGroupHeld.set(holder.group, perGroupHeld.get(holder.group)! - 1);
        holder.release();
      }
      expect(slots.waiting).toBe(0);
    },
  );
});
