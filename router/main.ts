import { loadConfig } from '../core/config.ts';
import { startTracing } from '../core/tracing.ts';
import { createLogger } from '../core/log.ts';
import { connectPlatform, runUntilSignalled } from '../core/platform.ts';
import { setHeapGrowth } from '../core/heap-growth.ts';
import { startRouter } from './router-service.ts';

const config = loadConfig();
const logger = createLogger('router', config.logLevel);
setHeapGrowth(config.router.heapGrowthPercent);
runUntilSignalled(logger, async () => {
  const platform = await connectPlatform(config, logger, 'router', { connectionsPerNode: 2 });
  const traces = await startTracing(config.tracing, 'router', logger);
  const stop = await startRouter(config, platform, logger);
  return async () => {
    await stop();
    await traces.stop();
    await platform.close();
  };
});
