// A KRaft node that starts reads the latest snapshot of the metadata log and replays only the records after it. Kafka
// snapshots after 20 MB of records or an hour (`metadata.log.max.snapshot.interval.ms`), counted from the node's own
// start, and the local cluster's nodes restart more often than that: none had ever written one, so each start replayed
// the whole log since the cluster's creation (83,785 records after a day of use here, the active controller's no-op
// every 100 ms among them, read on a cold JVM at each step of a brokers' roll), a log that also never shrinks, since
// only what a snapshot covers is deleted. The nodes now snapshot within a minute of new records (infra/servers/kafka.ts).
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CLUSTER_SIZE } from '../../infra/servers/cluster.ts';
import { METADATA_SNAPSHOT_INTERVAL_MS } from '../../infra/servers/kafka.ts';
import { clusterRoot, useCluster } from '../support/cluster-file.ts';

const say = (line: string) => console.log(`[metadata-snapshots] ${line}`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The snapshots (`<offset>-<epoch>.checkpoint`) in a node's copy of the metadata log. */
function snapshots(index: number): string[] {
  const dir = path.join(clusterRoot, 'data', 'cluster', `kafka-${index}`, 'logs', '__cluster_metadata-0');
  return fs.readdirSync(dir).filter((name) => name.endsWith('.checkpoint'));
}

describe('the cluster’s metadata log', () => {
  useCluster(say);

  it('is snapshotted by every node within a minute of new records, so a restart replays only what came after', async () => {
    // The active controller appends a record every 100 ms: each node has new records from its start on. A node up for
    // longer than the interval has a snapshot already; a fresh cluster has one within the interval and a margin.
    const nodes = Array.from({ length: CLUSTER_SIZE }, (_, offset) => offset + 1);
    const deadline = Date.now() + METADATA_SNAPSHOT_INTERVAL_MS + 30_000;
    let missing = nodes;
    while (missing.length > 0 && Date.now() < deadline) {
      await sleep(1_000);
      missing = missing.filter((index) => snapshots(index).length === 0);
    }
    for (const index of nodes) say(`kafka-${index}: ${snapshots(index).join(', ') || 'no snapshot'}`);
    expect(missing).toEqual([]);
  });
});
