import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { patchOffsetCoordinator } from './kafkajs-offset-coordinator.ts';

const require = createRequire(import.meta.url);
// kafkajs' own offset manager (one per consumer group generation) and its protocol error for a code.
const OffsetManager = require('kafkajs/src/consumer/offsetManager/index.js') as new (
  options: Record<string, unknown>,
) => {
  resolveOffset(offset: { topic: string; partition: number; offset: string }): void;
  commitOffsets(): Promise<void>;
};
const { createErrorFromCode } = require('kafkajs/src/protocol/error.js') as {
  createErrorFromCode(code: number): Error & { type: string };
};
const NOT_COORDINATOR = 16;

/** A broker that answers OffsetCommit as told, and counts what it was sent. */
function broker(answer: () => void) {
  const commits: unknown[] = [];
  return {
    commits,
    isConnected: () => true,
    offsetCommit: async (payload: unknown) => {
      commits.push(payload);
      answer();
    },
  };
}

describe('kafkajs offset commits after the group coordinator moved (patched)', () => {
  it('asks the cluster for the new coordinator after NOT_COORDINATOR, so the next commit reaches it', async () => {
    patchOffsetCoordinator();
    // The broker that coordinated the group at the join, restarted since: another broker coordinates it now.
    const old = broker(() => {
      throw createErrorFromCode(NOT_COORDINATOR);
    });
    const current = broker(() => {});
    const committed = {};
    const cluster = {
      committedOffsets: () => committed,
      refreshMetadata: async () => {},
      findGroupCoordinator: async ({ groupId }: { groupId: string }) => (groupId === 'group-a' ? current : old),
    };
    const manager = new OffsetManager({
      cluster,
      coordinator: old,
      memberAssignment: { deliveries: [0] },
      topicConfigurations: [],
      instrumentationEmitter: { emit() {} },
      groupId: 'group-a',
      generationId: 3,
      memberId: 'member-1',
    });
    manager.resolveOffset({ topic: 'deliveries', partition: 0, offset: '41' });
    await expect(manager.commitOffsets()).rejects.toMatchObject({ type: 'NOT_COORDINATOR_FOR_GROUP' });
    // Unpatched, kafkajs refreshes its metadata but sends every later commit to the same broker, which refuses each.
    await manager.commitOffsets();
    expect(old.commits).toHaveLength(1);
    expect(current.commits).toMatchObject([
      { groupId: 'group-a', groupGenerationId: 3, topics: [{ topic: 'deliveries', partitions: [{ offset: '42' }] }] },
    ]);
  });
});
