/**
 * The container image, built here: `npm run image` (or the image test project) starts a Docker engine when none
 * answers and this user may (root, Debian's docker.io), makes the Node base image when `NODE_IMAGE` names none, and
 * builds the Dockerfile with it.
 *
 * Where a registry is reachable the Dockerfile's default base, node:24-slim, is pulled and none of this is needed:
 * `docker build .` is the whole build (README "Deploying to Kubernetes"). Where none is (this machine, CI), the base is
 * made from Debian's packages: debootstrap's minimal Debian of the machine's release, the Node binary this process
 * runs (the one .node-version names), npm from the npm registry, and the unprivileged user `node` (1000:1000) as in
 * node:24-slim; `docker import` turns the folder into the image `core-webhooks-node:<version>`, and its tarball is kept
 * in ~/.cache/core-webhooks so a machine makes it once.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, createWriteStream, existsSync, mkdirSync, openSync, readFileSync } from 'node:fs';
import { copyFile, cp, mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { nodeFlagsFor, repoRoot, serviceProcess, type ServiceProcess } from './processes.ts';

const run = promisify(execFile);
type Progress = (line: string) => void;

/** The tag `npm run image` and the image tests build. */
export const LOCAL_IMAGE = 'core-webhooks:local';
const cacheDir = path.join(process.env.XDG_CACHE_HOME ?? path.join(homedir(), '.cache'), 'core-webhooks');

/**
 * The Docker client command that builds with BuildKit. With the legacy builder every instruction copies the whole
 * file system once more on the vfs storage driver (3 min 40 s for this Dockerfile here, against 65 s with BuildKit).
 * A client with the buildx plugin uses it; Debian's docker.io client (20.10) has BuildKit built in.
 */
async function buildClient(): Promise<{ command: string; env: NodeJS.ProcessEnv }> {
  const works = (command: string, args: string[]) =>
    run(command, args, { timeout: 10_000 }).then(
      () => true,
      () => false,
    );
  if (await works('docker', ['buildx', 'version'])) return { command: 'docker', env: process.env };
  const builtIn = ['/usr/bin/docker', 'docker'];
  for (const command of builtIn) {
    const version = await run(command, ['version', '--format', '{{.Client.Version}}'], { timeout: 10_000 }).then(
      ({ stdout }) => stdout.trim(),
      () => '',
    );
    // BuildKit inside the client itself went away with Docker 23, which needs buildx instead.
    if (version && Number(version.split('.')[0]) < 23) {
      return { command, env: { ...process.env, DOCKER_BUILDKIT: '1' } };
    }
  }
  return { command: 'docker', env: { ...process.env, DOCKER_BUILDKIT: '0' } };
}

/** A Docker engine answering `docker info`; started (and then stopped by `stop()`) when none did and it can be. */
export async function ensureEngine(progress: Progress): Promise<{ started: boolean; stop(): Promise<void> }> {
  const answers = () =>
    run('docker', ['info', '--format', '{{.ServerVersion}}'], { timeout: 10_000 }).then(
      () => true,
      () => false,
    );
  if (await answers()) return { started: false, stop: async () => {} };
  const dockerd = ['/usr/sbin/dockerd', '/usr/bin/dockerd'].find((file) => existsSync(file));
  if (!dockerd || process.getuid?.() !== 0) {
    throw new Error(
      'no Docker engine answers and none can be started here: as root, install Debian\'s docker.io ("apt-get install docker.io debootstrap"), or start an engine',
    );
  }
  // vfs: no overlay file system is needed (it works inside a container); no iptables rules and no bridge: containers
  // run with --network host, and every build step too.
  const logFile = path.join(repoRoot, '.local', 'logs', 'dockerd.log');
  mkdirSync(path.dirname(logFile), { recursive: true });
  progress(`starting the Docker engine (${dockerd}, vfs storage; log in ${logFile})`);
  // Its own process group, writing straight to the log: it outlives `npm run image`, for the `docker run` after it.
  const out = openSync(logFile, 'a');
  const engine = spawn(dockerd, ['--storage-driver=vfs', '--iptables=false', '--bridge=none'], {
    stdio: ['ignore', out, out],
    detached: true,
  });
  closeSync(out);
  engine.unref();
  const exited = new Promise<void>((resolve) => engine.once('exit', () => resolve()));
  const deadline = Date.now() + 60_000;
  while (!(await answers())) {
    if (engine.exitCode !== null) throw new Error(`dockerd exited with ${engine.exitCode}: see ${logFile}`);
    if (Date.now() > deadline) throw new Error(`dockerd did not answer within 60 s: see ${logFile}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return {
    started: true,
    stop: async () => {
      engine.kill('SIGTERM');
      await exited;
    },
  };
}

async function imageExists(image: string): Promise<boolean> {
  return run('docker', ['image', 'inspect', image], { timeout: 30_000 }).then(
    () => true,
    () => false,
  );
}

/**
 * The base image: NODE_IMAGE when set (an operator's own), else core-webhooks-node:<node version>, loaded from its
 * cached tarball or made from Debian's packages (module comment).
 */
export async function ensureBaseImage(progress: Progress): Promise<string> {
  if (process.env.NODE_IMAGE) return process.env.NODE_IMAGE;
  const nodeVersion = process.versions.node;
  const image = `core-webhooks-node:${nodeVersion}`;
  if (await imageExists(image)) return image;
  const release = /^VERSION_CODENAME=(\w+)$/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? 'bookworm';
  const tarball = path.join(cacheDir, `node-${nodeVersion}-${release}.tar`);
  if (!existsSync(tarball)) await makeBaseTarball(tarball, release, progress);
  progress(`importing ${tarball} as ${image}`);
  await run(
    'docker',
    [
      'import',
      '--change',
      'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      '--change',
      'CMD ["node"]',
      tarball,
      image,
    ],
    { timeout: 300_000 },
  );
  return image;
}

async function makeBaseTarball(tarball: string, release: string, progress: Progress): Promise<void> {
  const work = path.join(cacheDir, `node-base-${process.pid}`);
  const rootfs = path.join(work, 'rootfs');
  await rm(work, { recursive: true, force: true });
  await mkdir(work, { recursive: true });
  try {
    const mirror = process.env.DEBIAN_MIRROR ?? 'http://deb.debian.org/debian';
    progress(`making the Node base image: debootstrap --variant=minbase ${release} from ${mirror}`);
    await run('debootstrap', ['--variant=minbase', release, rootfs, mirror], {
      timeout: 900_000,
      maxBuffer: 64 << 20,
    }).catch((error: Error & { stderr?: string }) => {
      throw new Error(`debootstrap failed (is Debian's debootstrap installed, and are we root?): ${error.message}`);
    });
    for (const leftover of [
      'var/cache/apt',
      'var/lib/apt/lists',
      'usr/share/doc',
      'usr/share/man',
      'usr/share/locale',
    ]) {
      await rm(path.join(rootfs, leftover), { recursive: true, force: true });
    }
    // Node: the binary this process runs (self-contained); npm: the version this machine's npm is, from the registry.
    const local = path.join(rootfs, 'usr', 'local');
    await mkdir(path.join(local, 'bin'), { recursive: true });
    await copyFile(process.execPath, path.join(local, 'bin', 'node'));
    const npmVersion = (await run('npm', ['--version'])).stdout.trim();
    progress(`adding Node ${process.version} and npm ${npmVersion}`);
    await run('npm', ['pack', '--silent', `npm@${npmVersion}`], { cwd: work, timeout: 300_000 });
    const modules = path.join(local, 'lib', 'node_modules');
    await mkdir(modules, { recursive: true });
    await run('tar', ['xzf', path.join(work, `npm-${npmVersion}.tgz`), '-C', modules]);
    await cp(path.join(modules, 'package'), path.join(modules, 'npm'), { recursive: true });
    await rm(path.join(modules, 'package'), { recursive: true });
    await symlink('../lib/node_modules/npm/bin/npm-cli.js', path.join(local, 'bin', 'npm'));
    await symlink('../lib/node_modules/npm/bin/npx-cli.js', path.join(local, 'bin', 'npx'));
    // The build stage's npm trusts what this machine trusts (a machine behind a TLS-inspecting proxy has its own
    // authority in the bundle); only npm reads this file, so the services keep Node's own authorities.
    const bundle = '/etc/ssl/certs/ca-certificates.crt';
    if (existsSync(bundle)) {
      await mkdir(path.join(rootfs, 'etc', 'ssl', 'certs'), { recursive: true });
      await copyFile(bundle, path.join(rootfs, bundle));
      await mkdir(path.join(local, 'etc'), { recursive: true });
      await writeFile(path.join(local, 'etc', 'npmrc'), `cafile=${bundle}\n`);
    }
    await run('chroot', [rootfs, 'groupadd', '--gid', '1000', 'node']);
    await run('chroot', [
      rootfs,
      'useradd',
      '--uid',
      '1000',
      '--gid',
      'node',
      '--create-home',
      '--shell',
      '/bin/sh',
      'node',
    ]);
    const partial = `${tarball}.partial`;
    await run('tar', ['-C', rootfs, '--numeric-owner', '-cf', partial, '.'], { timeout: 300_000 });
    await run('mv', [partial, tarball]);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** Builds the Dockerfile as `tag` on `base` (every step on the host's network: no bridge here); returns the tag. */
export async function buildImage(tag: string, base: string, progress: Progress): Promise<string> {
  const client = await buildClient();
  const logFile = path.join(repoRoot, '.local', 'logs', 'image-build.log');
  mkdirSync(path.dirname(logFile), { recursive: true });
  progress(`building ${tag} on ${base} (log in ${logFile})`);
  const started = Date.now();
  const child = spawn(
    client.command,
    ['build', '--network', 'host', '--build-arg', `NODE_IMAGE=${base}`, '--tag', tag, '.'],
    { cwd: repoRoot, env: client.env, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const log = createWriteStream(logFile);
  child.stdout.pipe(log);
  child.stderr.pipe(log);
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  if (code !== 0) {
    const tail = readFileSync(logFile, 'utf8').split('\n').slice(-20).join('\n');
    throw new Error(`docker build exited with ${code}; the end of ${logFile}:\n${tail}`);
  }
  progress(`built ${tag} in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  return tag;
}

/**
 * Runs a service of `image` as the chart would, but on the host's network (`--network host`: the local servers, the
 * identity provider and the receivers listen on 127.0.0.1): `docker run` in the foreground, its output appended to
 * `logFile`, SIGTERM forwarded to the service by the client (`stop()`), the container removed when it ends. Only the
 * variables in `env` reach the container (by name: the client reads their values from its own environment, so no
 * secret shows in a process list), with the service's Node flags (SERVICE_NODE_FLAGS) as NODE_OPTIONS.
 */
export function containerLauncher(image: string) {
  return (name: string, entry: string, env: Record<string, string>, logFile: string): ServiceProcess => {
    const container = `core-webhooks-${name}-${randomBytes(4).toString('hex')}`;
    const flags = nodeFlagsFor(entry, env);
    const variables = { ...env, ...(flags.length > 0 ? { NODE_OPTIONS: flags.join(' ') } : {}) };
    const child = spawn(
      'docker',
      [
        'run',
        '--rm',
        '--name',
        container,
        '--network',
        'host',
        ...Object.keys(variables).flatMap((key) => ['--env', key]),
        image,
        `dist/${entry.replace(/\.ts$/, '.js')}`,
      ],
      { env: { ...process.env, ...variables }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const service = serviceProcess(name, child, logFile, () => void run('docker', ['kill', container]).catch(() => {}));
    return {
      ...service,
      stop: async (graceMs?: number) => {
        await service.stop(graceMs);
        await run('docker', ['rm', '--force', container]).catch(() => {});
      },
    };
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const tag = process.argv[2] ?? LOCAL_IMAGE;
  const log = (line: string) => console.log(line);
  try {
    await ensureEngine(log);
    await buildImage(tag, await ensureBaseImage(log), log);
    log(`run a service: docker run --rm --network host --env-file <file> ${tag} dist/api/main.js`);
  } catch (error) {
    console.error(error instanceof Error ? error.message : String(error));
    process.exitCode = 1;
  }
}
