/**
 * Offline validators for the Helm chart in infra/deploy: helm and kubeconform built from the Go module proxy (and
 * promtool, for the alerting rules of infra/monitoring), and
 * JSON schemas for kubeconform generated from the Kubernetes OpenAPI document (api/openapi-spec/swagger.json of the
 * k8s.io/kubernetes module) and from KEDA's ScaledObject CRD (config/crd of the github.com/kedacore/keda/v2 module),
 * both fetched as Go modules. Everything is cached in the user's cache directory, as Maven's ~/.m2 keeps the servers'
 * jars (~/.cache/core-webhooks: binaries in bin/, modules in go/, schemas in k8s-schemas/), so only the first run on a
 * machine downloads and compiles, and every clone shares it (binaries are stamped by version). Any failure throws:
 * nothing is skipped.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { withDirLock } from '../dir-lock.ts';

const run = promisify(execFile);

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const local = path.join(process.env.XDG_CACHE_HOME || path.join(homedir(), '.cache'), 'core-webhooks');
export const binDir = path.join(local, 'bin');
const goRoot = path.join(local, 'go');

export const HELM = { module: 'helm.sh/helm/v3', pkg: 'helm.sh/helm/v3/cmd/helm', version: 'v3.22.0' };
export const KUBECONFORM = {
  module: 'github.com/yannh/kubeconform',
  pkg: 'github.com/yannh/kubeconform/cmd/kubeconform',
  version: 'v0.8.0',
};
/**
 * Checks and unit-tests the Prometheus alerting rules of infra/monitoring. Built without Prometheus' service-discovery
 * plugins (the `remove_all_sd` tag of its plugins/ folder): rule checks and rule tests use none, and the cloud SDKs
 * they pull in were most of the build (on this 2-core machine, under load, 404 s tagged against 571 s more for the
 * untagged build on top of the tagged one's cache).
 */
export const PROMTOOL = {
  pkg: 'github.com/prometheus/prometheus/cmd/promtool',
  version: 'v0.316.0',
  tags: ['remove_all_sd'],
};
/** The Kubernetes release whose API the manifests are checked against. */
export const KUBERNETES = { module: 'k8s.io/kubernetes', version: 'v1.34.4' };
export const KEDA = { module: 'github.com/kedacore/keda/v2', version: 'v2.18.0' };

export interface Validators {
  helm: string;
  kubeconform: string;
  /** kubeconform -schema-location template for the generated schemas. */
  schemaLocation: string;
  /** What the first steps took, in seconds (0 when cached). */
  timings: Record<string, number>;
}

function goEnv(): NodeJS.ProcessEnv {
  return {
    ...process.env,
    GOBIN: binDir,
    GOPATH: goRoot,
    GOMODCACHE: path.join(goRoot, 'pkg', 'mod'),
    GOCACHE: path.join(goRoot, 'cache'),
    // Read-only module files would stop `rm -rf` of the cache.
    GOFLAGS: '-modcacherw',
    CGO_ENABLED: '0',
  };
}

async function go(args: string[]): Promise<string> {
  try {
    const { stdout } = await run('go', args, { cwd: local, env: goEnv(), maxBuffer: 64 * 1024 * 1024 });
    return stdout;
  } catch (error) {
    const detail = error as { code?: string; stderr?: string; message: string };
    if (detail.code === 'ENOENT')
      throw new Error('the Go toolchain (`go`) is needed to install helm, kubeconform and promtool', { cause: error });
    throw new Error(`go ${args.join(' ')} failed: ${detail.stderr || detail.message}`, { cause: error });
  }
}

/**
 * `go install pkg@version` into the cache's bin/ unless a stamp says this version (with these build tags) is already
 * there. Under the cache's lock: `npm test` builds in the background (prepare-validators.ts) while the tests that use
 * the tool may ask for it too, and the second caller waits for the first's build instead of compiling it again.
 */
async function ensureBinary(
  name: string,
  tool: { pkg: string; version: string; tags?: string[] },
): Promise<[string, number]> {
  const binary = path.join(binDir, name);
  const tags = tool.tags ?? [];
  const stamp = path.join(binDir, `.${name}-${tool.version}${tags.map((tag) => `+${tag}`).join('')}`);
  if (existsSync(binary) && existsSync(stamp)) return [binary, 0];
  return withCacheLock(async () => {
    if (existsSync(binary) && existsSync(stamp)) return [binary, 0];
    const started = Date.now();
    await mkdir(binDir, { recursive: true });
    await go(['install', ...(tags.length > 0 ? ['-tags', tags.join(',')] : []), `${tool.pkg}@${tool.version}`]);
    if (!existsSync(binary)) throw new Error(`go install ${tool.pkg}@${tool.version} left no ${binary}`);
    await writeFile(stamp, `${tool.pkg}@${tool.version} ${tags.join(',')}\n`);
    return [binary, (Date.now() - started) / 1000];
  });
}

const lockDir = path.join(local, '.lock');

/** Runs `work` holding the cache's lock (infra/dir-lock.ts). */
async function withCacheLock<T>(work: () => Promise<T>): Promise<T> {
  return withDirLock(lockDir, work);
}

/** Downloads (or finds in the cache) one Go module and answers its directory. */
async function moduleDir(module: { module: string; version: string }): Promise<string> {
  const info = JSON.parse(await go(['mod', 'download', '-json', `${module.module}@${module.version}`])) as {
    Dir?: string;
    Error?: string;
  };
  if (info.Error || !info.Dir) throw new Error(`go mod download ${module.module}: ${info.Error ?? 'no directory'}`);
  return info.Dir;
}

type Schema = Record<string, unknown>;

const QUANTITY = 'io.k8s.apimachinery.pkg.api.resource.Quantity';
const intOrString = () => ({ oneOf: [{ type: 'string' }, { type: 'integer' }] });

/**
 * One OpenAPI (v2 definition or v3 CRD) schema as a standalone JSON schema: references inlined, Kubernetes
 * extensions dropped, int-or-string and quantities accepting both forms, and (strict) objects with declared
 * properties refusing undeclared ones, as the API server's field validation does.
 */
function toJsonSchema(node: Schema, definitions: Record<string, Schema>, seen: readonly string[] = []): Schema {
  const ref = node.$ref;
  if (typeof ref === 'string') {
    const name = ref.replace('#/definitions/', '');
    if (name === QUANTITY) return { oneOf: [{ type: 'string' }, { type: 'number' }] };
    // A recursive type (only JSONSchemaProps of CRDs has one) is left open below its first level.
    if (seen.includes(name)) return {};
    const target = definitions[name];
    if (!target) throw new Error(`unresolved $ref ${ref}`);
    const inlined = toJsonSchema(target, definitions, [...seen, name]);
    return typeof node.description === 'string' ? { ...inlined, description: node.description } : inlined;
  }
  if (node.format === 'int-or-string' || node['x-kubernetes-int-or-string'] === true) {
    return { ...intOrString(), ...(node.description ? { description: node.description } : {}) };
  }
  const out: Schema = {};
  for (const [key, value] of Object.entries(node)) {
    if (key.startsWith('x-') || key === 'format' || key === 'nullable') continue;
    if (key === 'properties') {
      const properties: Record<string, Schema> = {};
      for (const [name, child] of Object.entries(value as Record<string, Schema>)) {
        properties[name] = toJsonSchema(child, definitions, seen);
      }
      out.properties = properties;
    } else if (key === 'items' || (key === 'additionalProperties' && typeof value === 'object')) {
      out[key] = toJsonSchema(value as Schema, definitions, seen);
    } else if (key === 'allOf' || key === 'anyOf' || key === 'oneOf') {
      out[key] = (value as Schema[]).map((child) => toJsonSchema(child, definitions, seen));
    } else {
      out[key] = value;
    }
  }
  if (node.nullable === true && typeof out.type === 'string') out.type = [out.type, 'null'];
  const open = node['x-kubernetes-preserve-unknown-fields'] === true || 'additionalProperties' in node;
  if (out.properties && !open) out.additionalProperties = false;
  return out;
}

function fileName(kind: string, group: string, version: string): string {
  // kubeconform's {{ .ResourceKind }}{{ .KindSuffix }}: the kind in lower case, the group's first label, the version.
  const groupLabel = group === '' ? '' : `-${group.split('.')[0]!.toLowerCase()}`;
  return `${kind.toLowerCase()}${groupLabel}-${version.toLowerCase()}.json`;
}

function withIdentity(schema: Schema, group: string, version: string, kind: string): Schema {
  const properties = { ...(schema.properties as Record<string, Schema> | undefined) };
  properties.apiVersion = { type: 'string', enum: [group === '' ? version : `${group}/${version}`] };
  properties.kind = { type: 'string', enum: [kind] };
  return { $schema: 'http://json-schema.org/draft-07/schema#', ...schema, properties };
}

/** Writes one schema file per kind of Kubernetes (from swagger.json) and per version of KEDA's ScaledObject. */
export async function generateSchemas(directory: string, kubernetesDir: string, kedaDir: string): Promise<number> {
  const swagger = JSON.parse(await readFile(path.join(kubernetesDir, 'api', 'openapi-spec', 'swagger.json'), 'utf8'));
  const definitions = swagger.definitions as Record<string, Schema>;
  let count = 0;
  for (const [name, definition] of Object.entries(definitions)) {
    const kinds = definition['x-kubernetes-group-version-kind'] as
      { group: string; version: string; kind: string }[] | undefined;
    if (!kinds) continue;
    const schema = toJsonSchema(definition, definitions, [name]);
    for (const { group, version, kind } of kinds) {
      await writeFile(
        path.join(directory, fileName(kind, group, version)),
        JSON.stringify(withIdentity(schema, group, version, kind)),
      );
      count++;
    }
  }
  const crdFile = path.join(kedaDir, 'config', 'crd', 'bases', 'keda.sh_scaledobjects.yaml');
  for (const document of parseAllDocuments(await readFile(crdFile, 'utf8'))) {
    const crd = document.toJS() as {
      spec: {
        group: string;
        names: { kind: string };
        versions: { name: string; schema: { openAPIV3Schema: Schema } }[];
      };
    };
    for (const version of crd.spec.versions) {
      const schema = toJsonSchema(version.schema.openAPIV3Schema, {});
      await writeFile(
        path.join(directory, fileName(crd.spec.names.kind, crd.spec.group, version.name)),
        JSON.stringify(withIdentity(schema, crd.spec.group, version.name, crd.spec.names.kind)),
      );
      count++;
    }
  }
  return count;
}

async function ensureSchemas(): Promise<[string, number]> {
  const directory = path.join(local, 'k8s-schemas', `kubernetes-${KUBERNETES.version}-keda-${KEDA.version}`);
  const stamp = path.join(directory, '.complete');
  if (existsSync(stamp)) return [directory, 0];
  return withCacheLock(() => generateSchemasOnce(directory, stamp));
}

async function generateSchemasOnce(directory: string, stamp: string): Promise<[string, number]> {
  if (existsSync(stamp)) return [directory, 0];
  const started = Date.now();
  const [kubernetesDir, kedaDir] = await Promise.all([moduleDir(KUBERNETES), moduleDir(KEDA)]);
  await rm(directory, { recursive: true, force: true });
  await mkdir(directory, { recursive: true });
  const count = await generateSchemas(directory, kubernetesDir, kedaDir);
  if (count < 100) throw new Error(`only ${count} schemas generated from ${KUBERNETES.module}@${KUBERNETES.version}`);
  await writeFile(stamp, `${count} schemas\n`);
  return [directory, (Date.now() - started) / 1000];
}

/** Installs (first run) or finds (later runs) helm, kubeconform and the schemas. */
export async function ensureValidators(): Promise<Validators> {
  await mkdir(local, { recursive: true });
  // One `go install` at a time: two compiles at once on a small machine are slower than in turn.
  const [helm, helmSeconds] = await ensureBinary('helm', HELM);
  const [kubeconform, kubeconformSeconds] = await ensureBinary('kubeconform', KUBECONFORM);
  const [schemas, schemaSeconds] = await ensureSchemas();
  return {
    helm,
    kubeconform,
    schemaLocation: path.join(schemas, '{{ .ResourceKind }}{{ .KindSuffix }}.json'),
    timings: { helm: helmSeconds, kubeconform: kubeconformSeconds, schemas: schemaSeconds },
  };
}

/** Installs (first run) or finds (later runs) promtool; answers its path and the seconds the install took. */
export async function ensurePromtool(): Promise<[string, number]> {
  await mkdir(local, { recursive: true });
  return ensureBinary('promtool', PROMTOOL);
}

/** Runs a tool; answers its exit code and output instead of throwing, so tests can expect failures. */
export async function tool(binary: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(binary, args, { cwd: repoRoot, maxBuffer: 64 * 1024 * 1024 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: number | string; stdout?: string; stderr?: string; message: string };
    if (typeof failed.code !== 'number') throw error;
    return { code: failed.code, stdout: failed.stdout ?? '', stderr: failed.stderr ?? failed.message };
  }
}
