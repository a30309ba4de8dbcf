import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ensureServers, type StartedServers } from '../../infra/servers.ts';
import { warmUp } from '../../infra/servers/warm-up.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../.local');
const hasExternal = ['KAFKA_BROKERS', 'CASSANDRA_CONTACT_POINTS', 'SCHEMA_REGISTRY_URL'].every((v) => process.env[v]);

describe('ensureServers', () => {
  let first: StartedServers | undefined;
  afterAll(async () => {
    await first?.stop(); // Stops only what this test started; servers it found running stay up.
  });

  it('takes all three servers from the environment when their variables are set', async () => {
    const keys = ['KAFKA_BROKERS', 'CASSANDRA_CONTACT_POINTS', 'SCHEMA_REGISTRY_URL', 'CASSANDRA_LOCAL_DC'] as const;
    const saved = keys.map((k) => [k, process.env[k]] as const);
    Object.assign(process.env, {
      KAFKA_BROKERS: 'k1:9092,k2:9092',
      CASSANDRA_CONTACT_POINTS: 'c1',
      SCHEMA_REGISTRY_URL: 'http://sr/apis/ccompat/v7',
    });
    delete process.env.CASSANDRA_LOCAL_DC;
    try {
      const servers = await ensureServers({ root: '/nonexistent' });
      expect(servers).toMatchObject({
        kafkaBrokers: ['k1:9092', 'k2:9092'],
        cassandraContactPoints: ['c1'],
        cassandraLocalDc: 'datacenter1',
        schemaRegistryUrl: 'http://sr/apis/ccompat/v7',
      });
      await servers.stop();
    } finally {
      for (const [k, v] of saved) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });

  it('starts or reuses healthy servers, and a second call reuses them quickly', { timeout: 400_000 }, async () => {
    first = await ensureServers({ root });
    if (!hasExternal) expect(first.schemaRegistryUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/apis\/ccompat\/v7$/);

    const t0 = Date.now();
    const second = await ensureServers({ root });
    expect(Date.now() - t0).toBeLessThan(15_000);
    await second.stop(); // Reused everything, so this must leave the servers running.

    const res = await fetch(`${first.schemaRegistryUrl}/subjects/servers-test-value/versions`, {
      method: 'POST',
      headers: { 'content-type': 'application/vnd.schemaregistry.v1+json' },
      body: JSON.stringify({
        schema: JSON.stringify({ type: 'record', name: 'Ping', fields: [{ name: 'at', type: 'long' }] }),
      }),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ id: expect.any(Number) });
  });

  it(
    'warms Kafka and Cassandra up with produces, group fetches, writes, reads and compare-and-sets',
    { timeout: 60_000 },
    async () => {
      const servers = first ?? (await ensureServers({ root }));
      const said: string[] = [];
      // 1 ms: connecting and creating its topic and tables take longer, and each caller still makes one round of
      // every kind of request (with 1.5 s, CI once saw no Cassandra request at all: the setup had taken the time).
      const report = await warmUp(servers, ['kafka', 'cassandra'], 1, (line) => said.push(line));
      expect(report.kafka?.produced).toBeGreaterThan(0);
      expect(report.kafka?.consumed).toBeGreaterThan(0);
      expect(report.cassandra?.requests).toBeGreaterThan(0);
      expect(said.at(-1)).toMatch(
        /^warm-up: kafka [\d,]+ records produced and [\d,]+ consumed, cassandra [\d,]+ requests in [\d.]+ s$/,
      );
    },
  );
});
