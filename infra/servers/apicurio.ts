/** Apicurio Registry 3 (serving the Confluent-compatible API) from its runner jar on Maven Central. */
import fsp from 'node:fs/promises';
import path from 'node:path';
import { downloadOnce } from './download.ts';
import { assertPortOpen } from './process.ts';
import { HOST, type ServerDef, registryUrl } from './server-def.ts';

const APICURIO_VERSION = '3.0.9';
const APICURIO_ARTIFACT = `io.apicurio:apicurio-registry-app:${APICURIO_VERSION}:tar.gz:all`;
const APICURIO_JAR = `apicurio-registry-app-${APICURIO_VERSION}-runner.jar`;

export function apicurioDef(port: number, host = HOST, id = 'apicurio'): ServerDef {
  return {
    name: 'apicurio',
    id,
    host,
    envVar: 'SCHEMA_REGISTRY_URL',
    portVar: 'SCHEMA_REGISTRY_PORT',
    port,
    address: registryUrl(port, host),
    startupMs: 120_000,
    download: (paths, tools) =>
      downloadOnce('apicurio', paths.dist, APICURIO_ARTIFACT, tools, async () => {
        await tools.mvn(['dependency:copy', `-Dartifact=${APICURIO_ARTIFACT}`, `-DoutputDirectory=${paths.dist}`]);
        const archive = path.join(paths.dist, `apicurio-registry-app-${APICURIO_VERSION}-all.tar.gz`);
        await tools.run(tools.which('tar', 'tar (to unpack Apicurio)'), ['-xzf', archive, '-C', paths.dist]);
        await fsp.rm(archive); // Maven's cache keeps a copy.
      }),
    prepare: async (paths) => {
      await fsp.mkdir(paths.data, { recursive: true });
      const args = [
        '-Xmx256m',
        '-Djava.net.preferIPv4Stack=true',
        `-Dquarkus.http.port=${port}`,
        `-Dquarkus.http.host=${host}`,
        // 3.x defaults to an in-memory H2 database; a file keeps schema ids stable across restarts, which matters
        // because Kafka keeps the records that carry those ids.
        `-Dapicurio.datasource.url=jdbc:h2:file:${path.join(paths.data, 'registry')}`,
        // Deleting subjects is off by default in 3.x; tests and local clean-ups want it.
        '-Dapicurio.rest.deletion.group.enabled=true',
        '-Dapicurio.rest.deletion.artifact.enabled=true',
        '-Dapicurio.rest.deletion.artifact-version.enabled=true',
        '-jar',
        path.join(paths.dist, APICURIO_JAR),
      ];
      return { args, cwd: paths.dist };
    },
    check: async () => {
      await assertPortOpen(port, host);
      const res = await fetch(`${registryUrl(port, host)}/subjects`, { signal: AbortSignal.timeout(5_000) });
      if (!res.ok) throw new Error(`GET /subjects answered ${res.status}`);
      const body: unknown = await res.json();
      if (!Array.isArray(body)) throw new Error('GET /subjects did not return a JSON array');
    },
  };
}
