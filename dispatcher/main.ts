import { loadConfig } from '../core/config.ts';
import { startTracing } from '../core/tracing.ts';
import { createLogger } from '../core/log.ts';
import { connectPlatform, runUntilSignalled } from '../core/platform.ts';
import { setHeapGrowth } from '../core/heap-growth.ts';
import { startDispatcher } from './dispatcher-service.ts';

const config = loadConfig();
const logger = createLogger('dispatcher', config.logLevel);
setHeapGrowth(config.dispatcher.heapGrowthPercent);
runUntilSignalled(logger, async () => {
  const platform = await connectPlatform(config, logger, 'dispatcher', { connectionsPerNode: 2 });
  const traces = await startTracing(config.tracing, 'dispatcher', logger);
  const stop = await startDispatcher(config, platform, logger);
  return async () => {
    await stop();
    await traces.stop();
    await platform.close();
  };
});
