import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { withDirLock } from './dir-lock.ts';

describe('withDirLock', () => {
  const scratch = mkdtempSync(path.join(tmpdir(), 'dir-lock-'));
  const lock = path.join(scratch, 'cache', '.lock');
  afterEach(() => rmSync(lock, { recursive: true, force: true }));

  it('runs one holder at a time, and lets the next in once the first is done', async () => {
    const events: string[] = [];
    const holder = (name: string) =>
      withDirLock(
        lock,
        async () => {
          events.push(`${name} in`);
          await new Promise((resolve) => setTimeout(resolve, 30));
          events.push(`${name} out`);
          return name;
        },
        5,
      );
    expect(await Promise.all([holder('a'), holder('b'), holder('c')])).toEqual(['a', 'b', 'c']);
    for (let at = 0; at < events.length; at += 2) {
      expect(events[at + 1]).toBe(events[at]!.replace(' in', ' out'));
    }
  });

  it('releases the lock when the work fails', async () => {
    await expect(withDirLock(lock, () => Promise.reject(new Error('build failed')), 5)).rejects.toThrow('build failed');
    await expect(withDirLock(lock, async () => 'next', 5)).resolves.toBe('next');
  });

  it('takes over a lock whose owner is gone', async () => {
    mkdirSync(lock, { recursive: true });
    writeFileSync(path.join(lock, 'pid'), '2147483646'); // no such process
    await expect(withDirLock(lock, async () => 'taken', 5)).resolves.toBe('taken');
  });
});
