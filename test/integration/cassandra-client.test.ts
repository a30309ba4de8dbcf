// The services' Cassandra client against the real node: how its requests reach the socket. On a small machine a
// loopback write costs tens of microseconds whatever it carries, so requests made together must leave together.
import net from 'node:net';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig } from '../../core/config.ts';
import { PurchaseStore } from '../../producer/purchase-store.ts';
import { oneRowDraft } from '../support/drafts.ts';
import { testEnv } from '../support/harness.ts';

describe("the services' Cassandra client", () => {
  let db: CassandraClient;
  const config = loadConfig(testEnv());
  const port = Number(config.cassandra.contactPoints[0]!.split(':')[1] ?? 9042);

  beforeAll(async () => {
    db = await connectCassandra(config);
  });

  afterAll(async () => {
    await db?.shutdown();
  });

  /** Runs `requests` and counts the socket writes this process makes to Cassandra meanwhile. */
  const writesDuring = async (requests: () => Promise<unknown>) => {
    const write = vi.spyOn(net.Socket.prototype, 'write');
    try {
      await requests();
      return write.mock.contexts.filter((socket) => (socket as net.Socket).remotePort === port).length;
    } finally {
      write.mockRestore();
    }
  };

  it("sends a validation's read of the order and its outbox pointer in one socket write", async () => {
    const store = new PurchaseStore(db);
    const tenantId = `client-${randomBytes(4).toString('hex')}`;
    const order = oneRowDraft(randomBytes(8).toString('hex'));
    await store.createOrder(tenantId, order);
    await store.getOrder(tenantId, order.id); // both statements prepared beforehand: a preparation is a request too
    await store.writePointer(tenantId, order.id).written;

    // As applyTransition makes them (producer/purchase-routes.ts): the pointer, then the read, in one turn.
    const writes = await writesDuring(async () => {
      const pointer = store.writePointer(tenantId, order.id);
      const [read] = await Promise.all([store.getOrder(tenantId, order.id), pointer.written]);
      expect(read?.version).toBe(1);
    });
    expect(writes).toBe(1);
  });

  it('sends twenty reads made in one turn in one socket write', async () => {
    await db.execute('SELECT release_version FROM system.local');
    const writes = await writesDuring(() =>
      Promise.all(Array.from({ length: 20 }, () => db.execute('SELECT release_version FROM system.local'))),
    );
    expect(writes).toBe(1);
  });
});
