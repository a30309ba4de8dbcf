import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { loadConfig } from './config.ts';
import { setHeapGrowth } from './heap-growth.ts';

describe("a service's heap growth", () => {
  it("sets V8's heap growing factor, or leaves V8's own for 0", () => {
    const flags: string[] = [];
    setHeapGrowth(300, (flag) => flags.push(flag));
    setHeapGrowth(0, (flag) => flags.push(flag));
    expect(flags).toEqual(['--heap-growing-percent=300']);
  });

  it('is a flag this Node accepts at run time (NODE_OPTIONS refuses it, so the services set it themselves)', () => {
    const percent = loadConfig({}).router.heapGrowthPercent;
    // V8 ignores a flag it does not know, saying so on stderr only: a renamed one would leave the services as before.
    const run = spawnSync(process.execPath, [
      '-e',
      `require('node:v8').setFlagsFromString('--heap-growing-percent=${percent}')`,
    ]);
    expect(run.status).toBe(0);
    expect(run.stderr.toString()).toBe('');
    const refused = spawnSync(process.execPath, ['-e', '0'], {
      env: { ...process.env, NODE_OPTIONS: `--heap-growing-percent=${percent}` },
    });
    expect(refused.stderr.toString()).toContain('is not allowed in NODE_OPTIONS');
  });
});
