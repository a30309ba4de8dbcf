import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ensureServers, type StartedServers } from '../../infra/servers.ts';
import { connectSchemaAdmin } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import { createKafka } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { endpointsEnv } from '../../infra/servers/util.ts';
import { warmUp } from '../../infra/servers/warm-up.ts';
import { WARM_UP_PIPELINE_KEYSPACE, WARM_UP_PIPELINE_PREFIX } from '../../infra/servers/warm-up-pipeline.ts';

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
    'warms Kafka and Cassandra up with produces, group fetches, writes, reads, compare-and-sets and the delivery path',
    { timeout: 90_000 },
    async () => {
      const servers = first ?? (await ensureServers({ root }));
      const said: string[] = [];
      // 1 ms: connecting and creating its topic and tables take longer, and each caller still makes one round of
      // every kind of request (with 1.5 s, CI once saw no Cassandra request at all: the setup had taken the time).
      const report = await warmUp(servers, ['kafka', 'cassandra'], 1, (line) => said.push(line));
      expect(report.kafka?.produced).toBeGreaterThan(0);
      expect(report.kafka?.consumed).toBeGreaterThan(0);
      expect(report.cassandra?.requests).toBeGreaterThan(0);
      // The services' own path: every event published, directly or by the relay of an order validated through the
      // purchase service's code, went through a router and a dispatcher to both subscriptions of its tenant.
      expect(report.pipeline?.published).toBeGreaterThan(0);
      expect(report.pipeline?.validated).toBeGreaterThan(0);
      expect(report.pipeline?.delivered).toBe((report.pipeline!.published + report.pipeline!.validated) * 2);
      expect(said.at(-1)).toMatch(
        /^warm-up: kafka [\d,]+ records produced and [\d,]+ consumed, cassandra [\d,]+ requests, [\d,]+ deliveries of [\d,]+ events and [\d,]+ validations in [\d.]+ s$/,
      );
      // Nothing of the scratch pipeline is left: its keyspace and its topics are gone.
      const config = loadConfig({
        ...endpointsEnv(servers),
      });
      const db = await connectSchemaAdmin(config);
      try {
        const keyspaces = await db.execute(
          'SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?',
          [WARM_UP_PIPELINE_KEYSPACE],
        );
        expect(keyspaces.rowLength).toBe(0);
      } finally {
        await db.shutdown();
      }
      const admin = createKafka(servers.kafkaBrokers, 'servers-test', createLogger('servers-test', 'error')).admin();
      await admin.connect();
      try {
        expect((await admin.listTopics()).filter((topic) => topic.startsWith(WARM_UP_PIPELINE_PREFIX))).toEqual([]);
      } finally {
        await admin.disconnect();
      }
    },
  );
});
