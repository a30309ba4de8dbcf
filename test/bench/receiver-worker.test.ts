import { afterEach, describe, expect, it } from 'vitest';
import { startReceiverThread, type ReceiverThread } from './receiver-thread.ts';
import type { Receipt } from './receiver-worker.ts';

let receiver: ReceiverThread | undefined;
afterEach(async () => {
  await receiver?.stop();
  receiver = undefined;
});

/** The benches' receiver on its thread, every receipt it posts (in order), and a POST to it. */
async function startReceiver(failRatio: number) {
  const started = await startReceiverThread(failRatio);
  receiver = started;
  const receipts: Receipt[] = [];
  started.onReceipt((receipt) => receipts.push(receipt));
  const next = async (count: number) => {
    while (receipts.length < count) await new Promise((resolve) => setTimeout(resolve, 5));
    return receipts;
  };
  const post = (deliveryId: string, subscriptionId: string, body: string) =>
    fetch(started.url, {
      method: 'POST',
      headers: { 'x-webhook-delivery-id': deliveryId, 'x-webhook-subscription-id': subscriptionId },
      body,
    });
  return { ...started, next, post };
}

describe("the benches' receiver thread", () => {
  it("answers 204 and posts each receipt with its time, and the event's time and entity from the body", async () => {
    const receiver = await startReceiver(0);
    const occurredAt = '2026-11-29T10:00:00.000Z';
    const before = Date.now();
    const response = await receiver.post('d-1', 's-1', JSON.stringify({ occurredAt, entityId: 'po-7', payload: {} }));
    expect(response.status).toBe(204);
    const [receipt] = await receiver.next(1);
    expect(receipt).toMatchObject({ deliveryId: 'd-1', subscriptionId: 's-1', entityId: 'po-7', answer: 204 });
    expect(receipt!.occurredAt).toBe(Date.parse(occurredAt));
    // Stamped between the request and its answer, by the thread's clock (timeOrigin + now: within a millisecond).
    expect(receipt!.at).toBeGreaterThanOrEqual(before - 1);
    expect(receipt!.at).toBeLessThanOrEqual(Date.now() + 1);
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
    const receipts = await receiver.next(2);
    expect(receipts.map(({ deliveryId, answer }) => [deliveryId, answer])).toEqual([
      ['d-2', 429],
      ['d-3', 204],
    ]);
    // A refusal carries no event time: it is no receipt of the event.
    expect(receipts[0]!.occurredAt).toBeUndefined();
    const report = await receiver.report();
    expect(Buffer.from(report.sample!.body).toString()).toBe('{"occurredAt":"2026-11-29T10:00:01.000Z"}');
    expect(report.sample!.headers['x-webhook-delivery-id']).toBe('d-3');
  });

  it('fails every request with 500 at a fail ratio of 1', async () => {
    const receiver = await startReceiver(1);
    expect((await receiver.post('d-4', 's-1', '{}')).status).toBe(500);
    const [receipt] = await receiver.next(1);
    expect(receipt!.answer).toBe(500);
  });
});
