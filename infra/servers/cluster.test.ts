import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { cassandraYaml } from './cassandra.ts';
import { activeController, clusterEndpoints, clusterNodes, evenToken } from './cluster.ts';
import { kafkaProperties, singleKafkaNode } from './kafka.ts';

const lines = (text: string) => text.split('\n');

describe('the local cluster', () => {
  const nodes = clusterNodes('cluster-id-1');

  it('gives every node its own loopback address and ids of its own', () => {
    const all = [...nodes.kafka, ...nodes.cassandra, nodes.registry];
    expect(all.map((node) => node.def.address)).toEqual([
      '127.0.0.11:9092',
      '127.0.0.12:9092',
      '127.0.0.13:9092',
      '127.0.0.21:9042',
      '127.0.0.22:9042',
      '127.0.0.23:9042',
      'http://127.0.0.31:8081/apis/ccompat/v7',
    ]);
    expect(new Set(all.map((node) => node.def.id)).size).toBe(7);
    expect(nodes.cassandra.map((node) => node.role)).toEqual(['seed', 'node', 'node']);
    expect(clusterEndpoints()).toEqual({
      kafkaBrokers: ['127.0.0.11:9092', '127.0.0.12:9092', '127.0.0.13:9092'],
      cassandraContactPoints: ['127.0.0.21:9042', '127.0.0.22:9042', '127.0.0.23:9042'],
      cassandraLocalDc: 'datacenter1',
      schemaRegistryUrl: 'http://127.0.0.31:8081/apis/ccompat/v7',
    });
  });

  it('spreads the three Cassandra tokens evenly over the Murmur3 range', () => {
    const tokens = [1, 2, 3].map((index) => BigInt(evenToken(index, 3)));
    expect(tokens[0]).toBe(-(2n ** 63n));
    expect(tokens[1]! - tokens[0]!).toBe(tokens[2]! - tokens[1]!);
    // The last share (up to 2^63 - 1) differs from the others by the remainder of 2^64 / 3 at most.
    const lastShare = 2n ** 63n - 1n - tokens[2]! + 1n;
    expect(lastShare - (tokens[1]! - tokens[0]!)).toBeLessThanOrEqual(2n);
  });

  it('writes broker settings for three replicas, two in sync, no unclean leader, one rack a node', () => {
    const props = lines(
      kafkaProperties(9092, '/data', {
        nodeId: 2,
        host: '127.0.0.12',
        voters: '1@127.0.0.11:9093,2@127.0.0.12:9093,3@127.0.0.13:9093',
        rack: 'rack2',
        replicas: 3,
        minInsync: 2,
        heap: '384m',
      }),
    );
    expect(props).toEqual(
      expect.arrayContaining([
        'node.id=2',
        'controller.quorum.voters=1@127.0.0.11:9093,2@127.0.0.12:9093,3@127.0.0.13:9093',
        'listeners=PLAINTEXT://127.0.0.12:9092,CONTROLLER://127.0.0.12:9093',
        'advertised.listeners=PLAINTEXT://127.0.0.12:9092',
        'broker.rack=rack2',
        'default.replication.factor=3',
        'min.insync.replicas=2',
        'offsets.topic.replication.factor=3',
        'transaction.state.log.min.isr=2',
        'unclean.leader.election.enable=false',
        // Followers fetch again 100 ms after a failed fetch (a leader moved), not Kafka's 1 s.
        'replica.fetch.backoff.ms=100',
        // A broker that stops heartbeating is fenced (its partitions led by others) after 3 s, not Kafka's 9 s.
        'broker.heartbeat.interval.ms=500',
        'broker.session.timeout.ms=3000',
        // The active controller's no-op record every 100 ms tells the other nodes a committed change sooner.
        'metadata.max.idle.interval.ms=100',
        // A snapshot of the metadata log within a minute of new records: a start replays only what came after.
        'metadata.log.max.snapshot.interval.ms=60000',
      ]),
    );
  });

  it('keeps the single broker as it was: its own controller, one replica, no rack', () => {
    const props = lines(kafkaProperties(9092, '/data', singleKafkaNode(9092)));
    expect(props).toEqual(
      expect.arrayContaining([
        'controller.quorum.voters=1@127.0.0.1:9093',
        'default.replication.factor=1',
        'min.insync.replicas=1',
        'metadata.log.max.snapshot.interval.ms=60000',
      ]),
    );
    expect(props.some((line) => line.startsWith('replica.fetch.backoff.ms'))).toBe(false);
    expect(props.some((line) => line.startsWith('broker.session.timeout.ms'))).toBe(false);
    expect(props.some((line) => line.startsWith('metadata.max.idle.interval.ms'))).toBe(false);
    expect(props.some((line) => line.startsWith('broker.rack'))).toBe(false);
  });

  it('lets a Cassandra node join through the seed with its token set, in its rack of one data centre', () => {
    const yaml = cassandraYaml(9042, '/data', {
      host: '127.0.0.22',
      seeds: ['127.0.0.21'],
      jmxPort: 7202,
      rack: 'rack2',
      initialToken: evenToken(2, 3),
      heap: '768m',
    });
    expect(lines(yaml)).toEqual(
      expect.arrayContaining([
        `initial_token: ${evenToken(2, 3)}`,
        'auto_bootstrap: false',
        'endpoint_snitch: GossipingPropertyFileSnitch',
        '      - seeds: "127.0.0.21:7000"',
        'listen_address: 127.0.0.22',
        'rpc_address: 127.0.0.22',
        // The same on every node: each coordinates its compare-and-sets with the variant its own yaml names.
        'paxos_variant: v2',
      ]),
    );
  });
});

describe('activeController', () => {
  let root: string | undefined;
  afterEach(() => {
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  const quorumState = (index: number, state: object) => {
    const dir = path.join(root!, 'data', 'cluster', `kafka-${index}`, 'logs', '__cluster_metadata-0');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'quorum-state'), JSON.stringify(state));
  };

  it('believes the node that recorded the latest epoch, and says nothing without a leader', () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'cluster-'));
    expect(activeController(root)).toBeUndefined();
    quorumState(1, { leaderId: -1, leaderEpoch: 9 }); // an election under way
    expect(activeController(root)).toBeUndefined();
    quorumState(2, { leaderId: 2, leaderEpoch: 6 });
    quorumState(3, { leaderId: 3, leaderEpoch: 7 });
    expect(activeController(root)).toBe(3);
  });
});
