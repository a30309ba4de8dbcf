// The chaos suite's network partition (test/chaos/network-cut.ts) on real processes: two servers on their own loopback
// addresses that connect to each other, as two cluster nodes do, one of them cut off from the other. Needs root, as
// the chaos suite does (iptables, a net_cls cgroup).
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cannotCut, cutOff, droppedPackets, type CutNode } from '../chaos/network-cut.ts';

/**
 * A node: a server on `host` that answers "ok", and, asked over stdin, tries to connect to another node and prints
 * whether it did within 1 s (as a broker reaching a peer).
 */
const NODE_SCRIPT = `
const net = require('node:net');
const [host, port] = process.argv.slice(1);
net.createServer((socket) => socket.end('ok')).listen(Number(port), host, () => console.log('listening'));
let buffered = '';
process.stdin.on('data', (chunk) => {
  buffered += chunk;
  for (let end; (end = buffered.indexOf('\\n')) >= 0; buffered = buffered.slice(end + 1)) {
    const [toHost, toPort] = buffered.slice(0, end).split(' ');
    const socket = net.connect(Number(toPort), toHost);
    const timer = setTimeout(() => { socket.destroy(); console.log('unreachable'); }, 1000);
    socket.on('data', () => { clearTimeout(timer); socket.destroy(); console.log('reached'); });
    socket.on('error', () => { clearTimeout(timer); console.log('unreachable'); });
  }
});
`;

interface Node extends CutNode {
  port: number;
  child: ChildProcess;
  /** Asks this node to connect to `other`: 'reached' or 'unreachable'. */
  reach(other: Node): Promise<string>;
}

async function startNode(id: string, host: string): Promise<Node> {
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const child = spawn(process.execPath, ['-e', NODE_SCRIPT, host, String(port)], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  let partial = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    partial += chunk.toString();
    for (let end; (end = partial.indexOf('\n')) >= 0; partial = partial.slice(end + 1)) {
      const line = partial.slice(0, end);
      const next = waiting.shift();
      if (next) next(line);
      else lines.push(line);
    }
  });
  const nextLine = () =>
    new Promise<string>((resolve) => {
      const line = lines.shift();
      if (line !== undefined) resolve(line);
      else waiting.push(resolve);
    });
  expect(await nextLine()).toBe('listening');
  return {
    id,
    host,
    port,
    pid: child.pid!,
    child,
    reach: (other) => {
      child.stdin!.write(`${other.host} ${other.port}\n`);
      return nextLine();
    },
  };
}

/** Whether this process (outside both cgroups, as the services are) gets the node's answer. */
const clientReaches = (node: Node) =>
  new Promise<boolean>((resolve) => {
    const socket = net.connect(node.port, node.host);
    const timer = setTimeout(() => {
      socket.destroy();
      resolve(false);
    }, 1_000);
    socket.on('data', () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => {
      clearTimeout(timer);
      resolve(false);
    });
  });

describe('cutting a node off from its peers', () => {
  const runDir = fs.mkdtempSync(path.join(os.tmpdir(), 'network-cut-'));
  let nodes: Node[] = [];

  beforeAll(async () => {
    expect(cannotCut(runDir)).toBeUndefined();
    nodes = await Promise.all([
      startNode('node-1', '127.0.0.41'),
      startNode('node-2', '127.0.0.42'),
      startNode('node-3', '127.0.0.43'),
    ]);
  });

  afterAll(() => {
    for (const node of nodes) node.child.kill('SIGKILL');
    fs.rmSync(runDir, { recursive: true, force: true });
  });

  it('drops what the node and its peers send each other, both ways, while clients still reach every node', async () => {
    const [cut, peer, other] = nodes as [Node, Node, Node];
    expect(await cut.reach(peer)).toBe('reached');
    expect(await peer.reach(cut)).toBe('reached');

    const heal = cutOff(runDir, cut, [peer, other], 'test');
    try {
      expect(await cut.reach(peer)).toBe('unreachable');
      expect(await cut.reach(other)).toBe('unreachable');
      expect(await peer.reach(cut)).toBe('unreachable');
      expect(await other.reach(cut)).toBe('unreachable');
      // The peers still reach each other, and a client outside the cut reaches all three.
      expect(await peer.reach(other)).toBe('reached');
      expect(await Promise.all(nodes.map(clientReaches))).toEqual([true, true, true]);
      expect(droppedPackets('test')).toBeGreaterThan(0);
    } finally {
      heal();
    }

    expect(droppedPackets('test')).toBeUndefined();
    expect(await cut.reach(peer)).toBe('reached');
    expect(await other.reach(cut)).toBe('reached');
    // Healing twice is harmless (the chaos suite's exit handler may run after the fault's own finally), and nothing
    // is left mounted under the run directory (a mount there would make removing it fail).
    heal();
    expect(fs.readFileSync('/proc/mounts', 'utf8')).not.toContain(runDir);
  });
});
