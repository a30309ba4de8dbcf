// The short subset of the chaos suite (`npm run chaos`, test/chaos/chaos.ts) that runs in `npm test`: kill -9 of the
// router and of the gateway amid validations at a steady rate, each restarted by its supervisor. The suite runs as a
// process, on its own keyspace and topic prefix, exactly as an operator runs it; the faults on the shared servers
// (broker kill, Cassandra freeze, registry down) would disturb the other tests and run only in `npm run chaos`.
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../../infra/processes.ts';
import { testEnv } from '../support/harness.ts';

interface Row {
  fault: string;
  note: string;
  figures?: { confirmed: number; expected: number; delivered: number; duplicates: number; recoveryMs?: number };
}

describe('chaos suite, short subset', () => {
  it('loses no delivery when the router or the gateway is killed with SIGKILL under load', async () => {
    const work = await mkdtemp(path.join(tmpdir(), 'chaos-'));
    const json = path.join(work, 'rows.json');
    const env = testEnv();
    const output: string[] = [];
    const code = await new Promise<number | null>((resolve) => {
      const child = spawn(
        process.execPath,
        [
          '--import',
          'tsx',
          'test/chaos/chaos.ts',
          '--only',
          'router,gateway',
          '--seconds',
          '10',
          '--rate',
          '20',
        ].concat(['--json', json]),
        {
          cwd: repoRoot,
          env: {
            ...process.env,
            KAFKA_BROKERS: env.KAFKA_BROKERS,
            CASSANDRA_CONTACT_POINTS: env.CASSANDRA_CONTACT_POINTS,
            CASSANDRA_LOCAL_DC: env.CASSANDRA_LOCAL_DC,
            SCHEMA_REGISTRY_URL: env.SCHEMA_REGISTRY_URL,
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      child.stdout.on('data', (chunk: Buffer) => output.push(chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => output.push(chunk.toString()));
      child.on('exit', resolve);
    });
    const printed = output.join('');
    console.log(printed.slice(printed.indexOf('## Chaos suite')));
    expect(code, printed).toBe(0);
    const { rows } = JSON.parse(await readFile(json, 'utf8')) as { rows: Row[] };
    await rm(work, { recursive: true, force: true });

    expect(rows.map((row) => row.fault)).toEqual(['router', 'gateway']);
    for (const row of rows) {
      const figures = row.figures!;
      // 20 validations/s for at least 20 s, each to two subscriptions; validations answered 200 all arrive.
      expect(figures.confirmed, row.fault).toBeGreaterThan(200);
      expect(figures.expected).toBe(figures.confirmed * 2);
      expect(figures.delivered, `${row.fault}: ${row.note}`).toBe(figures.expected);
      // A restarted router re-reads at most the events in flight when it died; what was delivered is not sent again.
      expect(figures.duplicates, row.fault).toBeLessThanOrEqual(Math.ceil(figures.expected * 0.01));
      expect(figures.recoveryMs, `${row.fault} recovered`).toBeDefined();
      expect(row.note).toMatch(/restarted by its supervisor/);
    }
  }, 360_000);
});
