import { loadConfig } from '../core/config.ts';
import { startTracing } from '../core/tracing.ts';
import { createLogger } from '../core/log.ts';
import { connectPlatform, runUntilSignalled } from '../core/platform.ts';
import { startGateway } from './gateway-service.ts';

const config = loadConfig();
const logger = createLogger('gateway', config.logLevel);
runUntilSignalled(logger, async () => {
  const platform = await connectPlatform(config, logger, 'gateway', {
    requestTimeoutMs: config.gateway.dependencyTimeoutMs,
  });
  const traces = await startTracing(config.tracing, 'gateway', logger);
  const stop = await startGateway(config, platform, logger, { webhook: true, purchase: true });
  return async () => {
    await stop();
    await traces.stop();
    await platform.close();
  };
});
