import { createRequire } from 'node:module';
import { describe, expect, it, vi } from 'vitest';
import { patchHeartbeatCoordinator } from './kafkajs-heartbeat-coordinator.ts';

const require = createRequire(import.meta.url);
// kafkajs' own consumer group (one per consumer) and its protocol error for a code.
const ConsumerGroup = require('kafkajs/src/consumer/consumerGroup.js') as new (options: Record<string, unknown>) => {
  coordinator: unknown;
  memberId: string | null;
  generationId: number | null;
  lastRequest: number;
  heartbeat(options: { interval: number }): Promise<void>;
};
const { createErrorFromCode } = require('kafkajs/src/protocol/error.js') as {
  createErrorFromCode(code: number): Error & { type: string };
};
const NOT_COORDINATOR = 16;
const COORDINATOR_LOAD_IN_PROGRESS = 14;
const REBALANCE_IN_PROGRESS = 27;

const silent = { namespace: () => silent, debug() {}, info() {}, warn() {}, error() {} };

/** Lets a heartbeat sent in the background take its answer. */
const answered = () => new Promise((resolve) => setImmediate(resolve));

/** A broker that answers Heartbeat as told, and counts what it was sent. */
function broker(answer: () => void) {
  const heartbeats: unknown[] = [];
  return {
    heartbeats,
    heartbeat: async (payload: unknown) => {
      heartbeats.push(payload);
      answer();
    },
  };
}

/** A member of generation 7 whose group was coordinated by `old` when it joined; the cluster names `current` now. */
function member(old: ReturnType<typeof broker>, current: ReturnType<typeof broker>) {
  const group = new ConsumerGroup({
    cluster: { findGroupCoordinator: async () => current },
    groupId: 'dispatchers',
    topics: ['deliveries'],
    logger: silent,
    instrumentationEmitter: { emit() {} },
    sessionTimeout: 10_000,
  });
  Object.assign(group, { coordinator: old, memberId: 'member-1', generationId: 7, lastRequest: 0 });
  return group;
}

/**
 * A member whose old coordinator refuses its heartbeat with `refusal()` while the cluster names another: it heartbeats,
 * waits for the lookup, and heartbeats again. What the new coordinator was sent.
 */
async function heartbeatsAfterRefusal(refusal: () => Error) {
  const old = broker(() => {
    throw refusal();
  });
  const current = broker(() => {});
  const group = member(old, current);
  group.lastRequest = Date.now() - 1_000;
  await group.heartbeat({ interval: 0 });
  await vi.waitFor(() => expect(group.coordinator).toBe(current));
  await group.heartbeat({ interval: 0 });
  await answered();
  return current.heartbeats;
}

describe('kafkajs heartbeats after the group coordinator moved (patched)', () => {
  it('heartbeats the new coordinator in the same generation instead of rejoining the group', async () => {
    patchHeartbeatCoordinator();
    // The broker that coordinated the group stopped (a rolling restart): another broker loaded the group, members and
    // generation, from __consumer_offsets. kafkajs took NOT_COORDINATOR for a rebalance and rejoined: the leader's
    // rejoin rebalanced every member of the dispatchers' and routers' groups, and every delivery waited 3.8 s.
    expect(await heartbeatsAfterRefusal(() => createErrorFromCode(NOT_COORDINATOR))).toEqual([
      { groupId: 'dispatchers', memberId: 'member-1', groupGenerationId: 7 },
    ]);
  });

  it('looks for the coordinator again when its broker is gone (connection refused), without rejoining', async () => {
    patchHeartbeatCoordinator();
    // A broker's clean stop hands its groups over within ~0.1 s and may exit a second later: a member whose next
    // heartbeat came after the exit found the old coordinator's port closed. kafkajs retried the refused connection
    // five times and crashed the consumer, which joined its group again (a rebalance; seen once in CI, 2026-12-07).
    const { KafkaJSConnectionError } = require('kafkajs/src/errors.js') as {
      KafkaJSConnectionError: new (message: string) => Error;
    };
    const refused = () => new KafkaJSConnectionError('Connection error: connect ECONNREFUSED 127.0.0.13:9092');
    expect(await heartbeatsAfterRefusal(refused)).toHaveLength(1);
  });

  it('does not hold the heartbeat (nor the fetch loops that await it) while the cluster names no coordinator', async () => {
    patchHeartbeatCoordinator();
    const old = broker(() => {
      throw createErrorFromCode(NOT_COORDINATOR);
    });
    const group = member(old, old);
    let lookups = 0;
    // kafkajs' lookup retries for up to half a minute while the group's __consumer_offsets partition has no leader.
    Object.assign(group, {
      cluster: {
        findGroupCoordinator: () => {
          lookups += 1;
          return new Promise(() => undefined);
        },
      },
    });
    group.lastRequest = Date.now() - 1_000;
    await group.heartbeat({ interval: 0 });
    await answered();
    await group.heartbeat({ interval: 0 });
    await answered();
    expect(lookups).toBe(1);
  });

  it('waits for a coordinator still loading the group, without rejoining', async () => {
    patchHeartbeatCoordinator();
    let loading = true;
    const current = broker(() => {
      if (loading) throw createErrorFromCode(COORDINATOR_LOAD_IN_PROGRESS);
    });
    const group = member(current, current);
    group.lastRequest = Date.now() - 1_000;
    await group.heartbeat({ interval: 0 });
    await answered();
    loading = false;
    await group.heartbeat({ interval: 0 });
    expect(current.heartbeats).toHaveLength(2);
  });

  it('still says a rebalance is under way, and gives up on a coordinator unreachable for a whole session', async () => {
    patchHeartbeatCoordinator();
    const rebalancing = broker(() => {
      throw createErrorFromCode(REBALANCE_IN_PROGRESS);
    });
    const group = member(rebalancing, rebalancing);
    group.lastRequest = Date.now() - 1_000;
    await group.heartbeat({ interval: 0 });
    await answered();
    await expect(group.heartbeat({ interval: 0 })).rejects.toMatchObject({ type: 'REBALANCE_IN_PROGRESS' });
    // No heartbeat taken for longer than the session timeout: the member may have been dropped; kafkajs rejoins.
    const moved = broker(() => {
      throw createErrorFromCode(NOT_COORDINATOR);
    });
    const stale = member(moved, moved);
    stale.lastRequest = Date.now() - 11_000;
    await stale.heartbeat({ interval: 0 });
    await answered();
    await expect(stale.heartbeat({ interval: 0 })).rejects.toMatchObject({ type: 'NOT_COORDINATOR_FOR_GROUP' });
  });
});

describe('kafkajs heartbeats in the background (patched)', () => {
  it('does not hold the fetch loop that calls it while the coordinator has not answered', async () => {
    patchHeartbeatCoordinator();
    // kafkajs awaits a heartbeat after every fetch and every batch: a slow coordinator (a loaded broker, a roll) held
    // every fetch of the member for its answer, and a shorter heartbeat interval would have put more such waits on it.
    const unanswered = { heartbeats: [] as unknown[], heartbeat: () => new Promise<void>(() => undefined) };
    const group = member(unanswered as ReturnType<typeof broker>, unanswered as ReturnType<typeof broker>);
    group.lastRequest = Date.now() - 1_000;
    const outcome = await Promise.race([
      group.heartbeat({ interval: 0 }).then(() => 'returned'),
      new Promise((resolve) => setTimeout(() => resolve('held'), 200)),
    ]);
    expect(outcome).toBe('returned');
  });

  it('sends one heartbeat at a time, and tells a refusal at the next call, of the generation it was sent in only', async () => {
    patchHeartbeatCoordinator();
    let refuse = true;
    const coordinator = broker(() => {
      if (refuse) throw createErrorFromCode(REBALANCE_IN_PROGRESS);
    });
    const group = member(coordinator, coordinator);
    group.lastRequest = Date.now() - 1_000;
    await group.heartbeat({ interval: 0 });
    await answered();
    await expect(group.heartbeat({ interval: 0 })).rejects.toMatchObject({ type: 'REBALANCE_IN_PROGRESS' });

    // Refused again, but the member rejoined (a new generation) before it called again: the refusal is old news.
    await group.heartbeat({ interval: 0 });
    await answered();
    group.generationId = 8;
    refuse = false;
    await group.heartbeat({ interval: 0 });
    expect(coordinator.heartbeats).toHaveLength(3);

    // While one is unanswered, calls send nothing more.
    const held = {
      heartbeats: [] as unknown[],
      heartbeat: (payload: unknown) => {
        held.heartbeats.push(payload);
        return new Promise<void>(() => undefined);
      },
    };
    const waiting = member(held as ReturnType<typeof broker>, held as ReturnType<typeof broker>);
    waiting.lastRequest = Date.now() - 1_000;
    await waiting.heartbeat({ interval: 0 });
    await waiting.heartbeat({ interval: 0 });
    expect(held.heartbeats).toHaveLength(1);
  });
});
