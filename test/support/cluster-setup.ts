// Starts (or reuses) the local cluster once for the `cluster` project's files, and stops what it started at the end:
// each file and the chaos suite it runs then reuse it instead of starting and stopping their own.
import path from 'node:path';
import { repoRoot } from '../../infra/processes.ts';
import { ensureCluster } from '../../infra/servers.ts';

export default async function setup() {
  const servers = await ensureCluster({
    root: path.join(repoRoot, '.local'),
    progress: (line) => console.log(`[cluster] ${line}`),
  });
  return () => servers.stop();
}
