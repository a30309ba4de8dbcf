// A cluster test file's hooks: the local cluster ensured before its tests (started if not running; test/cluster's
// global setup has usually started it) and, after them, what the file itself started stopped.
import path from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { repoRoot } from '../../infra/processes.ts';
import { ensureCluster, type StartedServers } from '../../infra/servers.ts';

export const clusterRoot = path.join(repoRoot, '.local');

/** Registers the hooks; the returned function gives the cluster's servers once `beforeAll` has run. */
export function useCluster(say: (line: string) => void, beforeStop?: () => Promise<void>): () => StartedServers {
  let servers: StartedServers | undefined;
  beforeAll(async () => {
    servers = await ensureCluster({ root: clusterRoot, progress: say });
  }, 600_000);
  afterAll(async () => {
    await beforeStop?.();
    await servers?.stop();
  }, 600_000);
  return () => {
    if (!servers) throw new Error('the cluster is not started yet (useCluster’s beforeAll has not run)');
    return servers;
  };
}
