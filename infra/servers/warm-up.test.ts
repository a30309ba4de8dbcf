import { describe, expect, it } from 'vitest';
import { warmUp, warmUpMs } from './warm-up.ts';

describe('warm-up setting (SERVERS_WARM_UP)', () => {
  it('defaults to a minute, takes a duration, and 0 skips it', () => {
    expect(warmUpMs(undefined)).toBe(60_000);
    expect(warmUpMs('')).toBe(60_000);
    expect(warmUpMs('30s')).toBe(30_000);
    expect(warmUpMs('0')).toBe(0);
  });

  it('refuses what is not a duration, saying what it wants', () => {
    expect(() => warmUpMs('soon')).toThrow(
      'SERVERS_WARM_UP must be a duration such as 60s, or 0 to skip the warm-up, not "soon"',
    );
  });

  it('loads nothing, and connects to nothing, when there is no time or no cold server', async () => {
    const nowhere = {
      kafkaBrokers: ['127.0.0.1:1'],
      cassandraContactPoints: ['127.0.0.1:1'],
      cassandraLocalDc: 'datacenter1',
      schemaRegistryUrl: 'http://127.0.0.1:1',
    };
    const said: string[] = [];
    await expect(warmUp(nowhere, ['kafka', 'cassandra'], 0, (line) => said.push(line))).resolves.toEqual({});
    await expect(warmUp(nowhere, [], 60_000, (line) => said.push(line))).resolves.toEqual({});
    expect(said).toEqual([]);
  });
});
