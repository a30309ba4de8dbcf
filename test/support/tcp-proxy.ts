// A TCP proxy on 127.0.0.1 in front of a real server that can be frozen like a SIGSTOPped process: while frozen it
// holds every byte in both directions (connections stay open, nothing answers); thawed, it delivers what it held.
import net from 'node:net';

export async function startTcpProxy(target: { host: string; port: number }) {
  let frozen = false;
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
    const pipe = (from: net.Socket, to: net.Socket) => {
      const held: Buffer[] = [];
      const flush = () => {
        while (!frozen && held.length > 0) to.write(held.shift()!);
      };
      pumps.push(flush);
      from.on('data', (chunk: Buffer) => {
        held.push(chunk);
        flush();
      });
    };
    pipe(client, upstream);
    pipe(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    address: `127.0.0.1:${port}`,
    freeze: () => {
      frozen = true;
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
