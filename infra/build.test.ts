import { execFile } from 'node:child_process';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { buildServices } from './build.ts';
import { repoRoot } from './processes.ts';

describe('buildServices (npm run build)', () => {
  // Inside the repository, so the compiled code resolves node_modules as dist/ does.
  const out = path.join(repoRoot, '.local', 'build-test');
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it('compiles the services to JavaScript that runs as is, with what they read at run time beside it', async () => {
    buildServices(() => {}, out);
    for (const service of ['api', 'router', 'dispatcher'])
      expect(existsSync(path.join(out, service, 'main.js'))).toBe(true);
    expect(readdirSync(path.join(out, 'core', 'migrations'))).toEqual(
      readdirSync(path.join(repoRoot, 'core', 'migrations')),
    );
    expect(readdirSync(path.join(out, 'schemas')).sort()).toEqual(readdirSync(path.join(repoRoot, 'schemas')).sort());
    expect(existsSync(path.join(out, 'console', 'index.html'))).toBe(true);
    expect(existsSync(path.join(out, 'core', 'config.test.js'))).toBe(false);
    // The operator CLI loads its whole import graph (config, Cassandra, Kafka, registry) before answering a bad command.
    const run = promisify(execFile)(process.execPath, [path.join(out, 'infra', 'admin.js'), 'frobnicate'], {
      env: { PATH: process.env.PATH, SECRETS_KEY: Buffer.alloc(32, 1).toString('base64') },
    });
    await expect(run).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringContaining('unknown command \\"frobnicate\\"'),
    });
  }, 60_000);
});
