import { Worker } from 'node:worker_threads';
import type { Receipt, ReceiverReport, ToReceiver } from './receiver-worker.ts';

/** The benches' receiver, started on a thread of its own (test/bench/receiver-worker.ts). */
export interface ReceiverThread {
  url: string;
  /** Called with each request as the receiver answered it, in order. */
  onReceipt(listener: (receipt: Receipt) => void): void;
  send(message: ToReceiver): void;
  /** Its figures, once every receipt it posted before has been handed to the listeners. */
  report(): Promise<ReceiverReport>;
  stop(): Promise<void>;
}

export async function startReceiverThread(failRatio = 0): Promise<ReceiverThread> {
  const worker = new Worker(new URL('./receiver-worker.ts', import.meta.url), { workerData: { failRatio } });
  const port = await new Promise<number>((resolve, reject) => {
    worker.once('error', reject);
    worker.once('message', (message: { port: number }) => resolve(message.port));
  });
  const send = (message: ToReceiver) => worker.postMessage(message);
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    onReceipt: (listener) =>
      worker.on('message', (message: Receipt | ReceiverReport) => {
        if (message.kind === 'receipt') listener(message);
      }),
    send,
    report: () =>
      new Promise<ReceiverReport>((resolve) => {
        const listen = (message: Receipt | ReceiverReport) => {
          if (message.kind !== 'report') return;
          worker.off('message', listen);
          resolve(message);
        };
        worker.on('message', listen);
        send({ kind: 'report' });
      }),
    stop: async () => {
      await worker.terminate();
    },
  };
}
