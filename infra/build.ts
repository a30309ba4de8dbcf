import { execFileSync } from 'node:child_process';
import { cpSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { repoRoot } from './processes.ts';

/** What the compiled services read from beside their code at run time, by path relative to the repository. */
const ASSETS = ['core/migrations', 'schemas', 'console'];

/**
 * `npm run build`: compiles the services to dist/ (tsc with tsconfig.build.json, so `node dist/<service>/main.js` runs
 * as is) and copies beside them what they read at run time (CQL migrations, Avro schemas, the console's files). A
 * fresh dist/ each time, so no file of a deleted source lingers. The Dockerfile and `npm run bench` use it.
 */
export function buildServices(log: (line: string) => void = () => {}, dist = path.join(repoRoot, 'dist')): void {
  rmSync(dist, { recursive: true, force: true });
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  execFileSync(process.execPath, [tsc, '-p', path.join(repoRoot, 'tsconfig.build.json'), '--outDir', dist], {
    cwd: repoRoot,
    stdio: 'inherit',
  });
  for (const asset of ASSETS) cpSync(path.join(repoRoot, asset), path.join(dist, asset), { recursive: true });
  log(`built ${path.relative(repoRoot, dist)}/ (the services, ${ASSETS.join(', ')})`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  buildServices((line) => console.log(line));
}
