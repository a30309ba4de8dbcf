// Faults on the shared local servers (.local/run/*.pid): kill -9 and restart with the same launcher as `npm start`
// (infra/servers.ts ensureServers), SIGSTOP/SIGCONT. Every fault registers how to undo it before doing it; undo() runs
// from the fault's own finally, from the suite's finally, on SIGINT/SIGTERM, and (SIGCONT only) on process exit.
import path from 'node:path';
import { ensureServers, type ServerName } from '../../infra/servers.ts';
import { livePid } from '../../infra/servers/process.ts';
import { pathsFor } from '../../infra/servers/server-def.ts';
import { cutOff, type CutNode } from './network-cut.ts';

const ENV_VARS: Record<ServerName, string> = {
  kafka: 'KAFKA_BROKERS',
  cassandra: 'CASSANDRA_CONTACT_POINTS',
  apicurio: 'SCHEMA_REGISTRY_URL',
};

interface Undo {
  what: string;
  /** Synchronous part, safe in an 'exit' handler (signals only). */
  sync?: () => void;
  run: () => Promise<void>;
}

const pending = new Map<string, Undo>();

/**
 * The pid of a server started by this repository's launcher (`id`: a cluster node's, such as `cluster/kafka-2`), or
 * why there is none (the fault cannot be done).
 */
export async function serverPid(root: string, name: ServerName, id: string = name): Promise<number | string> {
  const variable = ENV_VARS[name];
  if (id === name && process.env[variable]) {
    return `${variable} is set: ${name} is external, no process to signal or restart`;
  }
  const pidFile = pathsFor(root, name, id).pid;
  const pid = await livePid(pidFile, root);
  if (pid === undefined) {
    return `no live pid in ${path.relative(process.cwd(), pidFile)}: ${id} was not started by infra/servers.ts, so it cannot be restarted by the same launcher`;
  }
  return pid;
}

function signal(pid: number, sig: NodeJS.Signals, group: boolean): void {
  try {
    process.kill(group ? -pid : pid, sig);
  } catch {
    try {
      process.kill(pid, sig);
    } catch {
      // already gone
    }
  }
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/**
 * kill -9 of the server's process group (`name`: the server, or a cluster node's id); the undo restarts it with
 * `relaunch`, by default ensureServers (same launcher, same pid file).
 */
export async function killServer(
  root: string,
  name: string,
  pid: number,
  say: (line: string) => void,
  relaunch: (progress: (line: string) => void) => Promise<unknown> = (progress) => ensureServers({ root, progress }),
): Promise<void> {
  pending.set(name, {
    what: `restart ${name}`,
    run: async () => {
      say(`${name}: restarting with infra/servers.ts`);
      // Only the missing server is spawned; the others are reused. stop() is never called: it stays up for everyone.
      await relaunch((line) => say(`  ${line}`));
    },
  });
  signal(pid, 'SIGKILL', true);
  const deadline = Date.now() + 10_000;
  while (alive(pid) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
}

/** SIGSTOP of the server; the undo is SIGCONT. */
export function freezeServer(name: string, pid: number): void {
  const thaw = () => signal(pid, 'SIGCONT', false);
  pending.set(name, { what: `SIGCONT ${name} (pid ${pid})`, sync: thaw, run: async () => thaw() });
  signal(pid, 'SIGSTOP', false);
}

/** Cuts `node` off from `peers` (network-cut.ts: both ways; the services still reach it); the undo heals the cut. */
export function cutServer(runDir: string, node: CutNode, peers: CutNode[]): void {
  const heal = cutOff(runDir, node, peers);
  pending.set(node.id, { what: `heal the cut of ${node.id}`, sync: heal, run: async () => heal() });
}

/** Undoes the fault on `name` if one is pending (idempotent). */
export async function restore(name: string): Promise<void> {
  const undo = pending.get(name);
  if (!undo) return;
  pending.delete(name);
  try {
    await undo.run();
  } catch (error) {
    pending.set(name, undo); // tried again by restoreAll
    throw error;
  }
}

/** Undoes every pending fault; errors are reported, not thrown, so every undo is tried. */
export async function restoreAll(say: (line: string) => void): Promise<void> {
  for (const name of [...pending.keys()]) {
    const what = pending.get(name)!.what;
    try {
      await restore(name);
      say(`restored: ${what}`);
    } catch (error) {
      say(`COULD NOT ${what}: ${error instanceof Error ? error.message : String(error)} — do it by hand`);
    }
  }
}

/** On SIGINT/SIGTERM: undo the faults, then `cleanup` (bounded), then exit. On exit: SIGCONT whatever is frozen. */
export function installSignalHandlers(say: (line: string) => void, cleanup: () => Promise<void>): void {
  let handling = false;
  const onSignal = (sig: NodeJS.Signals) => {
    if (handling) return;
    handling = true;
    say(`${sig}: restoring the servers before leaving`);
    void restoreAll(say)
      .then(() => Promise.race([cleanup(), new Promise((resolve) => setTimeout(resolve, 30_000))]))
      .finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.on('SIGHUP', onSignal);
  process.on('exit', () => {
    for (const undo of pending.values()) undo.sync?.();
  });
}

/** SIGTERM of the server's process group (a clean stop), waiting up to `timeoutMs` for it to exit; false if it did not. */
export async function terminateServer(pid: number, timeoutMs: number): Promise<boolean> {
  signal(pid, 'SIGTERM', true);
  const deadline = Date.now() + timeoutMs;
  while (alive(pid)) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return true;
}
