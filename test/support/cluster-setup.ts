// Starts (or reuses) the local cluster once for the `cluster` project's files, and stops it at the end if it started
// it: each file and the chaos suite it runs then reuse it instead of starting and stopping their own.
import path from 'node:path';
import { repoRoot } from '../../infra/processes.ts';
import { ensureCluster, stopServers } from '../../infra/servers.ts';
import { clusterNodeList } from '../../infra/servers/cluster.ts';

export default async function setup() {
  const root = path.join(repoRoot, '.local');
  const progress = (line: string) => console.log(`[cluster] ${line}`);
  const servers = await ensureCluster({ root, progress });
  return async () => {
    // The faults kill nodes and start replacements through their own launcher calls, which nobody stops: when this
    // setup started the whole cluster, every node the pid files name now is stopped (a CI run once left two
    // replacement brokers running). A cluster that was already running stays as it is.
    if (servers.started.length === clusterNodeList().length) await stopServers(root, progress, 'cluster');
    else await servers.stop();
  };
}
