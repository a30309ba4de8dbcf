import { describe, expect, it } from 'vitest';
import { Supervisor, type Clock, type Exit, type SupervisedChild } from './supervisor.ts';

/** A clock whose time only moves when the test says so. */
function fakeClock() {
  let now = 0;
  const timers = new Map<number, { at: number; callback: () => void }>();
  let nextId = 1;
  const clock: Clock = {
    now: () => now,
    setTimeout: (callback, ms) => {
      const id = nextId++;
      timers.set(id, { at: now + ms, callback });
      return id;
    },
    clearTimeout: (handle) => void timers.delete(handle as number),
  };
  return {
    clock,
    pending: () => [...timers.values()].map((timer) => timer.at - now),
    advance(ms: number) {
      now += ms;
      for (const [id, timer] of [...timers]) {
        if (timer.at <= now) {
          timers.delete(id);
          timer.callback();
        }
      }
    },
  };
}

/** Processes that exit when the test says so, or when stopped. */
function fakeProcesses() {
  const started: { exit(exit: Exit): void; stopped: boolean }[] = [];
  const spawn = (): SupervisedChild => {
    let resolve!: (exit: Exit) => void;
    const exited = new Promise<Exit>((done) => (resolve = done));
    const entry = { exit: resolve, stopped: false };
    started.push(entry);
    return {
      exited,
      stop: async () => {
        entry.stopped = true;
        resolve({ code: null, signal: 'SIGTERM' });
        await exited;
      },
    };
  };
  return { started, spawn };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

function setup() {
  const time = fakeClock();
  const processes = fakeProcesses();
  const lines: string[] = [];
  const supervisor = new Supervisor({
    name: 'dispatcher-2',
    spawn: processes.spawn,
    report: (line) => lines.push(line),
    clock: time.clock,
  });
  supervisor.start();
  /** Makes the latest process exit and lets the supervisor react. */
  const crash = async (exit: Exit = { code: 1, signal: null }) => {
    processes.started.at(-1)!.exit(exit);
    await settle();
  };
  return { time, processes, lines, supervisor, crash };
}

describe('Supervisor', () => {
  it('restarts a process that exits, with a delay doubling from 1 s to 30 s', async () => {
    const { time, processes, lines, crash } = setup();
    const delays: number[] = [];
    for (let restart = 0; restart < 7; restart += 1) {
      await crash();
      delays.push(time.pending()[0]!);
      time.advance(delays.at(-1)!);
    }
    // The fifth exit within two minutes declares a crash loop: from then on the capped delay.
    expect(delays).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000]);
    expect(processes.started).toHaveLength(8);
    expect(lines[0]).toBe('dispatcher-2 exited unexpectedly (exit code 1) after 0 s; restart 1 in 1 s');
  });

  it('names the signal that killed the process', async () => {
    const { lines, crash } = setup();
    await crash({ code: null, signal: 'SIGKILL' });
    expect(lines).toEqual(['dispatcher-2 exited unexpectedly (killed by SIGKILL) after 0 s; restart 1 in 1 s']);
  });

  it('reports a crash loop once, in one line, and keeps retrying at the capped delay', async () => {
    const { time, processes, lines, crash } = setup();
    for (let restart = 0; restart < 8; restart += 1) {
      await crash();
      time.advance(time.pending()[0]!);
    }
    const loops = lines.filter((line) => line.includes('crash loop'));
    expect(loops).toEqual([
      'dispatcher-2 is in a crash loop: 5 restarts within 120 s; retrying every 30 s (see its log)',
    ]);
    expect(lines.indexOf(loops[0]!)).toBe(5); // right after the fifth restart line
    expect(processes.started).toHaveLength(9);
  });

  it('resets the delay after the process ran stably for a minute', async () => {
    const { time, lines, crash } = setup();
    for (let restart = 0; restart < 3; restart += 1) {
      await crash();
      time.advance(time.pending()[0]!);
    }
    expect(time.pending()).toEqual([]);
    time.advance(60_000);
    await crash();
    expect(time.pending()).toEqual([1_000]);
    expect(lines.at(-1)).toBe('dispatcher-2 exited unexpectedly (exit code 1) after 60 s; restart 4 in 1 s');
  });

  it('does not count restarts older than the crash-loop window', async () => {
    const { time, lines, crash } = setup();
    // Exits 50 s apart: not stable (under a minute), but never five within two minutes.
    for (let restart = 0; restart < 8; restart += 1) {
      time.advance(50_000);
      await crash();
      time.advance(time.pending()[0]!);
    }
    expect(lines.filter((line) => line.includes('crash loop'))).toEqual([]);
  });

  it('does not restart once stopped, neither a stopping process nor one waiting for its delay', async () => {
    const { time, processes, lines, supervisor } = setup();
    await supervisor.stop();
    await settle();
    expect(processes.started[0]!.stopped).toBe(true);
    expect(time.pending()).toEqual([]);
    expect(lines).toEqual([]);

    const other = setup();
    await other.crash();
    expect(other.time.pending()).toEqual([1_000]);
    await other.supervisor.stop();
    expect(other.time.pending()).toEqual([]);
    other.time.advance(60_000);
    expect(other.processes.started).toHaveLength(1);
  });
});
