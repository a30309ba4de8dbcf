// A lock between processes sharing a cache on one machine (the Go-built validators, the Python venv of the tests): a
// directory made atomically, holding its owner's pid.
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * Runs `work` holding the lock `lockDir`. A lock whose owner is gone (killed mid-build) is taken over; a live owner is
 * waited for, however long its work takes. Callers in one process (vitest's workers) wait for each other too.
 */
export async function withDirLock<T>(lockDir: string, work: () => Promise<T>, pollMs = 500): Promise<T> {
  await mkdir(path.dirname(lockDir), { recursive: true });
  for (;;) {
    try {
      await mkdir(lockDir);
      await writeFile(path.join(lockDir, 'pid'), String(process.pid));
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const owner = Number(await readFile(path.join(lockDir, 'pid'), 'utf8').catch(() => 'NaN'));
      // No pid a minute after the lock was made: its maker died between the two steps.
      const orphan = !Number.isInteger(owner) && Date.now() - (await madeAt(lockDir)) > 60_000;
      if (orphan || (Number.isInteger(owner) && owner !== process.pid && !isAlive(owner))) {
        await rm(lockDir, { recursive: true, force: true });
        continue;
      }
      await new Promise((resolve) => setTimeout(resolve, pollMs));
    }
  }
  try {
    return await work();
  } finally {
    await rm(lockDir, { recursive: true, force: true });
  }
}

async function madeAt(lockDir: string): Promise<number> {
  return (await stat(lockDir).catch(() => ({ mtimeMs: Date.now() }))).mtimeMs;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
