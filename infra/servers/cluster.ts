/**
 * The local production-shaped cluster (`npm run servers -- start --cluster`): three Kafka nodes in KRaft mode, each a
 * broker and one of three controllers, on 127.0.0.11-13; three Cassandra nodes in one data centre, each its own rack,
 * on 127.0.0.21-23; and a schema registry on 127.0.0.31. Each node has its own loopback address (as ccm gives
 * Cassandra nodes), so every node uses the standard ports and nothing collides with the single-node servers on
 * 127.0.0.1. Their files live under `.local/{conf,data,logs,run}/cluster/`.
 */
import fs from 'node:fs';
import path from 'node:path';
import { apicurioDef } from './apicurio.ts';
import { CASSANDRA_JAVA17_FLAGS, cassandraDef } from './cassandra.ts';
import type { Tools } from './download.ts';
import { kafkaDef } from './kafka.ts';
import { LOCAL_DC, registryUrl, type ServerDef } from './server-def.ts';

export const CLUSTER_SIZE = 3;
const KAFKA_PORT = 9092;
const CASSANDRA_PORT = 9042;
const REGISTRY_HOST = '127.0.0.31';
const REGISTRY_PORT = 8081;
/** Cassandra's JMX (nodetool) listens on 127.0.0.1 whatever the node's address: one port per node. */
const FIRST_JMX_PORT = 7201;

/** What the services must be told to use the cluster as production would (DESIGN.md §6's settings). */
export const CLUSTER_SERVICE_ENV: Readonly<Record<string, string>> = {
  KAFKA_REPLICATION_FACTOR: '3',
  KAFKA_MIN_INSYNC_REPLICAS: '2',
  CASSANDRA_REPLICATION_FACTOR: '3',
};

/** One process of the cluster. */
export interface ClusterNode {
  def: ServerDef;
  /** Its number within its kind (1-3; the registry is 1). */
  index: number;
  role: string;
}

export const kafkaHost = (index: number): string => `127.0.0.1${index}`;
export const cassandraHost = (index: number): string => `127.0.0.2${index}`;
const indexes = Array.from({ length: CLUSTER_SIZE }, (_, i) => i + 1);

/**
 * Token `index` (1-based) of `count` spread evenly over Murmur3's range, so the nodes own equal shares of it from the
 * start and join without streaming from each other.
 */
export function evenToken(index: number, count: number): string {
  const min = -(2n ** 63n);
  return String(min + (2n ** 64n / BigInt(count)) * BigInt(index - 1));
}

/** The cluster's nodes; `clusterId` is the id every Kafka node's storage is formatted with. */
export function clusterNodes(clusterId: string): {
  kafka: ClusterNode[];
  cassandra: ClusterNode[];
  registry: ClusterNode;
} {
  const voters = indexes.map((i) => `${i}@${kafkaHost(i)}:${KAFKA_PORT + 1}`).join(',');
  const seed = cassandraHost(1);
  return {
    kafka: indexes.map((index) => ({
      index,
      role: 'broker, controller',
      def: kafkaDef(
        KAFKA_PORT,
        {
          nodeId: index,
          host: kafkaHost(index),
          voters,
          rack: `rack${index}`,
          replicas: CLUSTER_SIZE,
          minInsync: 2,
          heap: '384m',
          clusterId,
        },
        `cluster/kafka-${index}`,
      ),
    })),
    cassandra: indexes.map((index) => ({
      index,
      role: index === 1 ? 'seed' : 'node',
      def: cassandraDef(
        CASSANDRA_PORT,
        {
          host: cassandraHost(index),
          seeds: [seed],
          jmxPort: FIRST_JMX_PORT + index - 1,
          rack: `rack${index}`,
          initialToken: evenToken(index, CLUSTER_SIZE),
          heap: '768m',
        },
        `cluster/cassandra-${index}`,
      ),
    })),
    registry: { index: 1, role: 'schema registry', def: apicurioDef(REGISTRY_PORT, REGISTRY_HOST, 'cluster/apicurio') },
  };
}

/**
 * Every node, Kafka first, then Cassandra, then the registry: for what does not start them (status, the chaos suite's
 * pid checks), so without a cluster id, which only a Kafka node's first start (its storage format) reads.
 */
export function clusterNodeList(): ClusterNode[] {
  const nodes = clusterNodes('');
  return [...nodes.kafka, ...nodes.cassandra, nodes.registry];
}

export function clusterEndpoints() {
  return {
    kafkaBrokers: indexes.map((i) => `${kafkaHost(i)}:${KAFKA_PORT}`),
    cassandraContactPoints: indexes.map((i) => `${cassandraHost(i)}:${CASSANDRA_PORT}`),
    cassandraLocalDc: LOCAL_DC,
    schemaRegistryUrl: registryUrl(REGISTRY_PORT, REGISTRY_HOST),
  };
}

/**
 * The node id of the active KRaft controller, as the nodes last recorded it: each voter keeps the leader it knows in
 * its metadata log's `quorum-state` file; the one of the highest epoch is the latest. Undefined when none says.
 */
export function activeController(root: string): number | undefined {
  let best: { leaderId: number; leaderEpoch: number } | undefined;
  for (const index of indexes) {
    const file = path.join(root, 'data', 'cluster', `kafka-${index}`, 'logs', '__cluster_metadata-0', 'quorum-state');
    try {
      const state = JSON.parse(fs.readFileSync(file, 'utf8')) as { leaderId?: number; leaderEpoch?: number };
      if (typeof state.leaderId !== 'number' || state.leaderId < 0 || typeof state.leaderEpoch !== 'number') continue;
      if (!best || state.leaderEpoch > best.leaderEpoch)
        best = { leaderId: state.leaderId, leaderEpoch: state.leaderEpoch };
    } catch {
      // not started yet, or being rewritten
    }
  }
  return best?.leaderId;
}

/**
 * Runs Cassandra's nodetool (the `NodeTool` class of the downloaded jars) against node `index` of the cluster, e.g.
 * `['drain']` before a node's planned stop; resolves with its output.
 */
export async function nodetool(root: string, tools: Tools, index: number, args: string[]): Promise<string> {
  const lib = path.join(root, 'dist', 'cassandra', 'lib', '*');
  return tools.run(await tools.java(), [
    '-Xmx128m',
    // As the server, nodetool's classes reflect into JDK internals (FileUtils, at its first use).
    ...CASSANDRA_JAVA17_FLAGS,
    '-cp',
    lib,
    'org.apache.cassandra.tools.NodeTool',
    '-h',
    '127.0.0.1',
    '-p',
    String(FIRST_JMX_PORT + index - 1),
    ...args,
  ]);
}
