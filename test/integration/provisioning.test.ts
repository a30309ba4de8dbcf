// Provisioning and the operator CLI against real Cassandra, Kafka and schema registry.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../core/config.ts';
import { createLogger } from '../../core/log.ts';
import { topicLayout } from '../../core/topics.ts';
import { runAdmin } from '../../infra/admin.ts';
import { repoRoot } from '../../infra/processes.ts';
import { provision, registerSchemas } from '../../infra/provision.ts';
import { testEnv } from '../support/harness.ts';

const run = promisify(execFile);

describe('provisioning', () => {
  it('is idempotent: a second run applies no migration, creates no topic and keeps schema ids', async () => {
    const config = loadConfig(testEnv());
    const first = await registerSchemas(config);
    const again = await provision(config, createLogger('test', 'warn'));
    expect(again.migrations.applied).toEqual([]);
    expect(again.migrations.alreadyApplied).toEqual(['001-initial.cql', '002-purchase-order-bodies.cql']);
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
      alreadyApplied: ['001-initial.cql', '002-purchase-order-bodies.cql'],
    });
  });
});
