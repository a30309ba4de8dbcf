import { afterEach, describe, expect, it } from 'vitest';
import { Worker } from 'node:worker_threads';
import type { Receipt, ReceiverReport, ToReceiver } from './receiver-worker.ts';

type FromReceiver = Receipt | ReceiverReport | { kind: 'listening'; port: number };

let worker: Worker | undefined;
afterEach(async () => {
  await worker?.terminate();
  worker = undefined;
});

/** The bench's receiver on its thread, and every message it posts, in order. */
async function startReceiver(failRatio: number) {
  const started = new Worker(new URL('./receiver-worker.ts', import.meta.url), { workerData: { failRatio } });
  worker = started;
  const messages: FromReceiver[] = [];
  const port = await new Promise<number>((resolve, reject) => {
    started.once('error', reject);
    started.on('message', (message: FromReceiver) => {
      messages.push(message);
      if (message.kind === 'listening') resolve(message.port);
    });
  });
  const send = (message: ToReceiver) => started.postMessage(message);
  const next = async <K extends FromReceiver['kind']>(kind: K, count: number) => {
    while (messages.filter((message) => message.kind === kind).length < count) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    return messages.filter((message): message is Extract<FromReceiver, { kind: K }> => message.kind === kind);
  };
  const post = (deliveryId: string, subscriptionId: string, body: string) =>
    fetch(`http://127.0.0.1:${port}/hooks`, {
      method: 'POST',
      headers: { 'x-webhook-delivery-id': deliveryId, 'x-webhook-subscription-id': subscriptionId },
      body,
    });
  return { send, next, post };
}

describe("the pipeline bench's receiver thread", () => {
  it('answers 204 and posts each receipt with its time and the event time from the body', async () => {
    const receiver = await startReceiver(0);
    const occurredAt = '2026-11-29T10:00:00.000Z';
    const before = Date.now();
    const response = await receiver.post('d-1', 's-1', JSON.stringify({ occurredAt, payload: {} }));
    expect(response.status).toBe(204);
    const [receipt] = await receiver.next('receipt', 1);
    expect(receipt).toMatchObject({ deliveryId: 'd-1', subscriptionId: 's-1', answer: 204 });
    expect(receipt!.occurredAt).toBe(Date.parse(occurredAt));
    expect(receipt!.at).toBeGreaterThanOrEqual(before);
    expect(receipt!.at).toBeLessThanOrEqual(Date.now());
  });

  it('refuses the throttled subscriptions with 429 and Retry-After until told, and reports the last 204 to replay', async () => {
    const receiver = await startReceiver(0);
    receiver.send({ kind: 'throttle', subscriptionIds: ['slow'], until: Date.now() + 60_000, forMs: 60_000 });
    await new Promise((resolve) => setTimeout(resolve, 20));
    const refused = await receiver.post('d-2', 'slow', '{"occurredAt":"2026-11-29T10:00:00.000Z"}');
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('2');
    const answered = await receiver.post('d-3', 'fast', '{"occurredAt":"2026-11-29T10:00:01.000Z"}');
    expect(answered.status).toBe(204);
    const receipts = await receiver.next('receipt', 2);
    expect(receipts.map(({ deliveryId, answer }) => [deliveryId, answer])).toEqual([
      ['d-2', 429],
      ['d-3', 204],
    ]);
    // A refusal carries no event time: it is no receipt of the event.
    expect(receipts[0]!.occurredAt).toBeUndefined();
    receiver.send({ kind: 'report' });
    const [report] = await receiver.next('report', 1);
    expect(Buffer.from(report!.sample!.body).toString()).toBe('{"occurredAt":"2026-11-29T10:00:01.000Z"}');
    expect(report!.sample!.headers['x-webhook-delivery-id']).toBe('d-3');
  });

  it('fails every request with 500 at a fail ratio of 1', async () => {
    const receiver = await startReceiver(1);
    expect((await receiver.post('d-4', 's-1', '{}')).status).toBe(500);
    const [receipt] = await receiver.next('receipt', 1);
    expect(receipt!.answer).toBe(500);
  });
});
