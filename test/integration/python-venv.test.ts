// The venv of the official Python library is made on first use, and on a fresh clone the integration and e2e vitest
// processes (which npm test runs side by side) both use it at once: one must not clear the venv the other is making.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../../infra/processes.ts';

const scratch = mkdtempSync(path.join(tmpdir(), 'venv-race-'));
const dir = path.join(scratch, 'standardwebhooks-py');

/** A process of its own that makes (or reuses) the venv at `dir`, as a vitest process does on first use. */
function makeVenv(): Promise<{ code: number | null; errors: string }> {
  const child = spawn(
    'npx',
    [
      'tsx',
      '-e',
      `import('./test/support/python-verifier.ts').then(({ ensureVenv }) => ensureVenv(${JSON.stringify(dir)}))` +
        '.catch((error) => { console.error(error); process.exit(1); });',
    ],
    { cwd: repoRoot, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let errors = '';
  child.stderr.on('data', (chunk: Buffer) => (errors += chunk.toString('utf8')));
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, errors })));
}

describe('the Standard Webhooks Python venv', () => {
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it('is made once when two processes need it at the same time, and both can use it', async () => {
    const results = await Promise.all([makeVenv(), makeVenv(), makeVenv()]);
    expect(results.map((result) => result.code === 0 || result.errors)).toEqual([true, true, true]);
    expect(existsSync(path.join(dir, 'bin', 'python'))).toBe(true);
  }, 180_000);
});
