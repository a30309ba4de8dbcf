import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { configureRouterHeap, ROUTER_HEAP_GROWING_PERCENT } from './heap.ts';

describe("the router's heap", () => {
  it("sets V8's heap growing factor at start", () => {
    const flags: string[] = [];
    configureRouterHeap((flag) => flags.push(flag));
    expect(flags).toEqual([`--heap-growing-percent=${ROUTER_HEAP_GROWING_PERCENT}`]);
  });

  it('is a flag this Node accepts at run time (NODE_OPTIONS refuses it, so the router sets it itself)', () => {
    // V8 ignores a flag it does not know, saying so on stderr only: a renamed one would leave the router as before.
    const run = spawnSync(process.execPath, [
      '-e',
      `require('node:v8').setFlagsFromString('--heap-growing-percent=${ROUTER_HEAP_GROWING_PERCENT}')`,
    ]);
    expect(run.status).toBe(0);
    expect(run.stderr.toString()).toBe('');
    const refused = spawnSync(process.execPath, ['-e', '0'], {
      env: { ...process.env, NODE_OPTIONS: `--heap-growing-percent=${ROUTER_HEAP_GROWING_PERCENT}` },
    });
    expect(refused.stderr.toString()).toContain('is not allowed in NODE_OPTIONS');
  });
});
