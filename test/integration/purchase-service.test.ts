// The purchase service against real Cassandra, Kafka and schema registry: the gateway runs in this process on a free
// port and is called over HTTP; events are read back from the purchase events topic and decoded through the registry.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventTypeEntry } from '../../core/catalogue.ts';
import { connectCassandra, type CassandraClient } from '../../core/cassandra.ts';
import type { Config } from '../../core/config.ts';
import { topicNames } from '../../core/topics.ts';
import { freePort, startIdentityProvider, testEnv, waitFor } from '../support/harness.ts';
import {
  apiClient,
  eventsOf,
  readTopic,
  startPurchaseGateway,
  type Answer,
  type PublishedEvent,
} from '../support/purchase.ts';

type Idp = Awaited<ReturnType<typeof startIdentityProvider>>;
type Reader = Awaited<ReturnType<typeof readTopic<PublishedEvent>>>;

interface Dto {
  id: string;
  reference: string | null;
  status: string;
  supplierName: string;
  currency: string;
  rows: {
    lineNumber: number;
    itemId: string;
    itemCode: string;
    itemName: string;
    description: string | null;
    quantity: string;
    unitPrice: string;
    amount: string;
  }[];
  totalAmount: string;
  amends: string | null;
  createdAt: string;
  validatedAt: string | null;
  cancelledAt: string | null;
}

const ORDERS = '/CorePurchase/REST/PurchaseOrders';

describe('purchase service', () => {
  let idp: Idp;
  let gateway: Awaited<ReturnType<typeof startPurchaseGateway>>;
  let config: Config;
  let events: Reader;
  let db: CassandraClient;
  let base: string;

  let env: Record<string, string>;

  beforeAll(async () => {
    env = { ...testEnv() };
    idp = await startIdentityProvider(env);
    base = `http://127.0.0.1:${await freePort()}`;
    Object.assign(env, { AUTH_URL: idp.url, GATEWAY_BASE_URL: base });
    gateway = await startPurchaseGateway(env);
    config = gateway.config;
    db = await connectCassandra(config);
    events = await readTopic<PublishedEvent>(config, topicNames(config).purchaseEvents);
  });

  afterAll(async () => {
    await events?.stop();
    await gateway?.stop();
    await db?.shutdown();
    await idp?.close();
  });

  /** A fresh tenant with a registered purchase client, so references and data start from nothing. */
  const newTenant = async () => {
    const id = `tenant-${randomBytes(4).toString('hex')}`;
    const token = await idp.token(await idp.client(id, ['purchase']));
    const call = apiClient(base, token);
    const item = async (unitPrice = '2.50', name = 'Bolt') => {
      const answer = await call('POST', '/CorePurchase/REST/Items', {
        code: `C-${randomBytes(3).toString('hex')}`,
        name,
        unitPrice,
      });
      expect(answer.status, answer.text).toBe(201);
      return answer.json<{ id: string }>().id;
    };
    const order = async (rows: unknown[], extra: Record<string, unknown> = {}) => {
      const answer = await call('POST', ORDERS, { supplierName: 'Acme', currency: 'EUR', rows, ...extra });
      expect(answer.status, answer.text).toBe(201);
      return answer.json<Dto>();
    };
    return { id, token, call, item, order };
  };

  /** Outbox rows of an order's partition, straight from Cassandra. */
  const outboxOf = async (tenantId: string, orderId: string) =>
    (
      await db.execute('SELECT outbox_id, event_type, published FROM purchase_orders WHERE tenant_id = ? AND id = ?', [
        tenantId,
        orderId,
      ])
    ).rows
      .filter((row) => row.outbox_id !== null)
      .map((row) => ({ eventId: String(row.outbox_id), eventType: String(row.event_type), published: row.published }));

  /**
   * Waits until the relay is done with every outbox row of these orders (it marks a row published only after Kafka
   * acknowledged it) and the reader has read the topic up to its end: after that, what the reader holds is final.
   */
  const settled = async (tenantId: string, orderIds: string[]) => {
    await waitFor(async () => {
      const rows = (await Promise.all(orderIds.map((id) => outboxOf(tenantId, id)))).flat();
      return rows.every((row) => row.published === true);
    }, 'the relay to publish every outbox row');
    await waitFor(() => events.caughtUp(), 'the reader to reach the end of the topic');
  };

  const expectProblem = (answer: Answer, status: number) => {
    expect(answer.status, answer.text).toBe(status);
    expect(answer.headers.get('content-type')).toContain('application/problem+json');
    expect(answer.json()).toMatchObject({ status });
  };

  describe('event payload', () => {
    it('is byte for byte the GET body, whatever the text and however large the decimals', async () => {
      const tenant = await newTenant();
      const huge = await tenant.item('123456789012345678901234567890.123456789012345678', 'Écrou ½" “inox” \\ 🔩');
      const plain = await tenant.item('0.000000000000000001', 'Tiny\tthing\n');
      const descriptions = [
        'Schraube „Ø 12 mm“ – Größe ½ — 日本語のテキスト — עברית — Ελληνικά',
        'emoji 🚀🔩 👩‍🔧 🇫🇷 and a skin tone 👍🏽',
        `quotes "double" 'single' \`back\` and backslashes \\ C:\\path\\to\\file \\u0041 \\n`,
        'control \u0000\u0001\u0007\b\f\n\r\t\u000b\u001f\u007f\u0085 separators \u2028\u2029 bom \ufeff',
        'lone surrogate \ud800 and reversed pair \udc00\ud800',
        '</script><script>alert(1)</script> & <b>',
      ];
      const rows = [
        ...descriptions.map((description, index) => ({
          itemId: index % 2 === 0 ? huge : plain,
          quantity: '999999999999999999999999999999.999999999999999999',
          description,
        })),
        { itemId: huge, quantity: '0.000000000000000001', description: null },
        { itemId: plain, quantity: 3 },
        { itemId: huge, quantity: '42.50' },
      ];
      const draft = await tenant.order(rows, { supplierName: 'Fournisseur “Ünïcødé” 🏭 \\ "quoted"' });
      expect(draft.rows.map((row) => row.description)).toEqual([...descriptions, null, null, null]);
      // Exact decimal arithmetic: the scale of a product is the sum of the scales, nothing is rounded.
      expect(draft.rows[0]!.amount).toBe(
        '123456789012345678901234567890123456789012345677876543210987.654321098765432109876543210987654322',
      );
      expect(draft.rows[1]!.amount).toBe('999999999999.999999999999999999999999999999999999');
      expect(draft.rows[6]!.amount).toBe('123456789012.345678901234567890123456789012345678');
      expect(draft.rows[7]).toMatchObject({ quantity: '3', amount: '0.000000000000000003' });
      expect(draft.rows[8]).toMatchObject({
        quantity: '42.50',
        amount: '5246913533024691353302469135330.24691353302469131500',
      });

      const validated = await tenant.call('POST', `${ORDERS}/${draft.id}/validate`);
      expect(validated.status, validated.text).toBe(200);
      const afterValidate = await tenant.call('GET', `${ORDERS}/${draft.id}`);
      expect(afterValidate.status).toBe(200);
      expect(afterValidate.headers.get('content-type')).toMatch(/^application\/json/);
      expect(afterValidate.bytes.equals(validated.bytes)).toBe(true);

      const cancelled = await tenant.call('POST', `${ORDERS}/${draft.id}/cancel`);
      expect(cancelled.status, cancelled.text).toBe(200);
      const afterCancel = await tenant.call('GET', `${ORDERS}/${draft.id}`);
      expect(afterCancel.bytes.equals(cancelled.bytes)).toBe(true);

      await settled(tenant.id, [draft.id]);
      const published = eventsOf(events.records, draft.id);
      expect(published.map((event) => event.eventType)).toEqual(['purchaseOrder.validated', 'purchaseOrder.cancelled']);
      const [onValidate, onCancel] = published as [PublishedEvent, PublishedEvent];
      // Byte for byte: the payload is the body GET returned at the moment the event occurred.
      expect(onValidate.payload.equals(afterValidate.bytes)).toBe(true);
      expect(onCancel.payload.equals(afterCancel.bytes)).toBe(true);
      expect(onValidate.payload.toString('utf8')).toBe(afterValidate.text);

      const dto = afterValidate.json<Dto>();
      expect(dto.rows.map((row) => row.description)).toEqual([...descriptions, null, null, null]);
      expect(onValidate).toMatchObject({
        eventType: 'purchaseOrder.validated',
        tenantId: tenant.id,
        entityId: draft.id,
        reference: dto.reference,
        occurredAt: dto.validatedAt,
        resourceUrl: `${ORDERS}/${draft.id}`,
      });
      expect(onCancel).toMatchObject({ reference: dto.reference, occurredAt: afterCancel.json<Dto>().cancelledAt });
      expect(onValidate.eventId).not.toBe(onCancel.eventId);
    });
  });

  describe('concurrency', () => {
    it('20 parallel validations of one order: one 200, nineteen 409, one event', async () => {
      const tenant = await newTenant();
      const draft = await tenant.order([{ itemId: await tenant.item(), quantity: '1' }]);

      const answers = await Promise.all(
        Array.from({ length: 20 }, () => tenant.call('POST', `${ORDERS}/${draft.id}/validate`)),
      );
      const statuses = answers.map((answer) => answer.status).sort();
      expect(statuses).toEqual([200, ...Array<number>(19).fill(409)]);
      for (const answer of answers.filter((entry) => entry.status === 409)) expectProblem(answer, 409);
      const winner = answers.find((answer) => answer.status === 200)!;
      const current = await tenant.call('GET', `${ORDERS}/${draft.id}`);
      expect(current.bytes.equals(winner.bytes)).toBe(true);

      await settled(tenant.id, [draft.id]);
      const published = eventsOf(events.records, draft.id);
      expect(published.map((event) => event.eventType)).toEqual(['purchaseOrder.validated']);
      expect(published[0]!.payload.equals(winner.bytes)).toBe(true);
      expect(await outboxOf(tenant.id, draft.id)).toHaveLength(1);
    });

    it('20 parallel amends of one order in two gateways: one 201, nineteen 409, one amendment', async () => {
      const otherBase = `http://127.0.0.1:${await freePort()}`;
      const other = await startPurchaseGateway({ ...env, GATEWAY_BASE_URL: otherBase, PURCHASE_OUTBOX_RELAY: 'false' });
      try {
        const tenant = await newTenant();
        const elsewhere = apiClient(otherBase, tenant.token);
        const itemId = await tenant.item();
        const order = await tenant.order([{ itemId, quantity: '1' }]);
        expect((await tenant.call('POST', `${ORDERS}/${order.id}/validate`)).status).toBe(200);

        const answers = await Promise.all(
          Array.from({ length: 20 }, (_, index) =>
            (index % 2 === 0 ? tenant.call : elsewhere)('POST', `${ORDERS}/${order.id}/amend`, {
              rows: [{ itemId, quantity: String(index + 1) }],
            }),
          ),
        );
        expect(answers.map((answer) => answer.status).sort()).toEqual([201, ...Array<number>(19).fill(409)]);
        for (const answer of answers.filter((entry) => entry.status === 409)) expectProblem(answer, 409);
        const winner = answers.find((answer) => answer.status === 201)!.json<Dto>();
        expect(winner).toMatchObject({ status: 'Draft', amends: order.id });
        // The losers left no draft amending the order behind.
        const drafts = (
          await db.execute('SELECT id, dto FROM purchase_orders WHERE tenant_id = ? ALLOW FILTERING', [tenant.id])
        ).rows.filter((row) => row.dto !== null && (JSON.parse(String(row.dto)) as Dto).amends === order.id);
        expect(drafts.map((row) => String(row.id))).toEqual([winner.id]);
      } finally {
        await other.stop();
      }
    });

    it('a cancellation racing a validation in another gateway still cancels; the loser of a real conflict gets 409', async () => {
      // A second gateway process (here in-process, without a relay) shares the store: only the compare-and-set on
      // the order's version arbitrates between the two.
      const otherBase = `http://127.0.0.1:${await freePort()}`;
      const other = await startPurchaseGateway({ ...env, GATEWAY_BASE_URL: otherBase, PURCHASE_OUTBOX_RELAY: 'false' });
      try {
        const tenant = await newTenant();
        const elsewhere = apiClient(otherBase, tenant.token);
        const itemId = await tenant.item();
        const drafts = await Promise.all(Array.from({ length: 30 }, () => tenant.order([{ itemId, quantity: '1' }])));
        const outcomes = await Promise.all(
          drafts.map(async (draft) => {
            const [validation, cancellation] = await Promise.all([
              tenant.call('POST', `${ORDERS}/${draft.id}/validate`),
              elsewhere('POST', `${ORDERS}/${draft.id}/cancel`),
            ]);
            return { draft, validation, cancellation };
          }),
        );
        // A validation that lost its race to the cancellation gave its reference back, and the tenant's next
        // validations take those first: with as many more orders as were lost, the references are exactly 1..30.
        const won = outcomes.filter(({ validation }) => validation.status === 200);
        const more = await Promise.all(
          Array.from({ length: outcomes.length - won.length }, () => tenant.order([{ itemId, quantity: '1' }])),
        );
        const after = await Promise.all(more.map((draft) => tenant.call('POST', `${ORDERS}/${draft.id}/validate`)));
        for (const answer of after) expect(answer.status, answer.text).toBe(200);
        expect(
          [...won.map(({ validation }) => validation), ...after].map((answer) => answer.json<Dto>().reference).sort(),
        ).toEqual(outcomes.map((_, index) => `PO-${String(index + 1).padStart(6, '0')}`));
        for (const { draft, validation, cancellation } of outcomes) {
          // Cancel is allowed from Draft and from Validated: whichever came first, the cancellation succeeds.
          expect(cancellation.status, cancellation.text).toBe(200);
          const final = (await tenant.call('GET', `${ORDERS}/${draft.id}`)).json<Dto>();
          expect(final.status).toBe('Cancelled');
          expect(cancellation.json<Dto>()).toEqual(final);
          if (validation.status === 200) {
            expect(final.reference).toBe(validation.json<Dto>().reference);
          } else {
            // The cancellation came first: a cancelled order cannot be validated.
            expectProblem(validation, 409);
            expect(final.reference).toBeNull();
          }
        }
        await settled(
          tenant.id,
          drafts.map((draft) => draft.id),
        );
        for (const { draft, validation } of outcomes) {
          const types = eventsOf(events.records, draft.id).map((event) => event.eventType);
          expect(types).toEqual(
            validation.status === 200
              ? ['purchaseOrder.validated', 'purchaseOrder.cancelled']
              : ['purchaseOrder.cancelled'],
          );
        }
      } finally {
        await other.stop();
      }
    });

    it('200 parallel validations of 200 orders of one tenant: 200 distinct references and 200 events', async () => {
      const tenant = await newTenant();
      const itemId = await tenant.item();
      const drafts = await Promise.all(
        Array.from({ length: 200 }, (_, index) => tenant.order([{ itemId, quantity: String(index + 1) }])),
      );

      const answers = await Promise.all(drafts.map((draft) => tenant.call('POST', `${ORDERS}/${draft.id}/validate`)));
      for (const answer of answers) expect(answer.status, answer.text).toBe(200);
      const references = answers.map((answer) => answer.json<Dto>().reference);
      // Taken from leased blocks, yet contiguous: exactly PO-000001 to PO-000200.
      expect([...references].sort()).toEqual(
        Array.from({ length: 200 }, (_, index) => `PO-${String(index + 1).padStart(6, '0')}`),
      );

      const ids = drafts.map((draft) => draft.id);
      await settled(tenant.id, ids);
      drafts.forEach((draft, index) => {
        const published = eventsOf(events.records, draft.id);
        expect(published.map((event) => event.eventType)).toEqual(['purchaseOrder.validated']);
        expect(published[0]!.payload.equals(answers[index]!.bytes)).toBe(true);
        expect(published[0]!.reference).toBe(references[index]);
      });
    });
  });

  describe('references', () => {
    it('stay contiguous across a gateway stopped gracefully in the middle of a burst', async () => {
      const otherBase = `http://127.0.0.1:${await freePort()}`;
      const other = await startPurchaseGateway({ ...env, GATEWAY_BASE_URL: otherBase, PURCHASE_OUTBOX_RELAY: 'false' });
      const tenant = await newTenant();
      const elsewhere = apiClient(otherBase, tenant.token);
      const itemId = await tenant.item();
      const drafts = await Promise.all(Array.from({ length: 60 }, () => tenant.order([{ itemId, quantity: '1' }])));
      const validate = (call: typeof elsewhere, ids: string[]) =>
        Promise.all(ids.map((id) => call('POST', `${ORDERS}/${id}/validate`)));
      let stopped = false;
      try {
        // The other gateway leases a block larger than this first burst needs (blocks grow while used up quickly)...
        const first = await validate(
          elsewhere,
          drafts.slice(0, 10).map((draft) => draft.id),
        );
        const second = await validate(
          elsewhere,
          drafts.slice(10, 25).map((draft) => draft.id),
        );
        // ...and gives back what it did not use when it stops; this gateway continues right after the last one used.
        await other.stop();
        stopped = true;
        const third = await validate(
          tenant.call,
          drafts.slice(25).map((draft) => draft.id),
        );
        const answers = [...first, ...second, ...third];
        for (const answer of answers) expect(answer.status, answer.text).toBe(200);
        expect(answers.map((answer) => answer.json<Dto>().reference).sort()).toEqual(
          Array.from({ length: 60 }, (_, index) => `PO-${String(index + 1).padStart(6, '0')}`),
        );
      } finally {
        if (!stopped) await other.stop();
      }
    });
  });

  describe('large orders', () => {
    it('accepts an order above 204,800 bytes and raises its event with the full payload', async () => {
      const tenant = await newTenant();
      const itemId = await tenant.item('19.99');
      const rows = Array.from({ length: 5000 }, (_, index) => ({
        itemId,
        quantity: `${index + 1}.5`,
        description: `row ${index + 1} ✓ ${'x'.repeat(100)}`,
      }));
      const draft = await tenant.order(rows);
      expect(draft.rows).toHaveLength(5000);

      const validated = await tenant.call('POST', `${ORDERS}/${draft.id}/validate`);
      expect(validated.status, validated.text.slice(0, 500)).toBe(200);
      expect(validated.bytes.length).toBeGreaterThan(204_800);
      const current = await tenant.call('GET', `${ORDERS}/${draft.id}`);
      expect(current.bytes.equals(validated.bytes)).toBe(true);

      await settled(tenant.id, [draft.id]);
      const published = eventsOf(events.records, draft.id);
      expect(published).toHaveLength(1);
      expect(published[0]!.payload.length).toBe(current.bytes.length);
      expect(published[0]!.payload.equals(current.bytes)).toBe(true);
    });

    it('accepts rows with 2,000-character descriptions', async () => {
      const tenant = await newTenant();
      const itemId = await tenant.item();
      const description = 'é'.repeat(1999) + '🚀'; // 2,000 code points, 4,002 bytes of UTF-8
      const draft = await tenant.order(Array.from({ length: 60 }, () => ({ itemId, quantity: '1', description })));
      const validated = await tenant.call('POST', `${ORDERS}/${draft.id}/validate`);
      expect(validated.status).toBe(200);
      expect(validated.bytes.length).toBeGreaterThan(204_800);
      await settled(tenant.id, [draft.id]);
      expect(eventsOf(events.records, draft.id)[0]!.payload.equals(validated.bytes)).toBe(true);
    });

    it('accepts 3,000 rows of 2,000-character descriptions (6 MB) and raises the event with the full payload', async () => {
      const tenant = await newTenant();
      const itemId = await tenant.item();
      const rows = Array.from({ length: 3000 }, (_, index) => ({
        itemId,
        quantity: '1',
        description: `${index}`.padEnd(2000, '.'),
      }));
      const draft = await tenant.order(rows);
      const validated = await tenant.call('POST', `${ORDERS}/${draft.id}/validate`);
      expect(validated.status, validated.text.slice(0, 500)).toBe(200);
      expect(validated.bytes.length).toBeGreaterThan(6_000_000);
      await settled(tenant.id, [draft.id]);
      expect(eventsOf(events.records, draft.id)[0]!.payload.equals(validated.bytes)).toBe(true);
    });

    it('accepts the full size, 5,000 rows of 2,000-character descriptions, and raises the event byte for byte', async () => {
      const tenant = await newTenant();
      const itemId = await tenant.item();
      // Emoji are two UTF-16 units: stored chunks must never split one. About 20 MB of JSON in all.
      const rows = Array.from({ length: 5000 }, (_, index) => ({
        itemId,
        quantity: '1',
        description: `${index} `.padEnd(1000, 'é').padEnd(1999, 'x') + '🚀',
      }));
      const draft = await tenant.order(rows);
      const get = await tenant.call('GET', `${ORDERS}/${draft.id}`);
      expect(get.status).toBe(200);
      const validated = await tenant.call('POST', `${ORDERS}/${draft.id}/validate`);
      expect(validated.status, validated.text.slice(0, 500)).toBe(200);
      expect(validated.bytes.length).toBeGreaterThan(15_000_000);
      expect(JSON.parse(validated.text).rows).toHaveLength(5000);
      const again = await tenant.call('GET', `${ORDERS}/${draft.id}`);
      expect(again.bytes.equals(validated.bytes)).toBe(true);
      await settled(tenant.id, [draft.id]);
      expect(eventsOf(events.records, draft.id)[0]!.payload.equals(validated.bytes)).toBe(true);
    });

    it('refuses 5,001 rows naming rows, and a 2,001-character description naming the field', async () => {
      const tenant = await newTenant();
      const itemId = await tenant.item();
      const tooMany = await tenant.call('POST', ORDERS, {
        supplierName: 'Acme',
        currency: 'EUR',
        rows: Array.from({ length: 5001 }, () => ({ itemId, quantity: '1' })),
      });
      expectProblem(tooMany, 400);
      expect(tooMany.json<{ errors: { path: string }[] }>().errors.map((error) => error.path)).toEqual(['rows']);

      const tooLong = await tenant.call('POST', ORDERS, {
        supplierName: 'Acme',
        currency: 'EUR',
        rows: [
          { itemId, quantity: '1', description: 'ok' },
          { itemId, quantity: '1', description: 'x'.repeat(2001) },
        ],
      });
      expectProblem(tooLong, 400);
      expect(tooLong.json<{ errors: { path: string }[] }>().errors.map((error) => error.path)).toEqual([
        'rows.1.description',
      ]);
    });
  });

  describe('validation and state machine over HTTP', () => {
    it('pages the items with limit and cursor, each item once; a foreign cursor is a 400', async () => {
      const tenant = await newTenant();
      const ids = new Set(await Promise.all(Array.from({ length: 7 }, () => tenant.item())));
      const seen: string[] = [];
      let cursor: string | null = null;
      do {
        const query: string = cursor ? `?limit=3&cursor=${cursor}` : '?limit=3';
        const page = await tenant.call('GET', `/CorePurchase/REST/Items${query}`);
        const body = page.json<{ items: { id: string }[]; nextCursor: string | null }>();
        expect(body.items.length).toBeLessThanOrEqual(3);
        seen.push(...body.items.map((item) => item.id));
        cursor = body.nextCursor;
      } while (cursor);
      expect(seen.sort()).toEqual([...ids].sort());
      expectProblem(await tenant.call('GET', '/CorePurchase/REST/Items?cursor=AAAA'), 400);
      expectProblem(await tenant.call('GET', '/CorePurchase/REST/Items?limit=501'), 400);
    });

    it('refuses unknown items, bad quantities and unknown currencies, naming the field', async () => {
      const tenant = await newTenant();
      const itemId = await tenant.item();
      const refused = async (rows: unknown[], currency = 'EUR') => {
        const answer = await tenant.call('POST', ORDERS, { supplierName: 'Acme', currency, rows });
        expectProblem(answer, 400);
        return answer.json<{ errors: { path: string }[] }>().errors.map((error) => error.path);
      };
      expect(await refused([{ itemId: 'no-such-item', quantity: '1' }])).toEqual(['rows.0.itemId']);
      const otherTenant = await newTenant();
      expect(await refused([{ itemId: await otherTenant.item(), quantity: '1' }])).toEqual(['rows.0.itemId']);
      for (const quantity of ['0', '0.000', '-1', -2, 0, 'abc', '1e3', '', ' 1', '1.']) {
        expect(await refused([{ itemId, quantity }]), `quantity ${JSON.stringify(quantity)}`).toEqual([
          'rows.0.quantity',
        ]);
      }
      expect(await refused([{ itemId, quantity: '1' }], 'XXZ')).toEqual(['currency']);
      expect(await refused([{ itemId, quantity: '1' }], 'eur')).toEqual(['currency']);
      expect(await refused([])).toEqual(['rows']);
      const items = await tenant.call('GET', '/CorePurchase/REST/Items');
      expect(items.json<{ items: unknown[] }>().items).toHaveLength(1);
    });

    it('validates once, cancels once, and amends a validated order into a new draft validated under its own id', async () => {
      const tenant = await newTenant();
      const itemId = await tenant.item('10');
      const created = await tenant.call('POST', ORDERS, {
        supplierName: 'Acme',
        currency: 'EUR',
        rows: [{ itemId, quantity: '2' }],
      });
      expect(created.status).toBe(201);
      const first = created.json<Dto>();
      expect(first).toMatchObject({ status: 'Draft', reference: null, totalAmount: '20', amends: null });
      expect(new URL(created.headers.get('location')!, `${base}${ORDERS}`).pathname).toBe(`${ORDERS}/${first.id}`);

      const validated = await tenant.call('POST', `${ORDERS}/${first.id}/validate`);
      expect(validated.status).toBe(200);
      expect(validated.json<Dto>()).toMatchObject({ status: 'Validated', reference: 'PO-000001' });
      expectProblem(await tenant.call('POST', `${ORDERS}/${first.id}/validate`), 409);

      const amendedDraft = await tenant.call('POST', `${ORDERS}/${first.id}/amend`);
      expect(amendedDraft.status, amendedDraft.text).toBe(201);
      const amendment = amendedDraft.json<Dto>();
      expect(amendment).toMatchObject({
        status: 'Draft',
        reference: null,
        amends: first.id,
        totalAmount: '20',
        validatedAt: null,
      });
      expect(amendment.id).not.toBe(first.id);
      // The Location header resolves to the new draft.
      const location = new URL(amendedDraft.headers.get('location')!, `${base}${ORDERS}/${first.id}/amend`);
      expect(location.pathname).toBe(`${ORDERS}/${amendment.id}`);
      expect((await tenant.call('GET', location.pathname)).bytes.equals(amendedDraft.bytes)).toBe(true);
      // The original stays validated.
      expect((await tenant.call('GET', `${ORDERS}/${first.id}`)).bytes.equals(validated.bytes)).toBe(true);

      const amendmentValidated = await tenant.call('POST', `${ORDERS}/${amendment.id}/validate`);
      expect(amendmentValidated.status).toBe(200);
      expect(amendmentValidated.json<Dto>()).toMatchObject({ status: 'Validated', reference: 'PO-000002' });

      const second = await tenant.order([{ itemId, quantity: '1' }]);
      const cancelled = await tenant.call('POST', `${ORDERS}/${second.id}/cancel`);
      expect(cancelled.status).toBe(200);
      expect(cancelled.json<Dto>()).toMatchObject({ status: 'Cancelled', reference: null });
      expectProblem(await tenant.call('POST', `${ORDERS}/${second.id}/cancel`), 409);
      expectProblem(await tenant.call('POST', `${ORDERS}/${second.id}/validate`), 409);
      expectProblem(await tenant.call('POST', `${ORDERS}/${second.id}/amend`), 409);
      const third = await tenant.order([{ itemId, quantity: '1' }]);
      expectProblem(await tenant.call('POST', `${ORDERS}/${third.id}/amend`), 409); // only a validated order

      await settled(tenant.id, [first.id, amendment.id, second.id, third.id]);
      const onFirst = eventsOf(events.records, first.id);
      expect(onFirst.map((event) => event.eventType)).toEqual(['purchaseOrder.validated']);
      expect(onFirst[0]!.payload.equals(validated.bytes)).toBe(true);
      const onAmendment = eventsOf(events.records, amendment.id);
      expect(onAmendment).toHaveLength(1);
      expect(onAmendment[0]).toMatchObject({
        eventType: 'purchaseOrder.validated',
        entityId: amendment.id,
        reference: 'PO-000002',
        resourceUrl: `${ORDERS}/${amendment.id}`,
      });
      expect(onAmendment[0]!.payload.equals(amendmentValidated.bytes)).toBe(true);
      expect(eventsOf(events.records, third.id)).toEqual([]);
      const onSecond = eventsOf(events.records, second.id);
      expect(onSecond.map((event) => event.eventType)).toEqual(['purchaseOrder.cancelled']);
      expect(onSecond[0]!.payload.equals(cancelled.bytes)).toBe(true);
    });

    it('amends with a body of the changed fields, validated like a create; one open amendment per order', async () => {
      const tenant = await newTenant();
      const bolt = await tenant.item('10');
      const nut = await tenant.item('3', 'Nut');
      const first = await tenant.order([{ itemId: bolt, quantity: '2' }]);
      const validated = await tenant.call('POST', `${ORDERS}/${first.id}/validate`);
      expect(validated.status).toBe(200);
      const amend = (body?: unknown) => tenant.call('POST', `${ORDERS}/${first.id}/amend`, body);

      // The same validation and problem+json 400s as a create; a refused amend leaves no open amendment behind.
      const refused = async (body: unknown) => {
        const answer = await amend(body);
        expectProblem(answer, 400);
        return answer.json<{ errors: { path: string }[] }>().errors.map((error) => error.path);
      };
      expect(await refused({ rows: [{ itemId: 'no-such-item', quantity: '1' }] })).toEqual(['rows.0.itemId']);
      expect(await refused({ rows: [{ itemId: nut, quantity: '-1' }] })).toEqual(['rows.0.quantity']);
      expect(await refused({ currency: 'XXZ' })).toEqual(['currency']);
      expect(await refused({ currency: 'eur' })).toEqual(['currency']);
      expect(await refused({ rows: [] })).toEqual(['rows']);
      expect(await refused({ supplierName: '' })).toEqual(['supplierName']);
      expectProblem(await amend({ status: 'Validated' }), 400);
      expectProblem(await amend('[1]'), 400);

      const answer = await amend({ supplierName: 'Beta', rows: [{ itemId: nut, quantity: '5', description: 'M8' }] });
      expect(answer.status, answer.text).toBe(201);
      const amendment = answer.json<Dto>();
      expect(amendment).toMatchObject({
        status: 'Draft',
        reference: null,
        amends: first.id,
        supplierName: 'Beta',
        currency: 'EUR', // not in the body: unchanged
        totalAmount: '15',
        rows: [{ lineNumber: 1, itemId: nut, itemName: 'Nut', description: 'M8', quantity: '5', amount: '15' }],
      });
      expect((await tenant.call('GET', `${ORDERS}/${amendment.id}`)).bytes.equals(answer.bytes)).toBe(true);
      expect((await tenant.call('GET', `${ORDERS}/${first.id}`)).bytes.equals(validated.bytes)).toBe(true);

      // While the amendment is a draft, the order cannot be amended again, with or without a body.
      const second = await amend();
      expectProblem(second, 409);
      expect(second.json<{ detail: string }>().detail).toContain(amendment.id);
      expectProblem(await amend({ currency: 'USD' }), 409);

      const amendmentValidated = await tenant.call('POST', `${ORDERS}/${amendment.id}/validate`);
      expect(amendmentValidated.status).toBe(200);
      expect(amendmentValidated.json<Dto>()).toMatchObject({ status: 'Validated', reference: 'PO-000002' });
      // Once the amendment is no longer a draft, the order may be amended again (body optional, as before).
      const again = await amend();
      expect(again.status, again.text).toBe(201);
      expect(again.json<Dto>()).toMatchObject({ amends: first.id, supplierName: 'Acme', totalAmount: '20' });

      await settled(tenant.id, [first.id, amendment.id]);
      const onAmendment = eventsOf(events.records, amendment.id);
      expect(onAmendment.map((event) => event.eventType)).toEqual(['purchaseOrder.validated']);
      expect(onAmendment[0]).toMatchObject({ entityId: amendment.id, reference: 'PO-000002' });
      expect(onAmendment[0]!.payload.equals(amendmentValidated.bytes)).toBe(true);
      expect(eventsOf(events.records, first.id).map((event) => event.eventType)).toEqual(['purchaseOrder.validated']);

      // The OpenAPI document describes the optional body.
      const document = await fetch(`${base}/CorePurchase/openapi.json`).then(
        (response) =>
          response.json() as Promise<{
            paths: Record<string, { post?: { requestBody?: unknown } }>;
            components: { schemas: Record<string, unknown> };
          }>,
      );
      const route = Object.entries(document.paths).find(([path]) => path.endsWith('/amend'))?.[1];
      expect(route?.post?.requestBody).toMatchObject({
        required: false,
        description: expect.stringMatching(/^Optional/),
        content: { 'application/json': { schema: { $ref: '#/components/schemas/PurchaseOrderAmend' } } },
      });
      expect(document.components.schemas.PurchaseOrderAmend).toMatchObject({
        nullable: true,
        properties: { supplierName: {}, currency: {}, rows: {} },
      });
    });

    it("answers 404 for another tenant's order id and changes nothing", async () => {
      const owner = await newTenant();
      const intruder = await newTenant();
      const draft = await owner.order([{ itemId: await owner.item(), quantity: '1' }]);
      const before = await owner.call('GET', `${ORDERS}/${draft.id}`);

      expectProblem(await intruder.call('GET', `${ORDERS}/${draft.id}`), 404);
      for (const action of ['validate', 'cancel', 'amend']) {
        expectProblem(await intruder.call('POST', `${ORDERS}/${draft.id}/${action}`), 404);
      }
      expectProblem(await owner.call('GET', `${ORDERS}/no-such-order`), 404);

      const after = await owner.call('GET', `${ORDERS}/${draft.id}`);
      expect(after.bytes.equals(before.bytes)).toBe(true);
      expect(await outboxOf(owner.id, draft.id)).toEqual([]);
      expect(await outboxOf(intruder.id, draft.id)).toEqual([]);
      // The intruder's validation did not use up a reference either: the owner's first one is PO-000001.
      const validated = await owner.call('POST', `${ORDERS}/${draft.id}/validate`);
      expect(validated.json<Dto>().reference).toBe('PO-000001');
    });
  });

  describe('catalogue', () => {
    it('declares purchaseOrder.validated, .cancelled and .sent at start-up', async () => {
      const catalogue = await readTopic<EventTypeEntry>(config, topicNames(config).eventTypes);
      try {
        const entries = await waitFor(() => {
          const byType = new Map(catalogue.records.map((record) => [record.key, record.value]));
          return byType.size >= 3 ? byType : undefined;
        }, 'the catalogue declarations');
        for (const eventType of ['purchaseOrder.validated', 'purchaseOrder.cancelled', 'purchaseOrder.sent']) {
          const entry = entries.get(eventType);
          expect(entry, eventType).toEqual({
            eventType,
            service: 'purchase',
            description: expect.any(String),
            payloadSchema: expect.any(String),
            example: expect.any(String),
          });
          expect(entry!.description.length).toBeGreaterThan(10);
          // The payload's JSON Schema and an example travel as JSON text.
          expect(JSON.parse(entry!.payloadSchema!)).toMatchObject({ title: 'PurchaseOrder', type: 'object' });
          expect(JSON.parse(entry!.example!)).toMatchObject({ id: expect.any(String), rows: expect.any(Array) });
        }
        expect(entries.get('purchaseOrder.sent')!.description).toMatch(/declared/i);
      } finally {
        await catalogue.stop();
      }
    });
  });
});
