import { loadConfig } from '../core/config.ts';
import { createLogger } from '../core/log.ts';
import { connectPlatform, runUntilSignalled } from '../core/platform.ts';
import { startDispatcher } from './dispatcher-service.ts';

const config = loadConfig();
const logger = createLogger('dispatcher', config.logLevel);
runUntilSignalled(logger, async () => {
  const platform = await connectPlatform(config, logger, 'dispatcher');
  const stop = await startDispatcher(config, platform, logger);
  return async () => {
    await stop();
    await platform.close();
  };
});
