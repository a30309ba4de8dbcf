// Schemathesis (Python) for the OpenAPI contract test: a venv under .local/ made from PyPI on first use and reused
// afterwards, and a runner that captures the CLI's output so a failed run shows what it found.
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { repoRoot } from '../../infra/processes.ts';
import { PURCHASE_EVENT_TYPES } from '../../producer/catalogue-publisher.ts';

/** Pinned: the checks, flags and summary wording change between releases (v4 reworked the CLI). */
export const SCHEMATHESIS_VERSION = '4.32.5';

const venv = path.join(repoRoot, '.local', 'schemathesis');
const st = path.join(venv, 'bin', 'st');
/** Written only after pip succeeded, so a half-made venv (an interrupted first run) is made again, not reused. */
const marker = path.join(venv, `.installed-${SCHEMATHESIS_VERSION}`);

const run = promisify(execFile);

/** The path of the `st` executable, installing schemathesis into the venv when it is not there yet. */
export async function ensureSchemathesis(): Promise<string> {
  if (existsSync(marker) && existsSync(st)) return st;
  await run('python3', ['-m', 'venv', '--clear', venv], { cwd: repoRoot });
  await run(path.join(venv, 'bin', 'pip'), ['install', '--quiet', `schemathesis==${SCHEMATHESIS_VERSION}`], {
    cwd: repoRoot,
    maxBuffer: 16 * 1024 * 1024,
  });
  writeFileSync(marker, `schemathesis ${SCHEMATHESIS_VERSION}\n`);
  return st;
}

/** What one `st run` did: its exit code and everything it printed (stdout and stderr interleaved). */
export interface SchemathesisRun {
  exitCode: number | null;
  output: string;
}

/** The hooks giving valid requests what no schema can state (a public host, a tenant's item): see the file. */
const HOOKS = path.join(repoRoot, 'test', 'support', 'schemathesis_hooks.py');
/** What the hooks read besides the caller's env: the purchase catalogue's event types, whose payloads their filters fit. */
const HOOKS_ENV = { CONTRACT_PURCHASE_TYPES: PURCHASE_EVENT_TYPES.map((type) => type.eventType).join(',') };

/**
 * Each run starts from nothing: no failure cache and no example database carried over from an earlier run (they would
 * replay old cases first and make runs depend on each other). A request whose request line and headers exceed Node's
 * 16 KiB (a negative case with a 2,001-character cursor of 4-byte characters, percent-encoded) is refused by the HTTP
 * parser with 431 before the API sees it: a refusal like 400, so negative_data_rejection counts it as one. The list
 * is otherwise the check's default one (schemathesis/config/_checks.py).
 */
const CONFIG = `[cache]
enabled = false

[generation]
database = "none"

[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "415", "422", "428", "429", "431", "5xx"]
`;

/**
 * Runs `st run <args>` in a scratch directory and resolves when it exits; never rejects on a non-zero exit (the caller
 * asserts). `env` reaches the hooks (CONTRACT_ITEM_ID).
 */
export async function runSchemathesis(args: string[], env: Record<string, string> = {}): Promise<SchemathesisRun> {
  const executable = await ensureSchemathesis();
  const scratch = mkdtempSync(path.join(tmpdir(), 'schemathesis-'));
  const config = path.join(scratch, 'schemathesis.toml');
  writeFileSync(config, CONFIG);
  try {
    return await new Promise((resolve, reject) => {
      const child = spawn(executable, ['--config-file', config, 'run', ...args], {
        cwd: scratch,
        env: { ...process.env, NO_COLOR: '1', COLUMNS: '160', SCHEMATHESIS_HOOKS: HOOKS, ...HOOKS_ENV, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
      child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
      child.on('error', reject);
      const started = Date.now();
      child.on('close', (exitCode) => {
        // Kept beside the services' test logs: what ran and how long it took, also when the run passed.
        const logs = path.join(repoRoot, '.local', 'logs', 'tests');
        mkdirSync(logs, { recursive: true });
        const name = (args[0] ?? 'run').replace(/^https?:\/\/[^/]+\//, '').replace(/[^\w.-]+/g, '-');
        const took = `st run ${args.join(' ')}\nexit ${exitCode} after ${((Date.now() - started) / 1000).toFixed(1)} s\n\n`;
        writeFileSync(path.join(logs, `schemathesis-${name}.log`), took + output);
        resolve({ exitCode, output });
      });
    });
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** A request body of one operation, as schemathesis would generate it for a valid ("positive") case. */
export interface GeneratedRequest {
  operationId: string;
  body: Record<string, unknown>;
}

/** Python that passes each request of stdin's JSON list through the hooks' before_call, as schemathesis would. */
const APPLY_HOOKS = `
import json, sys
from types import SimpleNamespace as NS
sys.path.insert(0, sys.argv[1])
import schemathesis_hooks
out = []
for request in json.load(sys.stdin):
    case = NS(meta=NS(generation=NS(mode=NS(is_positive=True))), query=None, body=request["body"],
              operation=NS(definition=NS(raw={"operationId": request["operationId"]})))
    schemathesis_hooks.before_call(None, case, {})
    out.append(case.body)
print(json.dumps(out))
`;

/** The bodies the hooks make of `requests` (valid cases), to send them to the API as the contract run would. */
export async function applyHooks(requests: GeneratedRequest[]): Promise<Record<string, unknown>[]> {
  await ensureSchemathesis();
  return new Promise((resolve, reject) => {
    const child = execFile(
      path.join(venv, 'bin', 'python'),
      ['-c', APPLY_HOOKS, path.dirname(HOOKS)],
      { env: { ...process.env, CONTRACT_ITEM_ID: '', ...HOOKS_ENV } },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`the hooks failed: ${stderr || error.message}`));
        else resolve(JSON.parse(stdout) as Record<string, unknown>[]);
      },
    );
    child.stdin?.end(JSON.stringify(requests));
  });
}
