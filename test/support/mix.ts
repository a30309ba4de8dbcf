// The isolation mix (issue 27): tenants whose fast subscriptions share the pipeline with endpoints that are slow,
// failing or hanging, as a high-volume platform's always are. Receivers are real HTTP servers on 127.0.0.1, one per
// endpoint kind; subscriptions are saved in the store; events go onto the purchase topic at a steady pace. Used by the
// isolation e2e test (shortened) and by `npm run bench -- --mix`. No vitest here: the bench runs outside it.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { connectCassandra } from '../../core/cassandra.ts';
import { loadConfig, requireSecrets } from '../../core/config.ts';
import { deliveryIdFor } from '../../core/ids.ts';
import { SubscriptionStore } from '../../core/subscriptions/subscription-store.ts';
import { blankSubscription } from '../../core/subscriptions/subscription.ts';
import { eventPublisher } from './events.ts';

export const KINDS = ['fast', 'slow', 'failing', 'hanging'] as const;
export type EndpointKind = (typeof KINDS)[number];

export interface MixShape {
  tenants: number;
  /** Fast subscriptions per tenant (answer 204 at once). */
  fast: number;
  /** Slow subscriptions per tenant, answering 204 after `slowMs`. */
  slow: number;
  slowMs: number;
  /** Failing subscriptions per tenant (answer 500). */
  failing: number;
  /** One hanging subscription (never answers) on every `hangingEvery`-th tenant; 0 for none. */
  hangingEvery: number;
  /** Events per second, over all tenants (round robin), for `seconds`. */
  eventsPerSecond: number;
  seconds: number;
  /** One receiver origin for every kind (the path tells them apart), as a platform's subscribers often share one. */
  sameOrigin: boolean;
}

export const ISSUE_MIX: MixShape = {
  tenants: 10,
  fast: 4,
  slow: 1,
  slowMs: 2_000,
  failing: 1,
  hangingEvery: 3,
  eventsPerSecond: 100,
  seconds: 60,
  sameOrigin: true,
};

/** The same shape with only its fast subscriptions: the control run. */
export const healthyOnly = (shape: MixShape): MixShape => ({ ...shape, slow: 0, failing: 0, hangingEvery: 0 });

interface Endpoint {
  kind: EndpointKind;
  url: string;
  /** Requests received, by delivery id: the first arrival and how many arrived. */
  received: Map<string, { at: number; count: number }>;
}

interface Receivers {
  endpoints: Record<EndpointKind, Endpoint>;
  close(): Promise<void>;
}

/**
 * The receivers: one HTTP server per kind, or with `sameOrigin` one server for all, the kind in the path (as many
 * subscribers of a platform share its origin). Fast answers 204 at once, slow after `slowMs`, failing 500; hanging
 * keeps every request open until the receivers close.
 */
async function receivers(slowMs: number, sameOrigin: boolean): Promise<Receivers> {
  const endpoints = {} as Record<EndpointKind, Endpoint>;
  for (const kind of KINDS) endpoints[kind] = { kind, url: '', received: new Map() };
  const servers: { server: Server; sockets: Set<Socket> }[] = [];
  const handler = (fixed: EndpointKind | undefined) => (request: IncomingMessage, response: ServerResponse) => {
    const at = Date.now();
    const kind = fixed ?? KINDS.find((name) => request.url === `/hooks/${name}`) ?? 'fast';
    request.resume();
    request.on('end', () => {
      const id = String(request.headers['x-webhook-delivery-id']);
      const seen = endpoints[kind].received.get(id);
      if (seen) seen.count += 1;
      else endpoints[kind].received.set(id, { at, count: 1 });
      if (kind === 'fast') response.writeHead(204).end();
      else if (kind === 'slow') setTimeout(() => response.writeHead(204).end(), slowMs).unref();
      else if (kind === 'failing') response.writeHead(500).end('failing on purpose');
      // hanging: no answer
    });
  };
  const listen = async (fixed: EndpointKind | undefined) => {
    const server = createServer(handler(fixed));
    const sockets = new Set<Socket>();
    server.on('connection', (socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    servers.push({ server, sockets });
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  };
  if (sameOrigin) {
    const origin = await listen(undefined);
    for (const kind of KINDS) endpoints[kind].url = `${origin}/hooks/${kind}`;
  } else {
    for (const kind of KINDS) endpoints[kind].url = `${await listen(kind)}/hooks/${kind}`;
  }
  return {
    endpoints,
    async close() {
      for (const { server, sockets } of servers) {
        for (const socket of sockets) socket.destroy();
        await new Promise<void>((resolve) => server.close(() => resolve()));
      }
    },
  };
}

export interface KindFigures {
  subscriptions: number;
  /** Deliveries the events made for this kind. */
  expected: number;
  /** Distinct deliveries received, and requests beyond the first of a delivery. */
  received: number;
  duplicates: number;
  /** Event published → first request received, ms. */
  p50: number;
  p99: number;
  max: number;
}

export interface Mix {
  subscriptions: { id: string; tenantId: string; kind: EndpointKind }[];
  /**
   * One event per tenant, not counted, until all their fast deliveries arrived (the consumers joined, the processes
   * warm): what a measure of a running service should start from. Answers false if they did not within `timeoutMs`.
   */
  warmUp(timeoutMs: number): Promise<boolean>;
  /** Publishes the events at the shape's pace; resolves when the last one is on the topic. */
  publish(): Promise<void>;
  /** Per kind: what arrived so far, with latencies from each delivery's event publication. */
  figures(): Record<EndpointKind, KindFigures>;
  /** Per `windowMs` of event publication since the first event: a kind's p99 event → receipt (ms), for where a tail sits. */
  p99ByWindow(kind: EndpointKind, windowMs: number): number[];
  /** Waits until every fast delivery arrived, or `timeoutMs`; answers whether they all did. */
  fastDelivered(timeoutMs: number): Promise<boolean>;
  close(): Promise<void>;
}

/**
 * Sets up the shape's receivers and subscriptions on `env`'s keyspace (Hmac-signed, every purchaseOrder event) and
 * answers the mix, ready to publish. The router and dispatcher are the caller's.
 */
export async function setUpMix(env: Record<string, string>, shape: MixShape, name = 'mix'): Promise<Mix> {
  const config = loadConfig(env);
  const receiving = await receivers(shape.slowMs, shape.sameOrigin);
  const { endpoints } = receiving;
  const run = randomUUID().slice(0, 8);
  const tenants = Array.from({ length: shape.tenants }, (_, index) => `${name}-${run}-tenant-${index}`);
  const subscriptions: Mix['subscriptions'] = [];
  const db = await connectCassandra(config);
  try {
    const store = new SubscriptionStore(db, requireSecrets(config));
    for (const [index, tenantId] of tenants.entries()) {
      const kinds: EndpointKind[] = [
        ...Array<EndpointKind>(shape.fast).fill('fast'),
        ...Array<EndpointKind>(shape.slow).fill('slow'),
        ...Array<EndpointKind>(shape.failing).fill('failing'),
        ...(shape.hangingEvery > 0 && index % shape.hangingEvery === 0 ? ['hanging' as const] : []),
      ];
      for (const kind of kinds) {
        const subscription = blankSubscription(tenantId, randomUUID(), new Date());
        await store.save({
          ...subscription,
          url: endpoints[kind].url,
          eventTypes: ['purchaseOrder.*'],
          authenticationMode: 'Hmac',
          secrets: { hmacSecret: `${name}-secret-0123456789` },
        });
        subscriptions.push({ id: subscription.id, tenantId, kind });
      }
    }
  } finally {
    await db.shutdown();
  }
  const byTenant = new Map<string, Mix['subscriptions']>();
  for (const subscription of subscriptions) {
    byTenant.set(subscription.tenantId, [...(byTenant.get(subscription.tenantId) ?? []), subscription]);
  }
  const events = await eventPublisher(env);
  /** Per kind, the deliveries expected: delivery id → the publication time of its event. */
  const expected = Object.fromEntries(KINDS.map((kind) => [kind, new Map<string, number>()])) as Record<
    EndpointKind,
    Map<string, number>
  >;

  const figures = (): Record<EndpointKind, KindFigures> => {
    const out = {} as Record<EndpointKind, KindFigures>;
    for (const kind of KINDS) {
      const latencies: number[] = [];
      let duplicates = 0;
      for (const [id, publishedAt] of expected[kind]) {
        const seen = endpoints[kind].received.get(id);
        if (!seen) continue;
        latencies.push(seen.at - publishedAt);
        duplicates += seen.count - 1;
      }
      latencies.sort((a, b) => a - b);
      const at = (p: number) =>
        latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))]! : NaN;
      out[kind] = {
        subscriptions: subscriptions.filter((subscription) => subscription.kind === kind).length,
        expected: expected[kind].size,
        received: latencies.length,
        duplicates,
        p50: at(0.5),
        p99: at(0.99),
        max: latencies.at(-1) ?? NaN,
      };
    }
    return out;
  };

  return {
    subscriptions,
    async warmUp(timeoutMs) {
      const batch = tenants.map((tenantId) => ({
        tenantId,
        eventType: 'purchaseOrder.validated',
        eventId: randomUUID(),
      }));
      const ids = batch.flatMap((event) =>
        (byTenant.get(event.tenantId) ?? [])
          .filter((subscription) => subscription.kind === 'fast')
          .map((subscription) => deliveryIdFor(event.eventId, subscription.id)),
      );
      await events.publish(batch);
      const deadline = Date.now() + timeoutMs;
      while (!ids.every((id) => endpoints.fast.received.has(id))) {
        if (Date.now() > deadline) return false;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      return true;
    },
    async publish() {
      const total = Math.round(shape.eventsPerSecond * shape.seconds);
      const started = Date.now();
      // A batch every 50 ms keeps the pace steady without one publish per event.
      for (let sent = 0; sent < total;) {
        const due = Math.min(total, Math.floor(((Date.now() - started) / 1000) * shape.eventsPerSecond) + 1);
        const batch = Array.from({ length: Math.max(0, due - sent) }, (_, offset) => ({
          tenantId: tenants[(sent + offset) % tenants.length]!,
          eventType: 'purchaseOrder.validated',
          eventId: randomUUID(),
        }));
        if (batch.length > 0) {
          const publishedAt = Date.now();
          for (const event of batch) {
            for (const subscription of byTenant.get(event.tenantId) ?? []) {
              expected[subscription.kind].set(deliveryIdFor(event.eventId, subscription.id), publishedAt);
            }
          }
          await events.publish(batch);
          sent += batch.length;
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    figures,
    p99ByWindow(kind, windowMs) {
      const first = Math.min(...expected[kind].values());
      const windows: number[][] = [];
      for (const [id, publishedAt] of expected[kind]) {
        const seen = endpoints[kind].received.get(id);
        if (seen) (windows[Math.floor((publishedAt - first) / windowMs)] ??= []).push(seen.at - publishedAt);
      }
      return Array.from(windows, (latencies = []) => {
        latencies.sort((a, b) => a - b);
        return latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * 0.99))]! : NaN;
      });
    },
    async fastDelivered(timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const fast = figures().fast;
        if (fast.received === fast.expected) return true;
        if (Date.now() > deadline) return false;
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    },
    async close() {
      await events.close();
      await receiving.close();
    },
  };
}
