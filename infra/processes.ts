import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Supervisor, type SupervisedChild, type SupervisorOptions } from './supervisor.ts';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** A service started as its own Node process, with its output in a log file. */
export interface ServiceProcess {
  name: string;
  child: ChildProcess;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when the process has exited. */
  stop(graceMs?: number): Promise<void>;
  exited: Promise<number | null>;
}

/**
 * Node flags a service runs with, by entry. The router allocates short-lived objects per delivery: a young generation
 * of 32 MB semi-spaces (V8's default is 16) halves its scavenges. Alternated on this 2-core machine, with both services
 * at 32 it gave 9 % more deliveries/s (5,126-5,346 against 4,639-4,958), a lower p99 at 2,500/s (100 and 109 ms against
 * 270 and 125) and no measurable change at 500/s (p99 19-26 against 19-27 ms), for 20-30 MB more RSS each. The
 * dispatcher has 16 (V8's default, said explicitly): its RSS is bounded (300 MB with ten times the isolation mix, issue 27), and 32 MB
 * semi-spaces cost it 32 MB there (301 against 269 MB) while runs alternated with it at 16 and 32 did not separate:
 * at 1,000/s p99 51 and 73 against 81 and 89 ms, RSS 196-199 against 218-224 MB (session 44; the earlier full-speed
 * pairs, 1,471 and 1,259 against 1,257 and 1,608 deliveries/s, ran into the overflow defect 6a980ed fixed, which
 * parked every burst's backlog). The chart's values give the same flags as
 * NODE_OPTIONS (infra/deploy/manifests.test.ts checks they agree). The router also sets V8's heap growing factor at
 * start (ROUTER_HEAP_GROWTH_PERCENT, core/heap-growth.ts), which NODE_OPTIONS refuses: with semi-spaces this large it
 * otherwise collected its old generation every 2 s.
 */
export const SERVICE_NODE_FLAGS: Readonly<Record<string, readonly string[]>> = {
  'router/main.ts': ['--max-semi-space-size=32'],
  'dispatcher/main.ts': ['--max-semi-space-size=16'],
};

/** The Node flags `entry` runs with: its SERVICE_NODE_FLAGS, then CORE_NODE_FLAGS (diagnostics), which win. */
export function nodeFlagsFor(entry: string, env: NodeJS.ProcessEnv): string[] {
  const extra = env.CORE_NODE_FLAGS ? env.CORE_NODE_FLAGS.split(/\s+/).filter(Boolean) : [];
  return [...(SERVICE_NODE_FLAGS[entry] ?? []), ...extra];
}

/** How a service runs: its TypeScript through tsx, or its compiled JavaScript in dist/ (`npm run build` first). */
export type ServiceRuntime = 'tsx' | 'compiled';

/**
 * Runs `<entry>` (a .ts file relative to the repo) under the given environment: with tsx, or as the compiled
 * dist/<entry>.js, as production runs it (`runtime: 'compiled'`, after buildServices()).
 */
export function spawnService(
  name: string,
  entry: string,
  env: NodeJS.ProcessEnv,
  logFile: string,
  runtime: ServiceRuntime = 'tsx',
): ServiceProcess {
  // CORE_CPU_PROF_DIR=<dir> writes a V8 CPU profile of each service there when it exits (npm run bench uses it), and
  // CORE_NODE_FLAGS adds Node flags (diagnostics such as --trace-gc, whose output goes to the log file).
  const profile = env.CORE_CPU_PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${env.CORE_CPU_PROF_DIR}`] : [];
  const program =
    runtime === 'compiled'
      ? [path.join(repoRoot, 'dist', entry.replace(/\.ts$/, '.js'))]
      : ['--import', 'tsx', path.join(repoRoot, entry)];
  const child = spawn(process.execPath, [...profile, ...nodeFlagsFor(entry, env), ...program], {
    cwd: repoRoot,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return serviceProcess(name, child, logFile, () => child.kill('SIGKILL'));
}

/**
 * A started service `child` (its output piped) as a ServiceProcess: its output appended to `logFile`; stop() sends
 * SIGTERM and, if it has not exited `graceMs` later, calls `kill`.
 */
export function serviceProcess(name: string, child: ChildProcess, logFile: string, kill: () => void): ServiceProcess {
  mkdirSync(path.dirname(logFile), { recursive: true });
  const log = createWriteStream(logFile, { flags: 'a' });
  child.stdout?.pipe(log);
  child.stderr?.pipe(log);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    name,
    child,
    exited,
    stop: async (graceMs = 20_000) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(kill, graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * Runs `<entry>` as spawnService does (tsx unless `options.runtime` says compiled), under a Supervisor: restarted with backoff whenever it exits unasked, until
 * the supervisor is stopped. Each incarnation appends to the same log file.
 */
export function superviseService(
  name: string,
  entry: string,
  env: NodeJS.ProcessEnv,
  logFile: string,
  options: Omit<SupervisorOptions, 'name' | 'spawn'> & { runtime?: ServiceRuntime },
): Supervisor {
  const { runtime, ...supervision } = options;
  const supervisor = new Supervisor({
    ...supervision,
    name,
    spawn: (): SupervisedChild => {
      const service = spawnService(name, entry, env, logFile, runtime);
      return {
        pid: service.child.pid,
        exited: service.exited.then((code) => ({ code, signal: service.child.signalCode })),
        stop: () => service.stop(),
      };
    },
  });
  supervisor.start();
  return supervisor;
}

/** Polls `url` until it answers below 500, or fails with `what` after `timeoutMs`. */
export async function waitForHttp(
  url: string,
  what: string,
  timeoutMs: number,
  exited?: Promise<unknown>,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let gone = false;
  void exited?.then(() => (gone = true));
  while (Date.now() < deadline) {
    if (gone) throw new Error(`${what} exited before it was ready`);
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      if (response.status < 500) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error(`${what} was not ready at ${url} within ${timeoutMs} ms`);
}

const FIRST_PORT = 20_000;
const LAST_PORT = 32_767;

/**
 * A port free on 127.0.0.1 now, for a server started next (a service's METRICS_PORT, a receiver). It is drawn below
 * the kernel's ephemeral range (32768 and up): a port the kernel handed out for listen(0) and that was closed again
 * could be taken, before the server binds it, as the local port of any outgoing connection (the suite opens thousands),
 * and the service then died at start with EADDRINUSE. Below that range only another explicit bind can take it.
 */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = FIRST_PORT + Math.floor(Math.random() * (LAST_PORT - FIRST_PORT + 1));
    const probe = createServer();
    const bound = await new Promise<boolean>((resolve) => {
      probe.once('error', () => resolve(false));
      probe.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (!bound) continue;
    await new Promise((resolve) => probe.close(resolve));
    return port;
  }
}
