/** Runs the dev identity provider on AUTH_URL's port (local stack and tests only). Its key lives in IDP_KEY_FILE. */
import path from 'node:path';
import { connectCassandra } from '../core/cassandra.ts';
import { loadConfig } from '../core/config.ts';
import { createLogger } from '../core/log.ts';
import { runUntilSignalled } from '../core/platform.ts';
import { ClientStore } from './client-store.ts';
import { buildIdentityProvider, loadOrCreateSigningKey } from './identity-provider.ts';

const config = loadConfig();
const logger = createLogger('identity-provider', config.logLevel);
const keyFile = process.env.IDP_KEY_FILE ?? path.resolve('.local/idp-signing-key.json');

runUntilSignalled(logger, async () => {
  const db = await connectCassandra(config);
  const app = buildIdentityProvider({
    issuer: config.auth.issuer,
    key: await loadOrCreateSigningKey(keyFile),
    clients: new ClientStore(db),
    defaultAudience: config.auth.audience,
  });
  const url = new URL(config.auth.url);
  await app.listen({ host: url.hostname, port: Number(url.port || 80) });
  logger.info({ url: config.auth.url }, 'identity provider listening');
  return async () => {
    await app.close();
    await db.shutdown();
  };
});
