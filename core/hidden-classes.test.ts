import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../infra/processes.ts';

/**
 * The objects made per event and per delivery keep one V8 hidden class (test/support/hidden-class-probe.ts). In Node
 * 20, `{ ...decoded, flag }` gave each delivery record a hidden class of its own: every property read of it in the
 * dispatcher then missed V8's inline caches (a runtime call each), and each record left a map behind in the old space.
 */
describe('hidden classes of the per-delivery objects', () => {
  it('stay the same from one event or delivery to the next, where a field added to some objects only changes them', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--allow-natives-syntax', '--import', 'tsx', path.join(repoRoot, 'test/support/hidden-class-probe.ts')],
      { cwd: repoRoot },
    );
    const { rounds, counts } = JSON.parse(stdout) as { rounds: number; counts: Record<string, number> };
    // A few changes are V8 settling field representations (a null, then a string) in the first objects.
    expect(counts.fromDeliveryMessage).toBeLessThanOrEqual(4);
    expect(counts.storedEvent).toBeLessThanOrEqual(4);
    expect(counts.envelopeFields).toBeLessThanOrEqual(4);
    expect(counts.extendedSometimes).toBeGreaterThan(rounds / 2);
  });
});
