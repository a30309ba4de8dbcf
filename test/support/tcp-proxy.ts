// A TCP proxy on 127.0.0.1 in front of a real server that can be frozen like a SIGSTOPped process: while frozen it
// holds every byte in both directions (connections stay open, nothing answers); thawed, it delivers what it held.
// Slowed, it holds each answer (server to client) that long before passing it on: a server that answers, but late.
import net from 'node:net';

export async function startTcpProxy(target: { host: string; port: number }) {
  let frozen = false;
  let answerDelayMs = 0;
  const pumps: (() => void)[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => socket.destroy());
      socket.on('close', () => sockets.delete(socket));
    }
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    const pipe = (from: net.Socket, to: net.Socket, delayed: boolean) => {
      const held: { chunk: Buffer; due: number }[] = [];
      // One timer at most, for the oldest held answer.
      let wake: NodeJS.Timeout | undefined;
      const flush = () => {
        while (!frozen && held.length > 0 && held[0]!.due <= Date.now()) to.write(held.shift()!.chunk);
        if (!frozen && held.length > 0 && wake === undefined) {
          wake = setTimeout(() => {
            wake = undefined;
            flush();
          }, held[0]!.due - Date.now());
        }
      };
      pumps.push(flush);
      from.on('data', (chunk: Buffer) => {
        held.push({ chunk, due: Date.now() + (delayed ? answerDelayMs : 0) });
        flush();
      });
    };
    pipe(client, upstream, false);
    pipe(upstream, client, true);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    address: `127.0.0.1:${port}`,
    freeze: () => {
      frozen = true;
    },
    /** Holds each answer `ms` before passing it on (0: at once again). */
    slow: (ms: number) => {
      answerDelayMs = ms;
    },
    thaw: () => {
      frozen = false;
      for (const pump of pumps) pump();
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
