/** Finding java and mvn, and fetching the servers from Maven Central once. */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Progress } from './server-def.ts';
import { readText, secondsSince, tail } from './util.ts';

/** The poms naming Kafka's and Cassandra's jars (infra/maven/). */
export const MAVEN_DIR = fileURLToPath(new URL('../maven/', import.meta.url));

/** Finds java and mvn lazily, so reusing running servers needs neither, and a finished download needs no mvn. */
export class Tools {
  private javaPath: Promise<string> | undefined;

  constructor(readonly progress: Progress) {}

  java(): Promise<string> {
    this.javaPath ??= findJava(this.progress);
    return this.javaPath;
  }

  which(name: string, what: string): string {
    const found = which(name);
    if (!found) throw new Error(`${name} not found on PATH: install ${what}.`);
    return found;
  }

  /** Maven shares ~/.m2 between the parallel downloads; a clash there is rare and a retry fixes it. */
  async mvn(args: string[]): Promise<void> {
    const mvn = which('mvn') ?? which('mvn.cmd');
    if (!mvn) {
      throw new Error(
        'mvn not found on PATH: install Apache Maven 3.6+ (e.g. `apt-get install maven` or `brew install maven`); ' +
          'it fetches Kafka, Cassandra and Apicurio from Maven Central once. Or set KAFKA_BROKERS, ' +
          'CASSANDRA_CONTACT_POINTS and SCHEMA_REGISTRY_URL to use servers you run yourself.',
      );
    }
    const full = ['-B', '-q', ...args];
    try {
      await this.run(mvn, full);
    } catch {
      await this.run(mvn, full);
    }
  }

  copyDependencies(pom: string, dist: string): Promise<void> {
    const lib = path.join(dist, 'lib');
    return this.mvn(['-f', pom, 'dependency:copy-dependencies', '-DincludeScope=runtime', `-DoutputDirectory=${lib}`]);
  }

  run(cmd: string, args: string[]): Promise<string> {
    return runCommand(cmd, args);
  }
}

/** Runs `fetch` into an emptied `dir` unless its marker holds `key` (the pom's hash, so pom edits re-download). */
export async function downloadOnce(name: string, dir: string, key: string, tools: Tools, fetch: () => Promise<void>) {
  const marker = path.join(dir, '.complete');
  if ((await readText(marker)) === key) return;
  const t0 = Date.now();
  tools.progress(`${name}: downloading from Maven Central into ${dir}…`);
  await fsp.rm(dir, { recursive: true, force: true });
  await fsp.mkdir(dir, { recursive: true });
  await fetch();
  await fsp.writeFile(marker, key);
  tools.progress(`${name}: downloaded in ${secondsSince(t0)}`);
}

async function findJava(progress: Progress): Promise<string> {
  const home = process.env.JAVA_HOME;
  const fromHome = home ? path.join(home, 'bin', process.platform === 'win32' ? 'java.exe' : 'java') : undefined;
  const java = fromHome && fs.existsSync(fromHome) ? fromHome : which('java');
  if (!java) {
    throw new Error(
      'java not found (JAVA_HOME unset or wrong, and no java on PATH): install a Java 17 runtime, e.g. ' +
        '`apt-get install openjdk-17-jre-headless` or `brew install openjdk@17`, or set JAVA_HOME.',
    );
  }
  const out = await runCommand(java, ['-version']);
  const match = /version "(\d+)(?:\.(\d+))?/.exec(out);
  const major = match ? (match[1] === '1' ? Number(match[2]) : Number(match[1])) : 0;
  if (major < 17) {
    throw new Error(`${java} is Java ${major || '(unknown version)'}; Apicurio 3 needs Java 17 (install OpenJDK 17).`);
  }
  if (major !== 17) progress(`servers: warning: Java ${major} at ${java}; Cassandra 5.0 is only tested on Java 17`);
  return java;
}

function which(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.statSync(candidate).isFile()) return candidate;
    } catch {
      // Not here.
    }
  }
  return undefined;
}

/** Runs a short command; resolves with its combined output, rejects with the output's tail on failure. */
function runCommand(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const collect = (chunk: Buffer): void => {
      output = (output + chunk.toString()).slice(-20_000);
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    child.once('error', reject);
    child.once('close', (code) => {
      if (code === 0) resolve(output);
      else reject(new Error(`${path.basename(cmd)} ${args.join(' ')} failed (exit ${code}):\n${tail(output)}`));
    });
  });
}
