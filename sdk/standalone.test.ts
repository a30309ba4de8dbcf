// The kit works without the rest of the repository: its sources import only Node's standard library and each other,
// and a copy of sdk/ alone compiles with its own tsconfig.json and runs on plain Node.
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { SECRET, deliveryHeaders, envelopeBody, validatedOrder } from './test/fixtures.ts';

const SDK = fileURLToPath(new URL('.', import.meta.url));

/** Every .ts file under `dir`, recursively. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'node_modules' || entry.name === 'dist' ? [] : sources(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/** The module specifiers a file imports or re-exports (static and dynamic). */
function specifiers(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const found = [...text.matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+'([^']+)'/gm)].map((match) => match[1]!);
  found.push(...[...text.matchAll(/\bimport\(\s*'([^']+)'\s*\)/g)].map((match) => match[1]!));
  return found;
}

describe('receiver kit stands alone', () => {
  const temp = mkdtempSync(join(tmpdir(), 'receiver-kit-'));
  afterAll(() => rmSync(temp, { recursive: true, force: true }));

  it('imports nothing outside sdk/ but node: modules (and vitest in tests)', () => {
    const files = sources(SDK);
    expect(files.map((file) => relative(SDK, file))).toEqual(
      expect.arrayContaining(['src/verify.ts', 'src/index.ts', 'examples/receiver.ts']),
    );
    const outside: string[] = [];
    for (const file of files) {
      const isTest = file.endsWith('.test.ts') || file.includes('/sdk/test/');
      for (const specifier of specifiers(file)) {
        if (specifier.startsWith('node:')) continue;
        if (specifier === 'vitest' && isTest) continue;
        const target = specifier.startsWith('.') ? resolve(dirname(file), specifier) : undefined;
        if (target && !relative(SDK, target).startsWith('..')) continue;
        outside.push(`${relative(SDK, file)} imports ${specifier}`);
      }
    }
    expect(outside).toEqual([]);
    // The scan does see imports (guards against a pattern that matches nothing).
    expect(specifiers(join(SDK, 'src', 'verify.ts'))).toContain('node:crypto');
  });

  it('a copy of sdk/ compiles with its own tsconfig and its example receiver runs on plain node', async () => {
    for (const part of ['src', 'examples', 'tsconfig.json', 'package.json']) {
      cpSync(join(SDK, part), join(temp, part), { recursive: true, filter: (path) => !path.endsWith('.test.ts') });
    }
    // The copy has no node_modules: TypeScript and Node's types come from this repository's, as an integrator's would.
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    const types = join(dirname(createRequire(import.meta.url).resolve('@types/node/package.json')), '..');
    const build = spawnSync(process.execPath, [tsc, '-p', join(temp, 'tsconfig.json'), '--typeRoots', types], {
      encoding: 'utf8',
    });
    expect(build.stdout + build.stderr).toBe('');
    expect(build.status).toBe(0);

    const child = spawn(process.execPath, [join(temp, 'dist', 'examples', 'receiver.js')], {
      env: { PATH: process.env.PATH, WEBHOOK_SECRET: SECRET, PORT: '0', HOST: '127.0.0.1' },
    });
    try {
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
      const url = await new Promise<string>((found, failed) => {
        child.stdout.on('data', () => {
          const match = /listening on (http:\/\/\S+)/.exec(output);
          if (match) found(match[1]!);
        });
        child.on('exit', (code) => failed(new Error(`receiver exited with ${code}: ${output}`)));
      });
      const body = envelopeBody(validatedOrder);
      const post = (headers: Record<string, string>) =>
        fetch(url, { method: 'POST', headers, body: Uint8Array.from(body) }).then((response) => response.status);
      expect(await post(deliveryHeaders(body))).toBe(202);
      expect(await post(deliveryHeaders(body, 'wrong-secret-000000000'))).toBe(401);
      // The child logs after it has answered: wait for its lines (polled, up to 2 s).
      const printed = async (pattern: RegExp) => {
        for (let wait = 0; !pattern.test(output) && wait < 100; wait += 1) {
          await new Promise((done) => setTimeout(done, 20));
        }
        expect(output).toMatch(pattern);
      };
      await printed(/order PO-000042 validated: 12\.500 EUR/);
      await printed(/"outcome":"refused","status":401,"code":"invalid_signature"/);
    } finally {
      child.kill();
    }
  }, 30_000); // compiling the copy takes a second or two, several on a busy machine
});
