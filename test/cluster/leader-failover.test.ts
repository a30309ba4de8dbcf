// The cluster subset of `npm test` (issue 30): the chaos suite's kafka-leader fault on the local cluster (three brokers,
// three Cassandra nodes; topics of three replicas, two in sync; keyspace of replication factor 3), under a steady load
// of validations through the gateway. The suite reuses the cluster the project started (test/support/cluster-setup.ts),
// or starts one itself when run alone, and stops only what it started.
import { spawn } from 'node:child_process';
import { createWriteStream, readFileSync, rmSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../../infra/processes.ts';
import type { PhaseFigures } from '../chaos/load.ts';

const logs = path.join(repoRoot, '.local', 'logs', 'tests');

/** Runs the chaos suite with `args`; resolves with its exit code once it ended, its output in `log`. */
async function chaos(args: string[], log: string): Promise<number> {
  await mkdir(path.dirname(log), { recursive: true });
  const out = createWriteStream(log);
  const child = spawn('npx', ['tsx', 'test/chaos/chaos.ts', ...args], {
    cwd: repoRoot,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.pipe(out, { end: false });
  child.stderr.pipe(out, { end: false });
  const code = await new Promise<number>((resolve) => child.on('close', (exitCode) => resolve(exitCode ?? 1)));
  await new Promise((resolve) => out.end(resolve));
  return code;
}

describe('the local cluster under a broker failure', () => {
  it('loses no delivery when the broker leading most delivery partitions is killed under load', async () => {
    const json = path.join(logs, `chaos-cluster-${process.pid}.json`);
    const log = path.join(logs, 'chaos-cluster.log');
    rmSync(json, { force: true });
    const code = await chaos(
      [
        '--cluster',
        '--lean',
        '--only',
        'kafka-leader',
        '--rate',
        '10',
        '--seconds',
        '15',
        '--broker-down',
        '10',
        '--json',
        json,
      ],
      log,
    );
    const output = readFileSync(log, 'utf8');
    const tail = output.trimEnd().split('\n').slice(-40).join('\n');
    let report: { rows: { fault: string; figures?: PhaseFigures; note: string }[] };
    try {
      report = JSON.parse(readFileSync(json, 'utf8')) as typeof report;
    } catch {
      throw new Error(`the chaos suite wrote no report (exit code ${code}); last lines of ${log}:\n${tail}`);
    }
    rmSync(json, { force: true });
    const row = report.rows.find((candidate) => candidate.fault === 'kafka-leader');
    const context = `${row?.note ?? 'no kafka-leader row'}\nlast lines of ${log}:\n${tail}`;
    expect(row?.note, context).not.toMatch(/NOT RUN|FAULT FAILED/);
    const figures = row!.figures!;
    // Validations confirmed with a 200 before, during and after the fault: each one reaches both receivers.
    expect(figures.confirmed, context).toBeGreaterThan(100);
    expect(figures.delivered, context).toBe(figures.expected);
    expect(figures.duplicates, context).toBeLessThanOrEqual(Math.ceil(figures.expected * 0.001));
    expect(code, context).toBe(0);
  });
});
