// The purchase outbox across kill -9 of the gateway: a state change committed by a gateway that does not publish
// (PURCHASE_OUTBOX_RELAY=false) is published, exactly as committed, by the next gateway; and a gateway killed in the
// middle of a burst of validations loses none of the events of the state changes it committed.
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import { loadConfig, type Config } from '../../core/config.ts';
import { topicNames } from '../../core/topics.ts';
import { freePort, startIdentityProvider, startServices, testEnv, waitFor } from '../support/harness.ts';
import { apiClient, eventsOf, readTopic, type PublishedEvent } from '../support/purchase.ts';

type Idp = Awaited<ReturnType<typeof startIdentityProvider>>;
type Stack = Awaited<ReturnType<typeof startServices>>;

const ORDERS = '/CorePurchase/REST/PurchaseOrders';
/** The gateway's relay sweeps every 100 ms; ten sweeps is the window in which a running relay would have published. */
const RELAY_WINDOW_MS = 1_000;

describe('purchase outbox across a gateway crash', () => {
  let idp: Idp;
  let env: Record<string, string>;
  let config: Config;
  let db: CassandraClient;
  let events: Awaited<ReturnType<typeof readTopic<PublishedEvent>>>;
  const stacks: Stack[] = [];

  beforeAll(async () => {
    env = { ...testEnv() };
    idp = await startIdentityProvider(env);
    Object.assign(env, { AUTH_URL: idp.url, GATEWAY_BASE_URL: `http://127.0.0.1:${await freePort()}` });
    config = loadConfig(env);
    db = await connectCassandra(config);
    events = await readTopic<PublishedEvent>(config, topicNames(config).purchaseEvents);
  });

  afterEach(async () => {
    await Promise.all(stacks.splice(0).map((stack) => stack.stop()));
  });

  afterAll(async () => {
    await events?.stop();
    await db?.shutdown();
    await idp?.close();
  });

  const gateway = async (relay: boolean) => {
    const stack = await startServices({ ...env, PURCHASE_OUTBOX_RELAY: String(relay) }, ['gateway']);
    stacks.push(stack);
    return stack;
  };

  const kill = async (stack: Stack) => {
    const [service] = stack.services;
    service!.child.kill('SIGKILL');
    expect(await service!.exited).toBeNull(); // killed by the signal, no exit code
  };

  const tenant = async () => {
    const id = `tenant-${randomBytes(4).toString('hex')}`;
    const call = apiClient(env.GATEWAY_BASE_URL!, await idp.token(await idp.client(id, ['purchase'])));
    return { id, call };
  };

  const outboxOf = async (tenantId: string, orderId: string) =>
    (
      await db.execute(
        'SELECT outbox_id, event_type, payload, published FROM purchase_orders WHERE tenant_id = ? AND id = ?',
        [tenantId, orderId],
      )
    ).rows
      .filter((row) => row.outbox_id !== null)
      .map((row) => ({
        eventId: String(row.outbox_id),
        eventType: String(row.event_type),
        payload: String(row.payload),
        published: row.published as boolean,
      }));

  it('publishes, after a restart with the relay on, the event a gateway without relay committed before kill -9', async () => {
    const first = await gateway(false);
    const { id: tenantId, call } = await tenant();
    const item = await call('POST', '/CorePurchase/REST/Items', {
      code: 'B-1',
      name: 'Bolt “M8” 🔩',
      unitPrice: '0.10',
    });
    const draft = await call('POST', ORDERS, {
      supplierName: 'Acme',
      currency: 'EUR',
      rows: [{ itemId: item.json<{ id: string }>().id, quantity: '12', description: 'crash \\ "test" ✓' }],
    });
    const orderId = draft.json<{ id: string }>().id;

    const validated = await call('POST', `${ORDERS}/${orderId}/validate`);
    expect(validated.status, validated.text).toBe(200);
    const committedAt = Date.now();
    // The state change and its outbox row are stored...
    expect((await call('GET', `${ORDERS}/${orderId}`)).bytes.equals(validated.bytes)).toBe(true);
    const [committed, ...others] = await outboxOf(tenantId, orderId);
    expect(others).toEqual([]);
    expect(committed).toEqual({
      eventId: expect.any(String),
      eventType: 'purchaseOrder.validated',
      payload: validated.text,
      published: false,
    });
    // ...and not published: a negative is only observable over a window, here the time in which a running relay
    // would have published it several times over, with the reader caught up with the topic.
    await waitFor(
      async () => Date.now() >= committedAt + RELAY_WINDOW_MS && (await events.caughtUp()),
      'the relay window to pass with the reader at the end of the topic',
    );
    expect(eventsOf(events.records, orderId)).toEqual([]);
    expect((await outboxOf(tenantId, orderId))[0]!.published).toBe(false);

    await kill(first);
    await gateway(true);

    const published = await waitFor(() => {
      const found = eventsOf(events.records, orderId);
      return found.length > 0 ? found : undefined;
    }, 'the committed event to be published by the restarted gateway');
    // At least once, and every copy is the event as committed: same eventId, the GET body byte for byte.
    for (const event of published) {
      expect(event).toMatchObject({
        eventId: committed!.eventId,
        eventType: 'purchaseOrder.validated',
        tenantId,
        entityId: orderId,
        reference: validated.json<{ reference: string }>().reference,
      });
      expect(event.payload.equals(validated.bytes)).toBe(true);
    }
    await waitFor(async () => (await outboxOf(tenantId, orderId))[0]!.published, 'the row to be marked published');
  });

  it('loses no event of the validations a gateway committed before it was killed in the middle of a burst', async () => {
    const first = await gateway(true);
    const { id: tenantId, call } = await tenant();
    const item = await call('POST', '/CorePurchase/REST/Items', { code: 'B-2', name: 'Nut', unitPrice: '1.5' });
    const itemId = item.json<{ id: string }>().id;
    const orderIds = await Promise.all(
      Array.from({ length: 100 }, async (_, index) => {
        const draft = await call('POST', ORDERS, {
          supplierName: 'Acme',
          currency: 'EUR',
          rows: [{ itemId, quantity: String(index + 1) }],
        });
        return draft.json<{ id: string }>().id;
      }),
    );

    // Kill the gateway once a quarter of the validations have been answered; the rest may or may not commit.
    let answered = 0;
    let killing: Promise<void> | undefined;
    const outcomes = await Promise.all(
      orderIds.map((orderId) =>
        call('POST', `${ORDERS}/${orderId}/validate`).then(
          (answer) => {
            answered += 1;
            if (answered === 25) killing = kill(first);
            return answer;
          },
          () => undefined, // the connection died with the gateway
        ),
      ),
    );
    await killing;
    const acknowledged = outcomes.filter((answer) => answer?.status === 200);
    expect(acknowledged.length).toBeGreaterThanOrEqual(25);

    await gateway(true);
    // Every order now Validated (answered or not) has its event, and its payload is the GET body.
    const validatedBodies = new Map<string, Buffer>();
    for (const orderId of orderIds) {
      const current = await call('GET', `${ORDERS}/${orderId}`);
      if (current.json<{ status: string }>().status === 'Validated') validatedBodies.set(orderId, current.bytes);
    }
    for (const answer of acknowledged) {
      const { id } = answer!.json<{ id: string }>();
      expect(validatedBodies.get(id)?.equals(answer!.bytes), `order ${id}`).toBe(true);
    }
    await waitFor(
      () => [...validatedBodies.keys()].every((orderId) => eventsOf(events.records, orderId).length > 0),
      'an event for every validated order',
    );
    for (const [orderId, body] of validatedBodies) {
      const published = eventsOf(events.records, orderId);
      expect(new Set(published.map((event) => event.eventId)).size, `order ${orderId}`).toBe(1);
      for (const event of published) expect(event.payload.equals(body), `order ${orderId}`).toBe(true);
    }
    // And no event for an order that stayed a draft.
    for (const orderId of orderIds.filter((id) => !validatedBodies.has(id))) {
      expect(await outboxOf(tenantId, orderId)).toEqual([]);
      expect(eventsOf(events.records, orderId)).toEqual([]);
    }
  });
});
