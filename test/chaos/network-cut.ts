// A network partition between the local cluster's nodes while their processes run (issue 30's "cut off" faults).
//
// Each node has its own loopback address, but the kernel gives their outgoing connections 127.0.0.1 as source, so an
// address cannot tell whose packet it is: a rule on addresses alone would cut the clients too, or nothing. A net_cls
// cgroup can tell: the cut node's JVM goes into one (its own classid), its peers' JVMs into another, and iptables
// drops on OUTPUT (loopback traffic passes it once, as its sender sends it) what the cut node sends to its peers'
// addresses and what they send to its address. Connections between them stall as in a real partition (packets
// dropped, no reset); the services, in neither cgroup, still reach every node, as when a link between racks fails and
// the clients' does not, the case that can split a cluster's brain.
//
// Needs root, iptables and the net_cls controller (mounted here under .local/run/net_cls when the machine has not
// mounted it). Undone synchronously, so that it can also run from an exit handler.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** Its iptables chain and its two cgroups (and their classids): the chaos suite's, or the test's of this module. */
const SCOPES = {
  chaos: { chain: 'CORE-WEBHOOKS-CUT', cut: 0x00c70001, peers: 0x00c70002 },
  test: { chain: 'CORE-WEBHOOKS-CUT-TEST', cut: 0x00c70003, peers: 0x00c70004 },
} as const;
export type CutScope = keyof typeof SCOPES;

export interface CutNode {
  id: string;
  pid: number;
  host: string;
}

const iptables = (...args: string[]) => execFileSync('iptables', args, { stdio: ['ignore', 'pipe', 'pipe'] });

/** Why a cut cannot be made on this machine, or undefined if it can. */
export function cannotCut(runDir: string): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (iptables and a net_cls cgroup)';
  try {
    iptables('-S', 'OUTPUT');
    netClsRoot(runDir).release();
    return undefined;
  } catch (error) {
    return `cannot cut a node off here: ${error instanceof Error ? error.message.split('\n')[0] : String(error)}`;
  }
}

/**
 * The net_cls hierarchy's mount point: the machine's, or one mounted under `runDir`, which `release` unmounts (a
 * mount left there would make `rm -rf .local` fail) once no cgroup of ours is left in it.
 */
function netClsRoot(runDir: string): { root: string; release: () => void } {
  const own = path.join(runDir, 'net_cls');
  const release = () => {
    if (!fs.readFileSync('/proc/mounts', 'utf8').includes(` ${own} cgroup `)) return;
    const groups = fs.readdirSync(own, { withFileTypes: true }).filter((entry) => entry.isDirectory());
    if (groups.length > 0) return;
    execFileSync('umount', [own]);
    fs.rmdirSync(own);
  };
  for (const line of fs.readFileSync('/proc/mounts', 'utf8').split('\n')) {
    const [, mountPoint, type, options] = line.split(' ');
    if (type === 'cgroup' && options?.split(',').includes('net_cls')) return { root: mountPoint!, release };
  }
  fs.mkdirSync(own, { recursive: true });
  execFileSync('mount', ['-t', 'cgroup', '-o', 'net_cls', 'net_cls', own]);
  return { root: own, release };
}

function enter(root: string, group: string, classid: number, pids: number[]): void {
  const dir = path.join(root, group);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'net_cls.classid'), String(classid));
  // cgroup.procs moves every thread of the process (a JVM's hundred threads with it).
  for (const pid of pids) fs.writeFileSync(path.join(dir, 'cgroup.procs'), String(pid));
}

const groupsOf = (scope: CutScope) => ({
  cut: `${SCOPES[scope].chain.toLowerCase()}-node`,
  peers: `${SCOPES[scope].chain.toLowerCase()}-peers`,
});

/**
 * Cuts `node` off from `peers` (both ways) until the returned function is called. The services still reach every
 * node. Returns the undo, which is idempotent and synchronous.
 */
export function cutOff(runDir: string, node: CutNode, peers: CutNode[], scope: CutScope = 'chaos'): () => void {
  const { root, release } = netClsRoot(runDir);
  const { chain, cut, peers: peersClassid } = SCOPES[scope];
  const groups = groupsOf(scope);
  const undo = () => {
    heal(root, scope);
    release();
  };
  heal(root, scope); // a cut left by a run that was killed
  try {
    enter(root, groups.cut, cut, [node.pid]);
    enter(
      root,
      groups.peers,
      peersClassid,
      peers.map((peer) => peer.pid),
    );
    iptables('-N', chain);
    for (const peer of peers) {
      iptables('-A', chain, '-m', 'cgroup', '--cgroup', String(cut), '-d', peer.host, '-j', 'DROP');
    }
    iptables('-A', chain, '-m', 'cgroup', '--cgroup', String(peersClassid), '-d', node.host, '-j', 'DROP');
    iptables('-I', 'OUTPUT', '1', '-j', chain);
  } catch (error) {
    undo();
    throw error;
  }
  return undo;
}

/** Removes the rules and puts every process of the two cgroups back in the hierarchy's root. */
function heal(root: string, scope: CutScope): void {
  const { chain } = SCOPES[scope];
  try {
    iptables('-D', 'OUTPUT', '-j', chain);
  } catch {
    // not linked: no cut
  }
  try {
    iptables('-F', chain);
    iptables('-X', chain);
  } catch {
    // no chain
  }
  for (const group of Object.values(groupsOf(scope))) {
    const dir = path.join(root, group);
    if (!fs.existsSync(dir)) continue;
    for (const pid of fs.readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) {
      try {
        fs.writeFileSync(path.join(root, 'cgroup.procs'), pid);
      } catch {
        // exited meanwhile
      }
    }
    fs.rmdirSync(dir);
  }
}

/** Packets the cut has dropped so far (from iptables' counters), or undefined when no cut is in place. */
export function droppedPackets(scope: CutScope = 'chaos'): number | undefined {
  try {
    const listing = iptables('-L', SCOPES[scope].chain, '-v', '-x', '-n').toString();
    return listing
      .split('\n')
      .filter((line) => line.includes('DROP'))
      .reduce((sum, line) => sum + Number(line.trim().split(/\s+/)[0] ?? 0), 0);
  } catch {
    return undefined;
  }
}
