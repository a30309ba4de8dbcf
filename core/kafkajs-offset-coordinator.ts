// A fix for kafkajs 2.2.4's offset commits after the group coordinator moved (kafkajs pull request #1779, open
// upstream): core/kafka.ts applies it once, before any consumer joins. Only core/ touches kafkajs' insides.
import { createRequire } from 'node:module';

interface OffsetManagerInternals {
  groupId: string;
  coordinator: unknown;
  cluster: { findGroupCoordinator(group: { groupId: string }): Promise<unknown> };
  commitOffsets(offsets?: unknown): Promise<void>;
}

/** Errors that say the broker asked no longer coordinates the group (a restart or a move of `__consumer_offsets`). */
export const COORDINATOR_MOVED: ReadonlySet<string> = new Set([
  'NOT_COORDINATOR_FOR_GROUP',
  'GROUP_COORDINATOR_NOT_AVAILABLE',
]);
let patched = false;

/**
 * kafkajs' offset manager keeps the coordinator found when the member joined. When that broker restarts and another
 * takes over the group's `__consumer_offsets` partition, a commit answers NOT_COORDINATOR: kafkajs refreshes its
 * metadata but sends every later commit to the same broker, which refuses each, until something else makes the member
 * join again. Through a rolling restart of the local cluster's brokers the router's commits failed so for three
 * minutes (1,226 refusals), so a crash then would have handled three minutes of records again. Here such a failure
 * also asks the cluster which broker coordinates the group now; the commit still fails (the caller tries again, as
 * before), and the next one goes there.
 */
export function patchOffsetCoordinator(): void {
  if (patched) return;
  patched = true;
  const OffsetManager = createRequire(import.meta.url)('kafkajs/src/consumer/offsetManager/index.js') as {
    prototype: OffsetManagerInternals;
  };
  const commitOffsets = OffsetManager.prototype.commitOffsets;
  OffsetManager.prototype.commitOffsets = async function (this: OffsetManagerInternals, offsets?: unknown) {
    try {
      await commitOffsets.call(this, offsets);
    } catch (error) {
      if (COORDINATOR_MOVED.has((error as { type?: string }).type ?? '')) {
        // Unknown for now (an election under way): the next failure asks again.
        this.coordinator = await this.cluster
          .findGroupCoordinator({ groupId: this.groupId })
          .catch(() => this.coordinator);
      }
      throw error;
    }
  };
}
