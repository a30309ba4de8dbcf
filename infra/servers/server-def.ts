/** What every local server provides (see kafka.ts, cassandra.ts, apicurio.ts), and where its files live. */
import path from 'node:path';
import type { Tools } from './download.ts';

export type Progress = (line: string) => void;

export type ServerName = 'kafka' | 'cassandra' | 'apicurio';

export const HOST = '127.0.0.1';
export const LOCAL_DC = 'datacenter1';

export interface Paths {
  root: string;
  dist: string;
  conf: string;
  data: string;
  log: string;
  pid: string;
}

export interface Launch {
  args: string[];
  cwd: string;
  /**
   * Timer slack of the JVM's threads, in ns (Linux; the kernel's default is 50,000): how late the kernel may end their
   * timed sleeps, so how often a thread that sleeps in short steps wakes up. See cassandra.ts for why one asks for it.
   */
  timerSlackNs?: number;
}

export interface ServerDef {
  /** The kind of server: its download (dist/<name>) and what its health check proves. */
  name: ServerName;
  /** The process: its config, data, log and pid file (`kafka`, or a cluster node's `cluster/kafka-2`). */
  id: string;
  /** The address it listens on (127.0.0.1, or a cluster node's own loopback address). */
  host: string;
  envVar: 'KAFKA_BROKERS' | 'CASSANDRA_CONTACT_POINTS' | 'SCHEMA_REGISTRY_URL';
  portVar: string;
  port: number;
  address: string;
  startupMs: number;
  /** Fetches the server into paths.dist unless its marker says that already happened. */
  download(paths: Paths, tools: Tools): Promise<void>;
  /** Writes config files, does one-time initialisation and returns the command line. */
  prepare(paths: Paths, tools: Tools): Promise<Launch>;
  /** Resolves when the server answers a real request; rejects otherwise. */
  check(): Promise<void>;
}

/** Where server `id` (a kind's name, or a cluster node's `cluster/<name>-<n>`) keeps its files; `name` picks the download. */
export function pathsFor(root: string, name: ServerName, id: string = name): Paths {
  return {
    root,
    dist: path.join(root, 'dist', name),
    conf: path.join(root, 'conf', id),
    data: path.join(root, 'data', id),
    log: path.join(root, 'logs', `${id}.log`),
    pid: path.join(root, 'run', `${id}.pid`),
  };
}

export function registryUrl(port: number, host = HOST): string {
  return `http://${host}:${port}/apis/ccompat/v7`;
}
