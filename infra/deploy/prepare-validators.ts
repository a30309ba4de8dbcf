// `npm run validators`: installs (or finds in the cache) helm, kubeconform, the Kubernetes and KEDA schemas, and
// promtool, which the deploy test project uses. `npm test` starts it in the background as its first step, so on a new
// machine the Go builds overlap the servers' start and the other test projects instead of running before them.
import { ensurePromtool, ensureValidators } from './validators.ts';

const started = Date.now();
const validators = await ensureValidators();
const [, promtoolSeconds] = await ensurePromtool();
const timings = { ...validators.timings, promtool: promtoolSeconds };
console.log(`validators ready in ${((Date.now() - started) / 1000).toFixed(1)} s ${JSON.stringify(timings)}`);
