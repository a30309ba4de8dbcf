import fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { installErrorHandler } from './problem.ts';

// A known path asked with another method: 405 with the Allow the router really has, before any body is read.

async function app() {
  const instance = fastify();
  installErrorHandler(instance);
  instance.get('/Deliveries/:id', async () => ({}));
  instance.post('/Deliveries/:id/replay', async () => ({}));
  instance.post('/Deliveries/replay', async () => ({}));
  await instance.ready();
  return instance;
}

describe('method not allowed', () => {
  it('answers 405 problem+json with the methods of the path', async () => {
    const answer = await (await app()).inject({ method: 'PUT', url: '/Deliveries/abc?x=1' });
    expect(answer.statusCode).toBe(405);
    expect(answer.headers.allow).toBe('GET, HEAD');
    expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(answer.json()).toMatchObject({ status: 405, title: 'Method not allowed' });
  });

  it('names the static route where a parametric one matches the path too', async () => {
    const answer = await (await app()).inject({ method: 'OPTIONS', url: '/Deliveries/replay' });
    expect(answer.statusCode).toBe(405);
    expect(answer.headers.allow).toBe('POST');
  });

  it('answers a method with a body (QUERY, no Content-Type) 405 before parsing it', async () => {
    const answer = await (await app()).inject({ method: 'QUERY', url: '/Deliveries/abc/replay' });
    expect(answer.statusCode).toBe(405);
    expect(answer.headers.allow).toBe('POST');
  });

  it('answers an unknown path 404', async () => {
    const answer = await (await app()).inject({ method: 'GET', url: '/Nothing/here' });
    expect(answer.statusCode).toBe(404);
    expect(answer.headers.allow).toBeUndefined();
  });
});
