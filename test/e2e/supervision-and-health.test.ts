// Health and readiness of the router and the dispatcher (served beside /metrics on METRICS_PORT), and the supervisor of
// `npm start` bringing a dispatcher back after kill -9.
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { repoRoot, superviseService } from '../../infra/processes.ts';
import { deprovision, provision } from '../../infra/provision.ts';
import type { Supervisor } from '../../infra/supervisor.ts';
import { freePort, startServices, testEnv, waitFor } from '../support/harness.ts';

interface Answer {
  status: number;
  type: string | null;
  body: { status?: string; title?: string; detail?: string };
}

async function get(url: string): Promise<Answer> {
  const response = await fetch(url, { signal: AbortSignal.timeout(5_000) });
  return { status: response.status, type: response.headers.get('content-type'), body: await response.json() };
}

/** Polls /ready until it answers 200, keeping every answer on the way. */
async function untilReady(port: number): Promise<Answer[]> {
  const answers: Answer[] = [];
  await waitFor(
    async () => {
      const answer = await get(`http://127.0.0.1:${port}/ready`);
      answers.push(answer);
      return answer.status === 200;
    },
    `/ready on port ${port}`,
    90_000,
  );
  return answers;
}

function expectNotReadyAnswers(answers: Answer[]) {
  for (const answer of answers.slice(0, -1)) {
    expect(answer.status).toBe(503);
    expect(answer.type).toBe('application/problem+json');
    expect(answer.body).toMatchObject({ status: 503, title: 'Not ready' });
    expect(answer.body.detail).toMatch(/^waiting for /);
  }
  expect(answers.at(-1)).toEqual({ status: 200, type: 'application/json', body: { status: 'ready' } });
}

describe('health, readiness and supervision', () => {
  let env: Record<string, string>;
  let stack: Awaited<ReturnType<typeof startServices>> | undefined;
  let supervisor: Supervisor | undefined;

  beforeAll(async () => {
    env = {
      ...testEnv(),
      KAFKA_TOPIC_PREFIX: `${testEnv().KAFKA_TOPIC_PREFIX}health${randomUUID().slice(0, 8)}.`,
      LOG_LEVEL: 'info',
    };
    await provision(loadConfig(env), createLogger('test', 'warn'));
  });

  afterAll(async () => {
    await supervisor?.stop();
    await stack?.stop();
    await deprovision(loadConfig(env), createLogger('test', 'warn'), { keyspace: false });
  });

  it('router and dispatcher answer /health at once and /ready once their consumer has joined its group', async () => {
    const ports = { router: await freePort(), dispatcher: await freePort() };
    stack = await startServices(env, ['router', 'dispatcher'], {
      router: { METRICS_PORT: String(ports.router) },
      dispatcher: { METRICS_PORT: String(ports.dispatcher) },
    });
    for (const port of [ports.router, ports.dispatcher]) {
      const health = await waitFor(() => get(`http://127.0.0.1:${port}/health`), `/health on ${port}`, 60_000);
      expect(health).toEqual({ status: 200, type: 'application/json', body: { status: 'ok' } });
    }
    for (const port of [ports.router, ports.dispatcher]) expectNotReadyAnswers(await untilReady(port));
    const metrics = await fetch(`http://127.0.0.1:${ports.dispatcher}/metrics`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toContain('webhook_records_in_flight');
  });

  it('a supervised dispatcher killed with SIGKILL is restarted and becomes ready again', async () => {
    const port = await freePort();
    const lines: string[] = [];
    supervisor = superviseService(
      'dispatcher',
      'dispatcher/main.ts',
      { ...process.env, ...env, METRICS_PORT: String(port) },
      path.join(repoRoot, '.local', 'logs', 'tests', `supervised-dispatcher-${env.CASSANDRA_KEYSPACE}.log`),
      { report: (line) => lines.push(line), policy: { initialDelayMs: 200 } },
    );
    expectNotReadyAnswers(await untilReady(port));
    const victim = supervisor.current!.pid!;
    process.kill(victim, 'SIGKILL');

    await waitFor(() => lines.length > 0, 'the restart report', 10_000);
    expect(lines[0]).toMatch(
      /^dispatcher exited unexpectedly \(killed by SIGKILL\) after [\d.]+ s; restart 1 in 0.2 s$/,
    );
    const restarted = await waitFor(() => supervisor!.current?.pid, 'a new dispatcher process', 10_000);
    expect(restarted).not.toBe(victim);
    // The new member waits for the group to rebalance around the dead one: /ready says so until it has partitions.
    const answers = await untilReady(port);
    expectNotReadyAnswers(answers);
    expect(answers.some((answer) => answer.body.detail?.includes('consumer group') === true)).toBe(true);
    expect(supervisor.restarts).toBe(1);
  });
});
