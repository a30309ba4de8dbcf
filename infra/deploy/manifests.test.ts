// The Kubernetes chart and the Dockerfile, checked offline: `helm lint --strict`, `helm template`, kubeconform -strict
// against schemas generated from the Kubernetes and KEDA modules (validators.ts), and the structure a cluster would
// only reveal at run time (selectors, probes, ports, resources, non-root). Tools that cannot be installed fail the run.
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICE_NODE_FLAGS } from '../processes.ts';
import { ensureValidators, KUBERNETES, repoRoot, tool, type Validators } from './validators.ts';

const chart = path.join(repoRoot, 'infra', 'deploy', 'core-webhooks');
// A helm built by `go install` assumes Kubernetes 1.20 when it has no cluster: name the version the schemas are of.
const kubeVersion = KUBERNETES.version.slice(1);
// `port` is the container's main port, named `portName`, which the probes use; `metricsPort` serves /metrics (and
// /health, /ready) and is the one Prometheus scrapes. The gateway's metrics port is a second one, apart from its API.
const SERVICES = {
  gateway: { entry: 'dist/api/main.js', source: 'api/main.ts', port: 8080, portName: 'http', metricsPort: 9100 },
  router: {
    entry: 'dist/router/main.js',
    source: 'router/main.ts',
    port: 9100,
    portName: 'metrics',
    metricsPort: 9100,
  },
  dispatcher: {
    entry: 'dist/dispatcher/main.js',
    source: 'dispatcher/main.ts',
    port: 9100,
    portName: 'metrics',
    metricsPort: 9100,
  },
} as const;
type Component = keyof typeof SERVICES;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Manifest = Record<string, any>;

let validators: Validators;
let work: string;

beforeAll(async () => {
  const started = Date.now();
  validators = await ensureValidators();
  const took = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`validators ready in ${took} s (${JSON.stringify(validators.timings)})`);
  work = await mkdtemp(path.join(tmpdir(), 'deploy-manifests-'));
}, 900_000);

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

async function render(...sets: string[]): Promise<{ yaml: string; manifests: Manifest[] }> {
  const args = [
    'template',
    'webhooks',
    chart,
    '--namespace',
    'webhooks',
    '--kube-version',
    kubeVersion,
    ...sets.flatMap((set) => ['--set', set]),
  ];
  const result = await tool(validators.helm, args);
  if (result.code !== 0) throw new Error(`helm template failed: ${result.stderr}`);
  const manifests = parseAllDocuments(result.stdout)
    .map((document) => {
      if (document.errors.length > 0) throw new Error(`rendered YAML: ${document.errors[0]!.message}`);
      return document.toJS() as Manifest | null;
    })
    .filter((manifest): manifest is Manifest => manifest !== null);
  return { yaml: result.stdout, manifests };
}

async function kubeconform(yaml: string, name: string) {
  const file = path.join(work, `${name}.yaml`);
  await writeFile(file, yaml);
  return tool(validators.kubeconform, [
    '-strict',
    '-summary',
    '-kubernetes-version',
    kubeVersion,
    '-schema-location',
    validators.schemaLocation,
    file,
  ]);
}

function only(manifests: Manifest[], kind: string, name: string): Manifest {
  const found = manifests.filter((m) => m.kind === kind && m.metadata.name === name);
  expect(found, `${kind} ${name}`).toHaveLength(1);
  return found[0]!;
}

const deploymentName = (component: Component) => `webhooks-core-webhooks-${component}`;
const matches = (selector: Record<string, string>, labels: Record<string, string>) =>
  Object.entries(selector).every(([key, value]) => labels[key] === value);

describe('helm chart infra/deploy/core-webhooks', () => {
  it('passes helm lint --strict', async () => {
    const result = await tool(validators.helm, ['lint', '--strict', '--kube-version', kubeVersion, chart]);
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).toContain('0 chart(s) failed');
  }, 60_000);

  it('renders manifests that kubeconform -strict finds valid against the Kubernetes and KEDA schemas', async () => {
    const { yaml, manifests } = await render();
    const result = await kubeconform(yaml, 'default');
    expect(result.code, result.stdout + result.stderr).toBe(0);
    // Every resource, the ScaledObject included, was checked against a schema: none skipped, none missing.
    const summary = /Valid: (\d+), Invalid: (\d+), Errors: (\d+), Skipped: (\d+)/.exec(result.stdout);
    expect(summary, result.stdout).not.toBeNull();
    expect(summary!.slice(1).map(Number)).toEqual([manifests.length, 0, 0, 0]);
    expect(new Set(manifests.map((m) => m.kind))).toEqual(
      new Set(['ServiceAccount', 'ConfigMap', 'Service', 'Deployment', 'PodDisruptionBudget', 'ScaledObject', 'Job']),
    );
  }, 60_000);

  it('has schemas strict enough to refuse a misspelt field, a wrong type and an unknown kind', async () => {
    const { manifests } = await render();
    const gateway = only(manifests, 'Deployment', deploymentName('gateway'));
    const broken = structuredClone(gateway);
    broken.spec.template.spec.containers[0].readinessProb = broken.spec.template.spec.containers[0].readinessProbe;
    const wrongType = structuredClone(gateway);
    wrongType.spec.replicas = 'two';
    const scaled = structuredClone(only(manifests, 'ScaledObject', deploymentName('dispatcher')));
    scaled.spec.maxReplicas = 3;
    const unknown = { apiVersion: 'apps/v1', kind: 'Deploymnet', metadata: { name: 'x' } };
    for (const [name, manifest] of Object.entries({ broken, wrongType, scaled, unknown })) {
      const result = await kubeconform(JSON.stringify(manifest), name);
      expect(result.code, `${name}: ${result.stdout}`).not.toBe(0);
    }
  }, 60_000);

  it('runs each service from the one image with probes, resources, non-root and its configuration', async () => {
    const { manifests } = await render();
    const config = only(manifests, 'ConfigMap', 'webhooks-core-webhooks-config');
    expect(config.data).toMatchObject({ GATEWAY_HOST: '0.0.0.0', GATEWAY_PORT: '8080', KAFKA_PARTITIONS: '6' });
    expect(manifests.filter((m) => m.kind === 'Secret')).toEqual([]);
    for (const [component, expected] of Object.entries(SERVICES) as [Component, (typeof SERVICES)[Component]][]) {
      expect(existsSync(path.join(repoRoot, expected.source)), expected.source).toBe(true);
      const deployment = only(manifests, 'Deployment', deploymentName(component));
      const pod = deployment.spec.template;
      expect(matches(deployment.spec.selector.matchLabels, pod.metadata.labels)).toBe(true);
      expect(pod.spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000 });
      expect(pod.spec.containers).toHaveLength(1);
      const container = pod.spec.containers[0];
      expect(container.image).toBe('core-webhooks:0.1.0');
      expect(container.command).toBeUndefined(); // the image's ENTRYPOINT is node
      expect(container.args).toEqual([expected.entry]);
      expect(container.securityContext).toMatchObject({
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        capabilities: { drop: ['ALL'] },
      });
      for (const bound of ['requests', 'limits']) {
        expect(container.resources[bound], `${component} ${bound}`).toHaveProperty('cpu');
        expect(container.resources[bound], `${component} ${bound}`).toHaveProperty('memory');
      }
      const { portName } = expected;
      const ports = [{ name: portName, containerPort: expected.port, protocol: 'TCP' }];
      // A service whose main port is not its metrics port (the gateway's API) has a second one for them.
      if (expected.metricsPort !== expected.port) {
        ports.push({ name: 'metrics', containerPort: expected.metricsPort, protocol: 'TCP' });
      }
      expect(container.ports).toEqual(ports);
      expect(container.livenessProbe.httpGet).toEqual({ path: '/health', port: portName });
      expect(container.readinessProbe.httpGet).toEqual({ path: '/ready', port: portName });
      expect(container.startupProbe.httpGet).toEqual({ path: '/health', port: portName });
      expect(container.envFrom).toEqual([
        { configMapRef: { name: config.metadata.name } },
        { secretRef: { name: 'core-webhooks-secrets' } },
      ]);
      const pdb = only(manifests, 'PodDisruptionBudget', deploymentName(component));
      expect(matches(pdb.spec.selector.matchLabels, pod.metadata.labels)).toBe(true);
      // The budget selects this service's pods and no other's.
      for (const other of Object.keys(SERVICES).filter((name) => name !== component) as Component[]) {
        const otherPod = only(manifests, 'Deployment', deploymentName(other)).spec.template;
        expect(matches(pdb.spec.selector.matchLabels, otherPod.metadata.labels)).toBe(false);
      }
      // Every service serves its metrics on METRICS_PORT, then runs with the Node flags `npm start` and the bench give
      // it (infra/processes.ts) as NODE_OPTIONS; the gateway has none.
      const flags = SERVICE_NODE_FLAGS[expected.source];
      expect(container.env).toEqual([
        { name: 'METRICS_PORT', value: String(expected.metricsPort) },
        ...(flags ? [{ name: 'NODE_OPTIONS', value: flags.join(' ') }] : []),
      ]);
      expect(pod.metadata.annotations).toMatchObject({
        'prometheus.io/scrape': 'true',
        'prometheus.io/port': String(expected.metricsPort),
        'prometheus.io/path': '/metrics',
      });
    }
    const gatewayContainer = only(manifests, 'Deployment', deploymentName('gateway')).spec.template.spec.containers[0];
    expect(gatewayContainer.ports).toEqual([
      { name: 'http', containerPort: 8080, protocol: 'TCP' },
      { name: 'metrics', containerPort: 9100, protocol: 'TCP' },
    ]);
    expect(gatewayContainer.env).toEqual([{ name: 'METRICS_PORT', value: '9100' }]);
    const service = only(manifests, 'Service', deploymentName('gateway'));
    const gatewayPod = only(manifests, 'Deployment', deploymentName('gateway')).spec.template;
    expect(matches(service.spec.selector, gatewayPod.metadata.labels)).toBe(true);
    // The public Service exposes the API only: the metrics port is for Prometheus, which scrapes the pods.
    expect(service.spec.ports).toEqual([{ name: 'http', port: 80, targetPort: 'http', protocol: 'TCP' }]);
    expect(manifests.filter((m) => m.kind === 'Service')).toEqual([service]);
  }, 60_000);

  it("scrapes the gateway on its own metrics port, which follows gateway.metricsPort, and never its API's", async () => {
    const { yaml, manifests } = await render('gateway.metricsPort=9200', 'gateway.port=8081');
    expect((await kubeconform(yaml, 'gateway-ports')).code).toBe(0);
    const pod = only(manifests, 'Deployment', deploymentName('gateway')).spec.template;
    const container = pod.spec.containers[0];
    expect(container.ports).toEqual([
      { name: 'http', containerPort: 8081, protocol: 'TCP' },
      { name: 'metrics', containerPort: 9200, protocol: 'TCP' },
    ]);
    expect(container.env).toEqual([{ name: 'METRICS_PORT', value: '9200' }]);
    expect(pod.metadata.annotations).toMatchObject({ 'prometheus.io/scrape': 'true', 'prometheus.io/port': '9200' });
    // The probes stay on the API port, which answers /health and /ready as well.
    expect(container.readinessProbe.httpGet).toEqual({ path: '/ready', port: 'http' });
    const config = only(manifests, 'ConfigMap', 'webhooks-core-webhooks-config');
    expect(config.data).toMatchObject({ GATEWAY_PORT: '8081' });
    expect(config.data).not.toHaveProperty('METRICS_PORT');
    expect(only(manifests, 'Service', deploymentName('gateway')).spec.ports).toEqual([
      { name: 'http', port: 80, targetPort: 'http', protocol: 'TCP' },
    ]);
    // With the annotations off, no pod asks to be scraped; the ports stay.
    const unannotated = await render('metrics.annotations=false');
    for (const component of Object.keys(SERVICES) as Component[]) {
      const template = only(unannotated.manifests, 'Deployment', deploymentName(component)).spec.template;
      expect(template.metadata.annotations['prometheus.io/scrape'], component).toBeUndefined();
      expect(
        template.spec.containers[0].ports.map((p: Manifest) => p.name),
        component,
      ).toContain('metrics');
    }
  }, 60_000);

  it('scales the dispatcher with KEDA on its group lag of the deliveries topic, at most one per partition', async () => {
    const { yaml, manifests } = await render('kafka.topicPrefix=prod.', 'kafka.partitions=12');
    expect((await kubeconform(yaml, 'prefixed')).code).toBe(0);
    const scaled = only(manifests, 'ScaledObject', deploymentName('dispatcher'));
    expect(scaled.apiVersion).toBe('keda.sh/v1alpha1');
    expect(scaled.spec.scaleTargetRef).toEqual({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      name: deploymentName('dispatcher'),
    });
    expect(scaled.spec.maxReplicaCount).toBe(12);
    expect(scaled.spec.triggers).toHaveLength(1);
    expect(scaled.spec.triggers[0]).toMatchObject({
      type: 'kafka',
      metadata: {
        bootstrapServers: 'kafka:9092',
        consumerGroup: 'prod.webhook-dispatcher',
        topic: 'prod.webhook.deliveries',
        allowIdleConsumers: 'false',
      },
    });
    // KEDA owns the replica count; the Deployment must not fight it on every upgrade.
    expect(only(manifests, 'Deployment', deploymentName('dispatcher')).spec.replicas).toBeUndefined();
    const config = only(manifests, 'ConfigMap', 'webhooks-core-webhooks-config');
    expect(config.data).toMatchObject({ KAFKA_TOPIC_PREFIX: 'prod.', KAFKA_PARTITIONS: '12' });

    const capped = await render('dispatcher.autoscaling.maxReplicaCount=4');
    expect(only(capped.manifests, 'ScaledObject', deploymentName('dispatcher')).spec.maxReplicaCount).toBe(4);
    const tooMany = await tool(validators.helm, [
      'template',
      'webhooks',
      chart,
      '--kube-version',
      kubeVersion,
      '--set',
      'dispatcher.autoscaling.maxReplicaCount=7',
    ]);
    expect(tooMany.code).not.toBe(0);
    expect(tooMany.stderr).toContain('exceeds kafka.partitions (6)');

    const fixed = await render('dispatcher.autoscaling.enabled=false', 'dispatcher.replicas=3');
    expect(fixed.manifests.filter((m) => m.kind === 'ScaledObject')).toEqual([]);
    expect(only(fixed.manifests, 'Deployment', deploymentName('dispatcher')).spec.replicas).toBe(3);
  }, 60_000);

  it('provisions (migrate, topics apply, schemas register) in a pre-install hook with the same configuration', async () => {
    const { manifests } = await render();
    const job = only(manifests, 'Job', 'webhooks-core-webhooks-provision');
    expect(job.metadata.annotations['helm.sh/hook']).toBe('pre-install,pre-upgrade');
    const spec = job.spec.template.spec;
    const steps = [...spec.initContainers, ...spec.containers].map((c: Manifest) => c.args);
    expect(steps).toEqual([
      ['dist/infra/admin.js', 'migrate'],
      ['dist/infra/admin.js', 'topics', 'apply'],
      ['dist/infra/admin.js', 'schemas', 'register'],
    ]);
    const config = only(manifests, 'ConfigMap', 'webhooks-core-webhooks-config');
    for (const container of [...spec.initContainers, ...spec.containers]) {
      const env = Object.fromEntries(container.env.map((e: Manifest) => [e.name, e.value]));
      expect(env).toEqual(config.data);
    }
    const without = await render('provision.enabled=false');
    expect(without.manifests.filter((m) => m.kind === 'Job')).toEqual([]);
  }, 60_000);

  it('refuses to render without a Secret to take SECRETS_KEY from', async () => {
    const result = await tool(validators.helm, [
      'template',
      'webhooks',
      chart,
      '--kube-version',
      kubeVersion,
      '--set',
      'secrets.existingSecret=',
    ]);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('secrets.existingSecret is required');
  }, 60_000);
});

describe('Dockerfile', () => {
  // Built and run for real by the image project (test/image/image.test.ts); checked here is what a build would only
  // reveal when it failed or when a file it needs was missing: the context it is given.
  it('builds one non-root image from a context of only what the build stage needs', async () => {
    const dockerfile = await readFile(path.join(repoRoot, 'Dockerfile'), 'utf8');
    const stages = [...dockerfile.matchAll(/^FROM \S+(?: AS (\S+))?$/gm)].map((m) => m[1]);
    expect(stages).toEqual(['build', 'runtime']);
    const runtime = dockerfile.slice(dockerfile.indexOf('AS runtime'));
    expect(runtime).toMatch(/^USER 1000:1000$/m);
    expect(runtime).toContain('ENTRYPOINT ["node"]');
    // No "# syntax=" line: BuildKit would fetch that frontend image from a registry, and none is reachable here.
    expect(dockerfile).not.toMatch(/^# syntax=/m);
    const ignore = (await readFile(path.join(repoRoot, '.dockerignore'), 'utf8'))
      .split('\n')
      .filter((line) => line && !line.startsWith('#'));
    expect(ignore[0]).toBe('*');
    const admitted = ignore.filter((line) => line.startsWith('!')).map((line) => line.slice(1));
    // Every folder tsc compiles (tsconfig.build.json), and what npm run build copies beside the code (schemas, console).
    const build = JSON.parse(await readFile(path.join(repoRoot, 'tsconfig.build.json'), 'utf8')) as {
      include: string[];
    };
    const needed = [...build.include, 'schemas', 'console', 'package.json', 'package-lock.json', 'tsconfig.json'];
    expect(admitted).toEqual(expect.arrayContaining([...needed, 'tsconfig.build.json']));
    for (const kept of ['.git', '.local', 'node_modules', 'dist', 'test', '.env']) expect(admitted).not.toContain(kept);
  });

  it('runs the Node release that .nvmrc, .node-version, CI and package.json name', async () => {
    const read = async (file: string) => (await readFile(path.join(repoRoot, file), 'utf8')).trim();
    const major = await read('.nvmrc');
    const version = await read('.node-version');
    expect(version.split('.')[0]).toBe(major);
    expect(await read('Dockerfile')).toMatch(new RegExp(`^ARG NODE_IMAGE=node:${major}-slim$`, 'm'));
    // CI (through infra/use-node.sh) installs exactly the version .node-version names.
    expect(await read('infra/use-node.sh')).toContain(`CORE_NODE_VERSION=${version}\n`);
    expect(await read('.ci/run')).toContain('. infra/use-node.sh');
    const engines = (JSON.parse(await read('package.json')) as { engines: { node: string } }).engines.node;
    expect(engines).toMatch(new RegExp(`>=${major}\\.\\d+\\.\\d+`));
  });
});
