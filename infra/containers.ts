/**
 * The same three servers as infra/servers.ts, as Docker containers through testcontainers, for machines where a
 * Docker engine answers. Host ports are fixed (the defaults of servers.ts, same overrides) because Kafka must
 * advertise its host port before it starts, and they are published on 127.0.0.1 only.
 */
import { GenericContainer, Wait, getContainerRuntimeClient, type StartedTestContainer } from 'testcontainers';
import type { Progress, StartedServers } from './servers.ts';

const HOST = '127.0.0.1';

/** True when testcontainers finds a Docker (or compatible) engine. */
export async function dockerAvailable(): Promise<boolean> {
  try {
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

export async function startContainers(opts: { progress?: Progress } = {}): Promise<StartedServers> {
  const progress = opts.progress ?? (() => {});
  const ports = {
    kafka: Number(process.env.KAFKA_PORT || 9092),
    cassandra: Number(process.env.CASSANDRA_PORT || 9042),
    registry: Number(process.env.SCHEMA_REGISTRY_PORT || 8081),
  };
  const specs: [string, GenericContainer][] = [
    ['kafka', kafkaContainer(ports.kafka)],
    ['cassandra', cassandraContainer(ports.cassandra)],
    ['apicurio', apicurioContainer(ports.registry)],
  ];
  const results = await Promise.allSettled(specs.map(([name, container]) => startOne(name, container, progress)));
  const started = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const stop = async (): Promise<void> => {
    await Promise.all(started.splice(0).map((c) => c.stop()));
  };
  const failed = results.flatMap((r) => (r.status === 'rejected' ? [String(r.reason)] : []));
  if (failed.length > 0) {
    await stop();
    throw new Error(failed.join('\n'));
  }
  return {
    started: specs.map(([name]) => name),
    kafkaBrokers: [`${HOST}:${ports.kafka}`],
    cassandraContactPoints: [`${HOST}:${ports.cassandra}`],
    cassandraLocalDc: 'datacenter1',
    schemaRegistryUrl: `http://${HOST}:${ports.registry}/apis/ccompat/v7`,
    stop,
  };
}

async function startOne(name: string, container: GenericContainer, progress: Progress): Promise<StartedTestContainer> {
  const t0 = Date.now();
  progress(`${name}: starting container…`);
  const started = await container.start();
  progress(`${name}: ready in ${((Date.now() - t0) / 1000).toFixed(1)}s`);
  return started;
}

/** testcontainers has no option for the host address of a published port; this sets it to loopback. */
class LoopbackContainer extends GenericContainer {
  protected override async beforeContainerCreated(): Promise<void> {
    for (const bindings of Object.values(this.hostConfig.PortBindings ?? {})) {
      for (const binding of bindings as { HostIp?: string }[]) binding.HostIp = HOST;
    }
  }
}

function kafkaContainer(port: number): GenericContainer {
  // The broker listens on the same port number inside, so the advertised address is right on both sides.
  return new LoopbackContainer('apache/kafka:3.9.1')
    .withExposedPorts({ container: port, host: port })
    .withEnvironment({
      KAFKA_NODE_ID: '1',
      KAFKA_PROCESS_ROLES: 'broker,controller',
      KAFKA_LISTENERS: `PLAINTEXT://:${port},CONTROLLER://:9093`,
      KAFKA_ADVERTISED_LISTENERS: `PLAINTEXT://${HOST}:${port}`,
      KAFKA_CONTROLLER_LISTENER_NAMES: 'CONTROLLER',
      KAFKA_LISTENER_SECURITY_PROTOCOL_MAP: 'PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT',
      KAFKA_CONTROLLER_QUORUM_VOTERS: '1@localhost:9093',
      KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR: '1',
      KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS: '5',
      KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR: '1',
      KAFKA_TRANSACTION_STATE_LOG_MIN_ISR: '1',
      KAFKA_DEFAULT_REPLICATION_FACTOR: '1',
      KAFKA_MIN_INSYNC_REPLICAS: '1',
      KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS: '0',
      KAFKA_AUTO_CREATE_TOPICS_ENABLE: 'false',
      KAFKA_HEAP_OPTS: '-Xms512m -Xmx512m',
    })
    .withWaitStrategy(Wait.forLogMessage(/Kafka Server started/))
    .withStartupTimeout(120_000);
}

function cassandraContainer(port: number): GenericContainer {
  return new LoopbackContainer('cassandra:5.0')
    .withExposedPorts({ container: 9042, host: port })
    .withEnvironment({ MAX_HEAP_SIZE: '1G', HEAP_NEWSIZE: '200M', JVM_EXTRA_OPTS: '-Dcassandra.ring_delay_ms=0' })
    .withWaitStrategy(Wait.forLogMessage(/Startup complete/))
    .withStartupTimeout(180_000);
}

function apicurioContainer(port: number): GenericContainer {
  return new LoopbackContainer('apicurio/apicurio-registry:3.0.9')
    .withExposedPorts({ container: 8080, host: port })
    .withEnvironment({
      JAVA_OPTS_APPEND: '-Xmx256m',
      APICURIO_REST_DELETION_GROUP_ENABLED: 'true',
      APICURIO_REST_DELETION_ARTIFACT_ENABLED: 'true',
      APICURIO_REST_DELETION_ARTIFACT_VERSION_ENABLED: 'true',
    })
    .withWaitStrategy(Wait.forHttp('/apis/ccompat/v7/subjects', 8080).forStatusCode(200))
    .withStartupTimeout(120_000);
}
