import { loadConfig } from '../core/config.ts';
import { createLogger } from '../core/log.ts';
import { connectPlatform, runUntilSignalled } from '../core/platform.ts';
import { startGateway } from './gateway-service.ts';

const config = loadConfig();
const logger = createLogger('gateway', config.logLevel);
runUntilSignalled(logger, async () => {
  const platform = await connectPlatform(config, logger, 'gateway', config.gateway.dependencyTimeoutMs);
  const stop = await startGateway(config, platform, logger, { webhook: true, purchase: true });
  return async () => {
    await stop();
    await platform.close();
  };
});
