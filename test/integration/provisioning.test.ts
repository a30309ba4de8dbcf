// Provisioning and the operator CLI against real Cassandra, Kafka and schema registry.
import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { connectCassandra } from '../../core/cassandra.ts';
import { loadConfig, type Config } from '../../core/config.ts';
import { IntegratorStore } from '../../core/integrators/integrator-store.ts';
import { createKafka } from '../../core/kafka.ts';
import { createLogger } from '../../core/log.ts';
import { topicLayout, topicNames } from '../../core/topics.ts';
import { runAdmin } from '../../infra/admin.ts';
import { repoRoot } from '../../infra/processes.ts';
import { provision, registerSchemas } from '../../infra/provision.ts';
import { testEnv } from '../support/harness.ts';

const run = promisify(execFile);
/** Every versioned migration, in the order they apply: all applied by the run's set-up. */
const MIGRATIONS = readdirSync(path.join(repoRoot, 'core', 'migrations'))
  .filter((name) => name.endsWith('.cql'))
  .sort();

describe('provisioning', () => {
  it('is idempotent: a second run applies no migration, creates no topic and keeps schema ids', async () => {
    const config = loadConfig(testEnv());
    const first = await registerSchemas(config);
    const again = await provision(config, createLogger('test', 'warn'));
    expect(again.migrations.applied).toEqual([]);
    expect(again.migrations.alreadyApplied).toEqual(MIGRATIONS);
    expect(MIGRATIONS.slice(0, 2)).toEqual(['001-initial.cql', '002-purchase-order-bodies.cql']);
    expect(again.topics.created).toEqual([]);
    expect(again.topics.unchanged.sort()).toEqual(
      topicLayout(config)
        .map((topic) => topic.name)
        .sort(),
    );
    expect(again.schemas).toEqual(first);
    const subjects = again.schemas.map((entry) => entry.subject);
    expect(subjects).toContain(`${config.kafka.topicPrefix}purchase.events-value`);
    expect(subjects).toContain(`${config.kafka.topicPrefix}webhook.deliveries.retry.4h-value`);
    expect(subjects).toContain(`${config.kafka.topicPrefix}webhook.deliveries.overflow-value`);
  });
});

/** Every topic's configuration entries as the broker describes them (defaults included), by topic name. */
async function describeTopics(config: Config, topics: string[]) {
  const admin = createKafka(config.kafka.brokers, 'provisioning-test', createLogger('test', 'warn')).admin();
  await admin.connect();
  try {
    const { resources } = await admin.describeConfigs({
      includeSynonyms: false,
      resources: topics.map((name) => ({ type: 2, name })), // ConfigResourceTypes.TOPIC
    });
    const metadata = await admin.fetchTopicMetadata({ topics });
    return new Map(
      resources.map((resource) => [
        resource.resourceName,
        {
          config: Object.fromEntries(resource.configEntries.map((entry) => [entry.configName, entry.configValue])),
          /** Names set on the topic itself (source DYNAMIC_TOPIC_CONFIG), not inherited from the broker. */
          overrides: resource.configEntries
            .filter((entry) => entry.configSource === 1)
            .map((entry) => entry.configName),
          replicas: metadata.topics
            .find((topic) => topic.name === resource.resourceName)!
            .partitions.map((partition) => partition.replicas.length),
        },
      ]),
    );
  } finally {
    await admin.disconnect();
  }
}

describe('topic settings (acks=all durability, envelope size)', () => {
  // The largest envelope (a 204,800 B payload, the envelope fields, Avro framing) fits with headroom.
  const MAX_MESSAGE_BYTES = String(2 * 1024 * 1024);

  it.each([
    ['as created by the run setup', false],
    ['after provisioning again (existing topics are altered)', true],
  ])('every topic has min.insync.replicas; delivery and retry topics take 2 MiB records (%s)', async (_name, again) => {
    const config = loadConfig(testEnv());
    if (again) await provision(config, createLogger('test', 'warn'));
    const names = topicNames(config);
    const described = await describeTopics(
      config,
      topicLayout(config).map((topic) => topic.name),
    );
    expect(described.size).toBe(topicLayout(config).length);
    for (const [topic, { config: entries, overrides, replicas }] of described) {
      // Set on the topic: the broker's own default (1 here) would not follow KAFKA_MIN_INSYNC_REPLICAS.
      expect(overrides, topic).toContain('min.insync.replicas');
      expect(entries['min.insync.replicas'], topic).toBe(String(config.kafka.minInsyncReplicas));
      // -1 takes the broker default: 1 on the single local broker.
      for (const count of replicas) expect(count, topic).toBe(1);
    }
    for (const topic of [names.deliveries, ...names.retries.map((retry) => retry.topic)]) {
      expect(described.get(topic)?.config['max.message.bytes'], topic).toBe(MAX_MESSAGE_BYTES);
      expect(described.get(topic)?.config['retention.ms'], topic).toBe(String(7 * 86_400_000));
    }
    expect(described.get(names.eventTypes)?.config['cleanup.policy']).toBe('compact');
  });
});

describe('operator CLI', () => {
  const config = () => loadConfig(testEnv());

  it('creates a client, registers, lists and revokes integrators', async () => {
    const client = (await runAdmin(['clients', 'create', '--tenant', 'acme'], config())) as Record<string, string>;
    expect(client).toEqual({ client_id: expect.any(String), client_secret: expect.any(String), tenant_id: 'acme' });
    const clientId = client.client_id!;
    await runAdmin(
      ['integrators', 'register', '--api', 'webhook', '--client-id', clientId, '--tenant', 'acme'],
      config(),
    );
    const list = (await runAdmin(['integrators', 'list'], config())) as { items: Record<string, string>[] };
    expect(list.items).toContainEqual(
      expect.objectContaining({ api: 'webhook', client_id: clientId, tenant_id: 'acme' }),
    );
    expect(await runAdmin(['integrators', 'revoke', '--api', 'webhook', '--client-id', clientId], config())).toEqual({
      api: 'webhook',
      client_id: clientId,
      revoked: true,
    });
    const after = (await runAdmin(['integrators', 'list'], config())) as { items: Record<string, string>[] };
    expect(after.items.some((item) => item.client_id === clientId)).toBe(false);
  });

  it('registers an integrator read-only with --access read, read-write without it', async () => {
    const reader = `reader-${Date.now()}`;
    const writer = `writer-${Date.now()}`;
    expect(
      await runAdmin(
        ['integrators', 'register', '--api', 'webhook', '--client-id', reader, '--tenant', 'acme', '--access', 'read'],
        config(),
      ),
    ).toEqual({ api: 'webhook', client_id: reader, tenant_id: 'acme', access: 'read', registered: true });
    await runAdmin(
      ['integrators', 'register', '--api', 'webhook', '--client-id', writer, '--tenant', 'acme'],
      config(),
    );
    const list = (await runAdmin(['integrators', 'list'], config())) as { items: Record<string, string>[] };
    expect(list.items).toContainEqual(expect.objectContaining({ client_id: reader, access: 'read' }));
    expect(list.items).toContainEqual(expect.objectContaining({ client_id: writer, access: 'read-write' }));
    await expect(
      runAdmin(
        ['integrators', 'register', '--api', 'webhook', '--client-id', reader, '--tenant', 'acme', '--access', 'admin'],
        config(),
      ),
    ).rejects.toThrow(/--access must be one of read, read-write/);
  });

  it('reads a registration made before access levels (no access column value) as read-write', async () => {
    const db = await connectCassandra(config());
    try {
      const legacy = `legacy-${Date.now()}`;
      // The row as 001-initial.cql's code wrote it: no access.
      await db.execute('INSERT INTO integrators (api, client_id, tenant_id, registered_at) VALUES (?, ?, ?, ?)', [
        'webhook',
        legacy,
        'acme',
        new Date(),
      ]);
      const store = new IntegratorStore(db);
      expect(await store.registrationOf('webhook', legacy)).toEqual({ tenantId: 'acme', access: 'read-write' });
      expect(await store.registrationOf('purchase', legacy)).toBeUndefined();
      await store.register('webhook', legacy, 'acme', 'read');
      expect(await store.registrationOf('webhook', legacy)).toEqual({ tenantId: 'acme', access: 'read' });
    } finally {
      await db.shutdown();
    }
  });

  it('rejects bad usage with a message naming what is wrong', async () => {
    await expect(
      runAdmin(['integrators', 'register', '--api', 'billing', '--client-id', 'x', '--tenant', 't'], config()),
    ).rejects.toThrow(/--api must be one of webhook, purchase/);
    await expect(runAdmin(['clients', 'create'], config())).rejects.toThrow(/--tenant is required/);
    await expect(runAdmin(['frobnicate'], config())).rejects.toThrow(/unknown command/);
  });

  it('prints JSON on stdout when run as `npm run admin`', async () => {
    const { stdout } = await run('npx', ['tsx', 'infra/admin.ts', 'migrate'], {
      cwd: repoRoot,
      env: { ...process.env, ...testEnv() },
    });
    expect(JSON.parse(stdout)).toEqual({
      applied: [],
      alreadyApplied: MIGRATIONS,
    });
  });
});
