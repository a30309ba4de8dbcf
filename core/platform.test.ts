import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const platform = path.join(path.dirname(fileURLToPath(import.meta.url)), 'platform.ts');

/** Runs runUntilSignalled in a process of its own whose start takes `startMs`; SIGTERM it once it says it runs. */
function terminatedWhileStarting(startMs: number): Promise<{ code: number | null; output: string }> {
  const program = `
    import { runUntilSignalled } from ${JSON.stringify(platform)};
    const logger = { info() {}, error() {}, fatal() {} };
    runUntilSignalled(logger, async () => {
      await new Promise((resolve) => setTimeout(resolve, ${startMs}));
      console.log('started');
      return async () => console.log('stopped');
    });
    console.log('running');`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', program]);
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString();
    if (output.includes('running') && !child.killed) child.kill('SIGTERM');
  });
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, output })));
}

describe('runUntilSignalled', () => {
  it('stops cleanly on a SIGTERM that comes while the service is still starting', async () => {
    // A dispatcher delivers before its start has resolved (its consumers run first); a SIGTERM then killed it at once
    // (exit code null: the signal's default action), attempts in flight and their offsets not committed.
    const { code, output } = await terminatedWhileStarting(500);
    expect(code).toBe(0);
    expect(output.split('\n').filter(Boolean)).toEqual(['running', 'started', 'stopped']);
    // A process of its own that loads platform.ts and its clients through tsx: about 2 s here, more on a busy machine.
  }, 20_000);
});
