import { describe, expect, it } from 'vitest';
import { OffsetTracker } from './kafka.ts';

/** `commit: null` expects no commit; `mayRestate` also tolerates a commit of that (first unfinished) offset. */
type Step = { begin?: string[]; finish?: string[]; commit: string | null; mayRestate?: string };

/** Applies the steps and checks that each `takeCommittable` yields the expected commit, or none. */
function play(initial: string[], steps: Step[]): void {
  const tracker = new OffsetTracker('webhook.deliveries', 3);
  for (const offset of initial) tracker.begin(offset);
  // Before anything finished, a commit may at most restate the first offset handed out: never more.
  for (const entry of tracker.takeCommittable()) expect(BigInt(entry.offset)).toBeLessThanOrEqual(BigInt(initial[0]!));
  for (const [index, step] of steps.entries()) {
    for (const offset of step.begin ?? []) tracker.begin(offset);
    for (const offset of step.finish ?? []) tracker.finish(offset);
    const commits = tracker.takeCommittable();
    const expected = step.commit === null ? [] : [{ topic: 'webhook.deliveries', partition: 3, offset: step.commit }];
    if (step.mayRestate !== undefined && commits.length > 0) {
      expect(commits, `step ${index}`).toEqual([
        { topic: 'webhook.deliveries', partition: 3, offset: step.mayRestate },
      ]);
    } else {
      expect(commits, `step ${index}`).toEqual(expected);
    }
  }
}

describe('OffsetTracker', () => {
  it.each<[string, string[], Step[]]>([
    [
      'in order',
      ['0', '1', '2'],
      [
        { finish: ['0'], commit: '1' },
        { finish: ['1'], commit: '2' },
        { finish: ['2'], commit: '3' },
        { commit: null },
      ],
    ],
    [
      'out of order: only the finished prefix is committed',
      ['10', '11', '12', '13', '14'],
      [
        { finish: ['12', '13'], commit: null },
        { finish: ['11'], commit: null },
        { finish: ['10'], commit: '14' },
        { commit: null },
        { finish: ['14'], commit: '15' },
      ],
    ],
    [
      'in reverse order',
      ['0', '1', '2', '3'],
      [
        { finish: ['3'], commit: null },
        { finish: ['2'], commit: null },
        { finish: ['1'], commit: null },
        { finish: ['0'], commit: '4' },
      ],
    ],
    [
      'a slow head record holds the commit back however many finish behind it',
      ['100', '101', '102', '103', '104', '105'],
      [
        { finish: ['101', '102', '103', '104', '105'], commit: null },
        { begin: ['106', '107'], finish: ['106', '107'], commit: null },
        { finish: ['100'], commit: '108' },
      ],
    ],
    [
      'gaps between offsets (compacted topic, transaction markers)',
      ['5', '8', '9', '15'],
      [
        { finish: ['8'], commit: null },
        { finish: ['5'], commit: '9' },
        { finish: ['15'], commit: null },
        { finish: ['9'], commit: '16' },
      ],
    ],
    [
      'records handed out while earlier ones finish',
      ['0'],
      [
        { finish: ['0'], commit: '1' },
        { begin: ['1', '2'], finish: ['2'], commit: null },
        { finish: ['1'], commit: '3' },
        // 3..6 do not exist (gap): 7 is the first unfinished record, nothing may go past it.
        { begin: ['7'], commit: null, mayRestate: '7' },
        { finish: ['7'], commit: '8' },
      ],
    ],
    [
      'offsets above 2^53 (no float rounding)',
      ['9007199254740993', '9007199254740994'],
      [
        { finish: ['9007199254740993'], commit: '9007199254740994' },
        { finish: ['9007199254740994'], commit: '9007199254740995' },
      ],
    ],
  ])('%s', (_name, initial, steps) => {
    play(initial, steps);
  });

  it('commits nothing when nothing was handed out', () => {
    const tracker = new OffsetTracker('t', 0);
    expect(tracker.takeCommittable()).toEqual([]);
    expect(tracker.takeCommittable()).toEqual([]);
  });

  it('emits each commit once per advance', () => {
    const tracker = new OffsetTracker('t', 1);
    tracker.begin('0');
    tracker.begin('1');
    tracker.takeCommittable();
    tracker.finish('0');
    expect(tracker.takeCommittable()).toEqual([{ topic: 't', partition: 1, offset: '1' }]);
    expect(tracker.takeCommittable()).toEqual([]);
    expect(tracker.takeCommittable()).toEqual([]);
    tracker.finish('1');
    expect(tracker.takeCommittable()).toEqual([{ topic: 't', partition: 1, offset: '2' }]);
    expect(tracker.takeCommittable()).toEqual([]);
  });

  it.each([1, 2, 3, 4, 5, 6, 7, 8])(
    'random finish order (seed %i): commits are monotonic and exactly the prefix',
    (seed) => {
      const random = mulberry32(seed);
      // Offsets with random gaps, finished in a random order.
      const offsets: bigint[] = [];
      let next = BigInt(Math.floor(random() * 1000));
      for (let i = 0; i < 200; i += 1) {
        offsets.push(next);
        next += 1n + (random() < 0.3 ? BigInt(Math.floor(random() * 5)) : 0n);
      }
      const tracker = new OffsetTracker('t', 0);
      for (const offset of offsets) tracker.begin(offset.toString());
      // Restating the first offset before anything finished is allowed, never required: it is the baseline.
      for (const entry of tracker.takeCommittable()) expect(BigInt(entry.offset)).toBe(offsets[0]);
      const order = [...offsets].sort(() => random() - 0.5);
      const finished = new Set<bigint>();
      let last = offsets[0]!;
      for (const offset of order) {
        tracker.finish(offset.toString());
        finished.add(offset);
        const firstOpen = offsets.find((o) => !finished.has(o));
        const expected = firstOpen ?? offsets[offsets.length - 1]! + 1n;
        const commits = tracker.takeCommittable();
        if (expected > last) {
          expect(commits).toEqual([{ topic: 't', partition: 0, offset: expected.toString() }]);
          last = expected;
        } else {
          expect(commits).toEqual([]);
        }
      }
      expect(last).toBe(offsets[offsets.length - 1]! + 1n);
    },
  );
});

/** A small deterministic PRNG so a failing seed can be replayed. */
function mulberry32(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
