import { describe, expect, it } from 'vitest';
import { Turns } from './turns.ts';

/** Runs `key` once and returns what it was told. */
const told = (turns: Turns, key: string) => turns.run(key, async (afterAnother) => afterAnother);

describe('Turns remembering ended runs', () => {
  it('tells a later run of a key that one ended within the memory, and forgets it once that time has passed', async () => {
    let now = 1_000;
    const turns = new Turns({ entries: 10, ms: 60_000 }, () => now);
    expect(await told(turns, 'a')).toBe(false);
    now += 59_999;
    expect(await told(turns, 'a')).toBe(true);
    // That run ended at 60,999: remembered from then on.
    now += 60_000;
    expect(await told(turns, 'a')).toBe(false);
    expect(await told(turns, 'b')).toBe(false);
  });

  it('keeps the newest entries at most, forgetting the oldest first', async () => {
    let now = 0;
    const turns = new Turns({ entries: 3, ms: 60_000 }, () => now);
    for (const key of ['a', 'b', 'c', 'd']) {
      now += 1;
      await told(turns, key);
    }
    expect(await told(turns, 'a')).toBe(false);
    // 'a' ran again, so 'b' is now the oldest and was forgotten; 'c' and 'd' are still known.
    expect(await told(turns, 'b')).toBe(false);
    expect(await told(turns, 'd')).toBe(true);
  });

  it('remembers a run that failed (a copy after it is a possible repeat too)', async () => {
    const turns = new Turns({ entries: 10, ms: 60_000 });
    await expect(
      turns.run('a', async () => {
        throw new Error('cassandra unavailable');
      }),
    ).rejects.toThrow('cassandra unavailable');
    expect(await told(turns, 'a')).toBe(true);
  });

  it('remembers nothing without a memory', async () => {
    const turns = new Turns();
    await told(turns, 'a');
    expect(await told(turns, 'a')).toBe(false);
  });
});
