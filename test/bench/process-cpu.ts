// Where the CPU of a bench run goes: each process's CPU time (user + system, from /proc) between two moments.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../../infra/processes.ts';
import { serverStatus } from '../../infra/servers.ts';

/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ, 100 on Linux). */
const TICKS_PER_SECOND = 100;

/** CPU seconds (user + system) a process has used, from the text of /proc/<pid>/stat; undefined if unreadable. */
export function parseCpuSeconds(stat: string): number | undefined {
  // The command name (field 2) is in parentheses and may hold spaces or parentheses itself: count from its end.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const user = Number(fields[11]);
  const system = Number(fields[12]);
  return Number.isFinite(user) && Number.isFinite(system) ? (user + system) / TICKS_PER_SECOND : undefined;
}

function cpuSecondsOf(pid: number): number | undefined {
  try {
    return parseCpuSeconds(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined; // gone, or not on Linux
  }
}

/** The local servers' pids for a CpuMeter, by the names the benches print (when their pid files are this repo's). */
export async function localServerPids(): Promise<Record<string, number | undefined>> {
  const pids = new Map((await serverStatus(path.join(repoRoot, '.local'))).map((server) => [server.name, server.pid]));
  return { cassandra: pids.get('cassandra'), kafka: pids.get('kafka'), registry: pids.get('apicurio') };
}

export interface CpuShare {
  name: string;
  /** CPU seconds used between start and stop. */
  seconds: number;
  /** Share of one core over the interval, in percent. */
  percentOfCore: number;
}

/** Snapshots named processes at `start` and gives each one's CPU use when `stop` is called. */
export class CpuMeter {
  private readonly started = new Map<string, number>();
  private startedAt = 0;

  constructor(private readonly pids: Record<string, number | undefined>) {}

  start(): void {
    this.startedAt = performance.now();
    for (const [name, pid] of Object.entries(this.pids)) {
      const seconds = pid === undefined ? undefined : cpuSecondsOf(pid);
      if (seconds !== undefined) this.started.set(name, seconds);
    }
  }

  /** Each process measured at both ends, busiest first. */
  stop(): CpuShare[] {
    const elapsed = (performance.now() - this.startedAt) / 1000;
    const shares: CpuShare[] = [];
    for (const [name, before] of this.started) {
      const after = cpuSecondsOf(this.pids[name]!);
      if (after === undefined) continue;
      const seconds = after - before;
      shares.push({ name, seconds, percentOfCore: elapsed > 0 ? (seconds / elapsed) * 100 : 0 });
    }
    return shares.sort((a, b) => b.seconds - a.seconds);
  }
}

/** One line: each process's share of a core and its CPU time per unit of work (a delivery, a validation), and the total. */
export function formatCpu(shares: CpuShare[], units: number, unit = 'delivery'): string {
  const perUnit = (seconds: number) => `${Math.round((seconds / Math.max(1, units)) * 1e6)} µs/${unit}`;
  const total = shares.reduce((sum, share) => sum + share.seconds, 0);
  const parts = shares.map((share) => `${share.name} ${share.percentOfCore.toFixed(0)} % (${perUnit(share.seconds)})`);
  const totalPercent = shares.reduce((sum, share) => sum + share.percentOfCore, 0);
  return `cpu during the run (% of one core): ${parts.join(', ')}; all ${totalPercent.toFixed(0)} % (${perUnit(total)})`;
}
