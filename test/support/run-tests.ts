// `npm test` after the static checks: starts (or reuses) the local servers once for every test project, runs
// vitest, stops what it started, and ends with the plain "N passed, N failed" line CI reads.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../../infra/processes.ts';
import { testServers } from './servers.ts';

const started = Date.now();
const args = process.argv.slice(2);
// The deploy project's Go-built validators compile in the background while the servers start and the other projects
// run; the deploy project runs last and waits for them (infra/deploy/validators.ts' lock). The build runs as SCHED_IDLE
// (where chrt exists), so it takes only CPU time nothing else wants: the tests keep the machine as if it were not
// there.
const lowest = existsSync('/usr/bin/chrt') ? ['chrt', '--idle', '0', 'nice', '-n', '19'] : ['nice', '-n', '19'];
const validators =
  args.length === 0 || args.includes('deploy')
    ? spawn(lowest[0]!, [...lowest.slice(1), 'npx', 'tsx', 'infra/deploy/prepare-validators.ts'], {
        cwd: repoRoot,
        stdio: ['ignore', 'pipe', 'pipe'],
      })
    : undefined;
for (const stream of [validators?.stdout, validators?.stderr]) {
  stream?.on('data', (chunk: Buffer) => {
    for (const line of chunk.toString().trimEnd().split('\n')) console.log(`[validators] ${line}`);
  });
}
const servers = await testServers((line) => console.log(`[servers] ${line}`));
// One report per run: two runs at once on one machine must not read (or delete) each other's.
const report = path.join(repoRoot, '.local', `vitest-report-${process.pid}.json`);
rmSync(report, { force: true });
const env = {
  ...process.env,
  KAFKA_BROKERS: servers.kafkaBrokers.join(','),
  CASSANDRA_CONTACT_POINTS: servers.cassandraContactPoints.join(','),
  CASSANDRA_LOCAL_DC: servers.cassandraLocalDc,
  SCHEMA_REGISTRY_URL: servers.schemaRegistryUrl,
};
const vitestArgs = ['vitest', 'run', '--reporter=default', '--reporter=json', `--outputFile.json=${report}`, ...args];
const code = await new Promise<number>((resolve) => {
  const child = spawn('npx', vitestArgs, { cwd: repoRoot, env, stdio: 'inherit' });
  child.on('exit', (exitCode) => resolve(exitCode ?? 1));
});
// Still building only if the deploy project did not run (a filtered run): its cache lock frees with it.
if (validators && validators.exitCode === null) validators.kill();
await servers.stop();
let summary = 'no test report was written';
try {
  const result = JSON.parse(readFileSync(report, 'utf8')) as { numPassedTests: number; numFailedTests: number };
  summary = `${result.numPassedTests} passed, ${result.numFailedTests} failed`;
  if (result.numPassedTests === 0) summary += ' (no test ran)';
} catch {
  // vitest crashed before writing its report: the exit code says it failed
}
rmSync(report, { force: true });
console.log(`\ntest suite took ${((Date.now() - started) / 1000).toFixed(0)} s`);
console.log(summary);
process.exit(code !== 0 || summary.includes('no test') ? code || 1 : 0);
