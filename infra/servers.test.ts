// What ensureCluster does when a Cassandra node fails its first gossip round: it starts the node again, and only then;
// and which JVMs a start warms up.
import { describe, expect, it } from 'vitest';
import { coldKinds, retryWhen } from './servers.ts';
import type { Proc } from './servers/process.ts';

const gossipFailure = () =>
  new Error(
    'cluster/cassandra-3 stopped during startup (exit code 3). java.lang.RuntimeException: Unable to gossip with any peers',
  );

describe('retryWhen', () => {
  it('runs the attempt again while it fails with a matching error, and returns what succeeds', async () => {
    let attempts = 0;
    const retried: string[] = [];
    const result = await retryWhen(
      async () => {
        attempts += 1;
        if (attempts < 3) throw gossipFailure();
        return 'up';
      },
      /Unable to gossip with any peers/,
      2,
      (error) => retried.push((error as Error).message.slice(0, 20)),
    );
    expect(result).toBe('up');
    expect(attempts).toBe(3);
    expect(retried).toEqual(['cluster/cassandra-3 ', 'cluster/cassandra-3 ']);
  });

  it('gives up after the retries allowed, with the last error', async () => {
    let attempts = 0;
    const attempt = async () => {
      attempts += 1;
      throw gossipFailure();
    };
    await expect(retryWhen(attempt, /Unable to gossip/, 2, () => {})).rejects.toThrow(/Unable to gossip/);
    expect(attempts).toBe(3);
  });

  it('does not retry another failure', async () => {
    let attempts = 0;
    const attempt = async () => {
      attempts += 1;
      throw new Error('cluster/cassandra-3 stopped during startup (exit code 1). OutOfMemoryError');
    };
    await expect(retryWhen(attempt, /Unable to gossip/, 2, () => {})).rejects.toThrow(/OutOfMemoryError/);
    expect(attempts).toBe(1);
  });
});

describe('coldKinds', () => {
  const proc = (name: string): Proc => ({ name, pid: 1, pidFile: `${name}.pid`, exitReason: () => undefined });

  it('names the kinds of JVM among the processes started, single servers or cluster nodes', () => {
    expect(coldKinds([proc('kafka'), proc('apicurio')])).toEqual(['kafka']);
    expect(coldKinds([proc('cluster/cassandra-3')])).toEqual(['cassandra']);
    expect(coldKinds([proc('cluster/kafka-2'), proc('cluster/cassandra-1'), proc('cluster/apicurio')])).toEqual([
      'kafka',
      'cassandra',
    ]);
  });

  it('names none when nothing was started, or only the registry', () => {
    expect(coldKinds([])).toEqual([]);
    expect(coldKinds([proc('cluster/apicurio')])).toEqual([]);
  });
});
