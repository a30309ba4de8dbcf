import { setFlagsFromString } from 'node:v8';
import { loadConfig } from '../core/config.ts';
import { startTracing } from '../core/tracing.ts';
import { createLogger } from '../core/log.ts';
import { connectPlatform, runUntilSignalled } from '../core/platform.ts';
import { startDispatcher } from './dispatcher-service.ts';

const config = loadConfig();
const logger = createLogger('dispatcher', config.logLevel);
// V8 reads its heap growing factor at each full collection, so setting it here, before any load, holds for the run.
if (config.dispatcher.heapGrowthPercent > 0) {
  setFlagsFromString(`--heap-growing-percent=${config.dispatcher.heapGrowthPercent}`);
}
runUntilSignalled(logger, async () => {
  const platform = await connectPlatform(config, logger, 'dispatcher');
  const traces = await startTracing(config.tracing, 'dispatcher', logger);
  const stop = await startDispatcher(config, platform, logger);
  return async () => {
    await stop();
    await traces.stop();
    await platform.close();
  };
});
