// `npm test` after the static checks: starts (or reuses) the local servers once for every test project, runs
// vitest, stops what it started, and ends with the plain "N passed, N failed" line CI reads.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
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
// Vitest runs the projects of one sequence group in one pool with one worker count, so the integration and e2e
// projects (a file at a time each, fileParallelism: false) would take turns. A whole run is two vitest processes at
// once instead: unit, then integration, then deploy; and e2e beside them; then, alone, the cluster project (which
// starts its own servers). A filtered run is one process.
const runs =
  args.length === 0
    ? [
        ['--project', 'unit', '--project', 'integration', '--project', 'deploy', '--project', 'image'],
        ['--project', 'e2e'],
      ]
    : [args];
const env = {
  ...process.env,
  KAFKA_BROKERS: servers.kafkaBrokers.join(','),
  CASSANDRA_CONTACT_POINTS: servers.cassandraContactPoints.join(','),
  CASSANDRA_LOCAL_DC: servers.cassandraLocalDc,
  SCHEMA_REGISTRY_URL: servers.schemaRegistryUrl,
  // Piped (a line at a time, so two runs never split each other's lines), still in colour on a terminal.
  ...(runs.length > 1 && process.stdout.isTTY ? { FORCE_COLOR: '1' } : {}),
};
// One report per run: two runs at once on one machine must not read (or delete) each other's.
const reports: string[] = [];
const vitest = (runArgs: string[], piped: boolean): Promise<number> => {
  const report = path.join(repoRoot, '.local', `vitest-report-${process.pid}-${reports.length}.json`);
  reports.push(report);
  rmSync(report, { force: true });
  const vitestArgs = [
    'vitest',
    'run',
    '--reporter=default',
    '--reporter=json',
    `--outputFile.json=${report}`,
    ...runArgs,
  ];
  const child = spawn('npx', vitestArgs, { cwd: repoRoot, env, stdio: piped ? ['ignore', 'pipe', 'pipe'] : 'inherit' });
  for (const [stream, out] of [
    [child.stdout, process.stdout],
    [child.stderr, process.stderr],
  ] as const) {
    if (stream) createInterface({ input: stream, crlfDelay: Infinity }).on('line', (line) => out.write(`${line}\n`));
  }
  return new Promise<number>((resolve) => child.on('close', (exitCode) => resolve(exitCode ?? 1)));
};
const codes = await Promise.all(runs.map((runArgs) => vitest(runArgs, runs.length > 1)));
// Still building only if the deploy project did not run (a filtered run): its cache lock frees with it.
if (validators && validators.exitCode === null) validators.kill();
await servers.stop();
// The cluster project last, alone: its seven JVMs start once the single-node servers have stopped.
if (args.length === 0) codes.push(await vitest(['--project', 'cluster'], false));
const code = codes.find((exitCode) => exitCode !== 0) ?? 0;
let summary = 'no test report was written';
const failures: string[] = [];
try {
  const results = reports.map((report) => JSON.parse(readFileSync(report, 'utf8')) as VitestReport);
  const passed = results.reduce((sum, result) => sum + result.numPassedTests, 0);
  const failed = results.reduce((sum, result) => sum + result.numFailedTests, 0);
  failures.push(...results.flatMap(failuresOf));
  summary = `${passed} passed, ${failed} failed`;
  if (passed === 0) summary += ' (no test ran)';
  else if (code !== 0 && failed === 0) summary += ` (vitest exited with ${code}: an error outside the tests, above)`;
} catch {
  // a vitest process crashed before writing its report: its exit code says it failed
}
for (const report of reports) rmSync(report, { force: true });
console.log(`\ntest suite took ${((Date.now() - started) / 1000).toFixed(0)} s`);
// What failed, again at the end: a CI log is often read from its tail, far below the failure's own report.
if (failures.length > 0) console.log(`\nwhat failed:\n${failures.join('\n')}`);
console.log(summary);
process.exit(code !== 0 || summary.includes('no test') ? code || 1 : 0);

/** The parts of vitest's JSON report read here. */
interface VitestReport {
  numPassedTests: number;
  numFailedTests: number;
  testResults: {
    name: string;
    status: string;
    message?: string;
    assertionResults: { fullName: string; status: string; failureMessages: string[] }[];
  }[];
}

/** A line per failed test (file, name, the first line of its error), and per file that failed outside its tests. */
function failuresOf(report: VitestReport): string[] {
  const firstLine = (text: string | undefined) => (text ?? '').trim().split('\n')[0]!.slice(0, 300);
  return report.testResults.flatMap((file) => {
    const where = path.relative(repoRoot, file.name);
    const tests = file.assertionResults
      .filter((test) => test.status === 'failed')
      .map((test) => `  ${where} > ${test.fullName}: ${firstLine(test.failureMessages[0])}`);
    // A failing beforeAll leaves its tests skipped, not failed, and its error only in the log above.
    const skipped = file.assertionResults.filter((test) => test.status === 'skipped').length;
    if (file.status === 'failed' && skipped > 0) tests.push(`  ${where}: ${skipped} tests not run (a hook failed?)`);
    if (file.status === 'failed' && tests.length === 0) {
      tests.push(`  ${where}: ${firstLine(file.message) || 'failed outside its tests (see above)'}`);
    }
    return tests;
  });
}
