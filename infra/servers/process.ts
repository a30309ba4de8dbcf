/** Server processes: spawning detached JVMs, pid files, waiting for health, stopping, and port checks. */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { HOST, type Launch, type Paths, type Progress, type ServerDef } from './server-def.ts';
import { LOG_TAIL_LINES, errorMessage, readText, secondsSince, sleep, withTimeout } from './util.ts';

const POLL_MS = 500;
/** One health attempt may not take longer than this, so a hung attempt cannot eat the startup deadline. */
export const ATTEMPT_MS = 30_000;
const STOP_TIMEOUT_MS = 30_000;

/** A server process: one we spawned (exit seen via its event) or one named by a pid file (polled). */
export interface Proc {
  name: string;
  pid: number;
  pidFile: string;
  /** Undefined while the process runs; otherwise how it ended. */
  exitReason(): string | undefined;
}

/**
 * The command line that runs a launch. With a timer slack (on Linux), a shell sets its own and then becomes the JVM: the
 * slack survives exec and every thread inherits it from the thread that starts it, and the pid stays the JVM's.
 */
export function launchCommand(java: string, launch: Launch): { command: string; args: string[] } {
  if (launch.timerSlackNs === undefined || process.platform !== 'linux') return { command: java, args: launch.args };
  const setSlack = `echo ${Math.round(launch.timerSlackNs)} > /proc/self/timerslack_ns; exec "$0" "$@"`;
  return { command: '/bin/sh', args: ['-c', setSlack, java, ...launch.args] };
}

export async function spawnServer(name: string, java: string, launch: Launch, paths: Paths): Promise<Proc> {
  await fsp.mkdir(path.dirname(paths.log), { recursive: true });
  await fsp.mkdir(path.dirname(paths.pid), { recursive: true });
  // Keep the previous run's log, but let failures show the tail of this run only.
  await fsp.rename(paths.log, `${paths.log}.1`).catch(() => {});
  const fd = fs.openSync(paths.log, 'a');
  let exit: string | undefined;
  try {
    // detached: own process group, so a terminal's Ctrl-C does not reach it and stop() can signal the whole group.
    const { command, args } = launchCommand(java, launch);
    const child = spawn(command, args, { cwd: launch.cwd, detached: true, stdio: ['ignore', fd, fd] });
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
    child.once('exit', (code, signal) => (exit = signal ? `killed by ${signal}` : `exit code ${code}`));
    child.unref(); // The server may outlive this Node process (`npm run servers -- start`).
    const pid = child.pid as number;
    await fsp.writeFile(paths.pid, `${pid}\n`);
    return { name, pid, pidFile: paths.pid, exitReason: () => exit };
  } finally {
    fs.closeSync(fd);
  }
}

export function pidProc(name: string, pid: number, pidFile: string): Proc {
  return { name, pid, pidFile, exitReason: () => (isAlive(pid) ? undefined : 'exited') };
}

/** Polls `def.check` until it passes; fails fast with the log tail when the process dies. */
export async function waitHealthy(
  def: ServerDef,
  paths: Paths,
  proc: Proc | undefined,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    const exit = proc?.exitReason();
    if (exit !== undefined) {
      throw new Error(`${def.id} stopped during startup (${exit}). ${await logTail(paths.log)}`);
    }
    try {
      await withTimeout(def.check(), Math.min(ATTEMPT_MS, Math.max(deadline - Date.now(), 1_000)), 'timed out');
      return;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const tail = proc ? ` ${await logTail(paths.log)}` : '';
      throw new Error(`${def.id} not healthy after ${timeoutMs / 1000}s: ${errorMessage(lastError)}.${tail}`);
    }
    await sleep(POLL_MS);
  }
}

export async function stopAll(procs: Proc[], progress: Progress): Promise<void> {
  await Promise.all(procs.splice(0).map((proc) => stopProc(proc, progress)));
}

/** SIGTERM lets each server shut down cleanly (Kafka and Cassandra flush); SIGKILL only after STOP_TIMEOUT_MS. */
async function stopProc(proc: Proc, progress: Progress): Promise<void> {
  const t0 = Date.now();
  if (proc.exitReason() === undefined) {
    progress(`${proc.name}: stopping (pid ${proc.pid})…`);
    signalGroup(proc.pid, 'SIGTERM');
    if (!(await waitForExit(proc, STOP_TIMEOUT_MS))) {
      progress(`${proc.name}: still running after ${STOP_TIMEOUT_MS / 1000}s, killing`);
      signalGroup(proc.pid, 'SIGKILL');
      await waitForExit(proc, 5_000);
    }
    progress(`${proc.name}: stopped in ${secondsSince(t0)}`);
  }
  await removePidFile(proc.pidFile, proc.pid);
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal); // The server is its group's leader (spawned detached).
  } catch {
    try {
      process.kill(pid, signal);
    } catch {
      // Already gone.
    }
  }
}

async function waitForExit(proc: Proc, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (proc.exitReason() === undefined) {
    if (Date.now() >= deadline) return false;
    await sleep(100);
  }
  return true;
}

/** The pid in `pidFile` if that process is alive and is one of ours (its command line mentions `root`). */
export async function livePid(pidFile: string, root: string): Promise<number | undefined> {
  const pid = Number.parseInt((await readText(pidFile)) ?? '', 10);
  if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return undefined;
  // A stale pid file may name a recycled pid; on Linux the command line tells whether it is still our server.
  const cmdline = await readText(`/proc/${pid}/cmdline`);
  if (cmdline !== undefined && !cmdline.includes(root)) return undefined;
  return pid;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  // A zombie (exited, not yet reaped by its parent) still accepts signal 0. But a JVM's main thread can be a zombie
  // while its other threads still shut down (and hold ports), so only a zombie without other threads is gone.
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.charAt(stat.lastIndexOf(')') + 2);
    return state !== 'Z' || fs.readdirSync(`/proc/${pid}/task`).length > 1;
  } catch {
    return true; // No /proc (macOS): signal 0 is all we know.
  }
}

export async function removePidFile(pidFile: string, pid?: number): Promise<void> {
  // Do not delete a pid file that meanwhile names another process (a concurrent start).
  if (pid !== undefined && (await readText(pidFile))?.trim() !== String(pid)) return;
  await fsp.rm(pidFile, { force: true });
}

async function logTail(file: string): Promise<string> {
  const text = (await readText(file)) ?? '';
  const lines = text.trimEnd().split('\n').slice(-LOG_TAIL_LINES);
  return `Last ${lines.length} lines of ${file}:\n${lines.join('\n')}`;
}

export function portAnswers(port: number, timeoutMs = 1_000, host = HOST): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export async function assertPortOpen(port: number, host = HOST): Promise<void> {
  if (!(await portAnswers(port, 1_000, host))) throw new Error(`nothing listens on ${host}:${port}`);
}
