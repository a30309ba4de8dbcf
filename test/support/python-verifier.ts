// The official Standard Webhooks library for Python (PyPI `standardwebhooks`), in a venv under .local/ made on first
// use and reused afterwards, behind standardwebhooks_verify.py.
import { execFile, spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { withDirLock } from '../../infra/dir-lock.ts';
import { repoRoot } from '../../infra/processes.ts';

export const PY_STANDARDWEBHOOKS_VERSION = '1.1.0';

const venv = path.join(repoRoot, '.local', 'standardwebhooks-py');
const python = path.join(venv, 'bin', 'python');
const script = path.join(repoRoot, 'test', 'support', 'standardwebhooks_verify.py');
const run = promisify(execFile);

/**
 * Makes the venv at `dir` with the library installed, unless it is there already. Under a lock: on a fresh clone the
 * integration and e2e processes need it at the same moment, and a `venv --clear` of one would pull the other's
 * interpreter from under it.
 */
export async function ensureVenv(dir = venv): Promise<void> {
  // Written only after pip succeeded, so a half-made venv is made again, not reused.
  const marker = path.join(dir, `.installed-${PY_STANDARDWEBHOOKS_VERSION}`);
  const ready = () => existsSync(marker) && existsSync(path.join(dir, 'bin', 'python'));
  if (ready()) return;
  await withDirLock(`${dir}.lock`, async () => {
    if (ready()) return; // made by whoever held the lock before
    await run('python3', ['-m', 'venv', '--clear', dir], { cwd: repoRoot });
    await run(
      path.join(dir, 'bin', 'pip'),
      ['install', '--quiet', `standardwebhooks==${PY_STANDARDWEBHOOKS_VERSION}`],
      {
        cwd: repoRoot,
        maxBuffer: 16 * 1024 * 1024,
      },
    );
    writeFileSync(marker, `standardwebhooks ${PY_STANDARDWEBHOOKS_VERSION}\n`);
  });
}

/** The venv's python, with the library installed (made on first use). */
export async function standardWebhooksPython(): Promise<string> {
  await ensureVenv();
  return python;
}

export interface PythonCase {
  secret: string;
  headers: Record<string, string>;
  body: Buffer;
  /** Verified as this many seconds after now. */
  laterSeconds?: number;
}

/** Each case as the Python library judges it: the envelope's event id, or the library's error. */
export async function verifyWithPython(
  cases: PythonCase[],
): Promise<({ ok: true; eventId: string } | { ok: false; error: string })[]> {
  await ensureVenv();
  const child = spawn(python, [script], { cwd: repoRoot, stdio: ['pipe', 'pipe', 'pipe'] });
  let output = '';
  let errors = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (errors += chunk.toString('utf8')));
  child.stdin.end(JSON.stringify(cases.map((c) => ({ ...c, body: c.body.toString('base64') }))));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`standardwebhooks_verify.py exited ${code}: ${errors}`);
  return JSON.parse(output) as ({ ok: true; eventId: string } | { ok: false; error: string })[];
}
