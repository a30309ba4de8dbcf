import { describe, expect, it } from 'vitest';
import { CpuMeter, formatCpu, parseCpuSeconds } from './process-cpu.ts';

describe('bench CPU meter', () => {
  it('reads user + system time from /proc/<pid>/stat, whatever the command name holds', () => {
    const stat = (comm: string) =>
      `1234 (${comm}) S 1 1234 1234 0 -1 4194560 9 0 0 0 250 130 0 0 20 0 11 0 4242 1000 200 18446744073709551615`;
    expect(parseCpuSeconds(stat('node'))).toBeCloseTo(3.8);
    expect(parseCpuSeconds(stat('a b) c'))).toBeCloseTo(3.8);
    expect(parseCpuSeconds('garbage')).toBeUndefined();
  });

  it('measures this process while it works, and leaves out a process it cannot read', () => {
    const meter = new CpuMeter({ self: process.pid, gone: 2 ** 30 });
    meter.start();
    // Work until this process has used 150 ms of CPU by its own count, however busy the machine is.
    const before = process.cpuUsage();
    let spin = 0;
    while (process.cpuUsage(before).user < 150_000) spin += Math.sqrt(spin + 1);
    const shares = meter.stop();
    expect(shares.map((share) => share.name)).toEqual(['self']);
    expect(shares[0]!.seconds).toBeGreaterThanOrEqual(0.1);
    expect(shares[0]!.percentOfCore).toBeGreaterThan(0);
  });

  it('prints each share with its time per delivery, and the total', () => {
    const line = formatCpu(
      [
        { name: 'cassandra', seconds: 4, percentOfCore: 40 },
        { name: 'router', seconds: 1, percentOfCore: 10 },
      ],
      10_000,
    );
    expect(line).toBe(
      'cpu during the run (% of one core): cassandra 40 % (400 µs/delivery), router 10 % (100 µs/delivery); all 50 % (500 µs/delivery)',
    );
  });

  it('names the unit of work it divides by', () => {
    const line = formatCpu([{ name: 'gateway', seconds: 0.65, percentOfCore: 42 }], 1_000, 'validation');
    expect(line).toBe(
      'cpu during the run (% of one core): gateway 42 % (650 µs/validation); all 42 % (650 µs/validation)',
    );
  });
});
