// A fix for kafkajs 2.2.4's heartbeats after the group coordinator moved: core/kafka.ts applies it once, before any
// consumer joins. Only core/ touches kafkajs' insides.
import { createRequire } from 'node:module';
import { COORDINATOR_MOVED as MOVED } from './kafkajs-offset-coordinator.ts';

interface ConsumerGroupInternals {
  groupId: string;
  generationId: number | null;
  memberId: string | null;
  coordinator: unknown;
  lastRequest: number;
  sessionTimeout: number;
  cluster: { findGroupCoordinator(group: { groupId: string }): Promise<unknown> };
  heartbeat(options: { interval: number }): Promise<void>;
}

/** The broker that took the group over is still reading it from `__consumer_offsets`. */
const LOADING = 'GROUP_LOAD_IN_PROGRESS';
let patched = false;

/**
 * kafkajs takes a heartbeat refused with NOT_COORDINATOR for a rebalance and has the member join the group again; when
 * the group's leader joins again, the coordinator rebalances every member (each stops, gives its partitions up and
 * waits for the new assignment). A coordinator that takes a group over has loaded its members and generation from
 * `__consumer_offsets`, and Java's consumer simply heartbeats it: nothing is rebalanced. In a rolling restart of the
 * local cluster's brokers, the restart of the broker coordinating the routers' and dispatchers' groups stopped every
 * delivery for 3.8 s that way. Here the member asks the cluster for the coordinator (without waiting for the answer)
 * and heartbeats it at the next turn (also when the old coordinator's broker refuses the connection: it stopped after
 * handing its groups over), and waits for one still loading the group; if it then answers that a rebalance is
 * under way, or that the member is unknown, kafkajs rejoins as before. A member that has had no heartbeat accepted
 * for a whole session timeout may have been dropped: it rejoins as before.
 *
 * And the heartbeat goes out in the background. kafkajs awaits one after every fetch and every batch (when the interval
 * has passed), so each answer held the member's fetches for a round trip, and a slow coordinator for as long as it
 * took; a short interval, which a rebalance needs (every member must learn of it from a heartbeat before any can go on),
 * would have put more of those waits on the delivery path. Now a call sends the heartbeat if none is unanswered and
 * returns at once; a refusal is thrown at the next call (kafkajs then rejoins), unless the member has joined again
 * since the refused heartbeat was sent.
 */
export function patchHeartbeatCoordinator(): void {
  if (patched) return;
  patched = true;
  const ConsumerGroup = createRequire(import.meta.url)('kafkajs/src/consumer/consumerGroup.js') as {
    prototype: ConsumerGroupInternals;
  };
  const heartbeat = ConsumerGroup.prototype.heartbeat;
  const heartbeatCoordinator = async (group: ConsumerGroupInternals, options: { interval: number }) => {
    try {
      await heartbeat.call(group, options);
    } catch (error) {
      const type = (error as { type?: string }).type ?? '';
      // The coordinator's broker gone (a clean stop hands its groups over, then the process exits): ask for the new one.
      const gone = (error as Error).name === 'KafkaJSConnectionError';
      // lastRequest is the last accepted heartbeat (or the join).
      if ((!MOVED.has(type) && type !== LOADING && !gone) || Date.now() - group.lastRequest >= group.sessionTimeout)
        throw error;
      if (MOVED.has(type) || gone) locate(group);
    }
  };
  ConsumerGroup.prototype.heartbeat = async function (this: ConsumerGroupInternals, options: { interval: number }) {
    const refusal = refusals.get(this);
    if (refusal) {
      refusals.delete(this);
      if (refusal.generationId === this.generationId && refusal.memberId === this.memberId) throw refusal.error;
    }
    if (unanswered.has(this)) return;
    unanswered.add(this);
    const { generationId, memberId } = this;
    heartbeatCoordinator(this, options).then(
      () => unanswered.delete(this),
      (error: unknown) => {
        unanswered.delete(this);
        refusals.set(this, { error, generationId, memberId });
      },
    );
  };
}

/** Groups with a heartbeat sent and not yet answered. */
const unanswered = new WeakSet<ConsumerGroupInternals>();
/** The last heartbeat's refusal, with the generation and member it was sent as, until the next call tells it. */
const refusals = new WeakMap<
  ConsumerGroupInternals,
  { error: unknown; generationId: number | null; memberId: string | null }
>();

/** Lookups of a group's coordinator under way: one at a time per group. */
const locating = new WeakSet<ConsumerGroupInternals>();

/**
 * Asks the cluster which broker coordinates the group now, without waiting: a heartbeat is awaited by the fetch loops
 * (kafkajs heartbeats when a fetch brings nothing), and kafkajs' lookup retries for up to half a minute while no broker
 * coordinates the group. Unknown for now (an election under way): the next refusal asks again.
 */
function locate(group: ConsumerGroupInternals): void {
  if (locating.has(group)) return;
  locating.add(group);
  group.cluster
    .findGroupCoordinator({ groupId: group.groupId })
    .then(
      (coordinator) => {
        group.coordinator = coordinator;
      },
      () => undefined,
    )
    .finally(() => locating.delete(group));
}
