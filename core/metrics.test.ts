import { createServer } from 'node:net';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';

import { freePort } from '../infra/processes.ts';
import { serveMetrics } from './metrics.ts';

describe('serveMetrics', () => {
  it('fails to start, naming the address and METRICS_PORT, when the port is taken', async () => {
    const port = await freePort();
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(port, '127.0.0.1', resolve));
    try {
      await expect(serveMetrics(new Registry(), '127.0.0.1', port)).rejects.toThrow(
        `cannot serve metrics on 127.0.0.1:${port} (METRICS_PORT): listen EADDRINUSE`,
      );
    } finally {
      holder.close();
    }
  });

  it('serves /health once listening', async () => {
    const port = await freePort();
    const server = await serveMetrics(new Registry(), '127.0.0.1', port);
    try {
      const answer = await fetch(`http://127.0.0.1:${port}/health`);
      expect([answer.status, await answer.json()]).toEqual([200, { status: 'ok' }]);
    } finally {
      server?.close();
    }
  });
});
