// What one broker itself says of a topic, asked on its own connection: kafkajs sends a metadata request to whichever
// broker it likes, so it cannot tell which broker of a cluster knows a change yet. Metadata v1, the plain fields only.
import net from 'node:net';

/** A partition as one broker lists it. */
export interface BrokerPartition {
  partition: number;
  /** Kafka's error code for the partition (0: none). */
  error: number;
  leader: number;
}

/** A topic as one broker lists it: `error` 3 (UNKNOWN_TOPIC_OR_PARTITION) while the broker does not know it. */
export interface BrokerTopic {
  error: number;
  partitions: BrokerPartition[];
}

const METADATA = 3;
const VERSION = 1;

/** A connection to one broker that asks it for topics' metadata, one request at a time. */
export class BrokerMetadata {
  private buffered = Buffer.alloc(0);
  private waiting: ((frame: Buffer) => void) | undefined;
  private correlation = 0;

  private constructor(private readonly socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, chunk]);
      if (this.buffered.length < 4) return;
      const size = this.buffered.readInt32BE(0);
      if (this.buffered.length < 4 + size) return;
      const frame = this.buffered.subarray(4, 4 + size);
      this.buffered = this.buffered.subarray(4 + size);
      const waiting = this.waiting;
      this.waiting = undefined;
      waiting?.(frame);
    });
  }

  static connect(host: string, port: number): Promise<BrokerMetadata> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host, port }, () => {
        socket.off('error', reject);
        resolve(new BrokerMetadata(socket));
      });
      socket.once('error', reject);
    });
  }

  /** The broker's answer for `topic`. */
  async topic(topic: string): Promise<BrokerTopic> {
    const correlation = (this.correlation += 1);
    const clientId = Buffer.from('broker-metadata');
    const name = Buffer.from(topic);
    const body = Buffer.alloc(2 + 2 + 4 + 2 + clientId.length + 4 + 2 + name.length);
    let at = body.writeInt16BE(METADATA, 0);
    at = body.writeInt16BE(VERSION, at);
    at = body.writeInt32BE(correlation, at);
    at = body.writeInt16BE(clientId.length, at);
    at += clientId.copy(body, at);
    at = body.writeInt32BE(1, at);
    at = body.writeInt16BE(name.length, at);
    name.copy(body, at);
    const size = Buffer.alloc(4);
    size.writeInt32BE(body.length);
    const frame = await new Promise<Buffer>((resolve, reject) => {
      this.waiting = resolve;
      this.socket.write(Buffer.concat([size, body]), (error) => error && reject(error));
    });
    return parseTopic(frame, correlation);
  }

  close(): void {
    this.socket.destroy();
  }
}

function parseTopic(frame: Buffer, correlation: number): BrokerTopic {
  let at = 0;
  const int16 = () => ((at += 2), frame.readInt16BE(at - 2));
  const int32 = () => ((at += 4), frame.readInt32BE(at - 4));
  const string = () => {
    const length = int16();
    at += Math.max(0, length);
    return length < 0 ? null : frame.toString('utf8', at - length, at);
  };
  const int32s = () => Array.from({ length: int32() }, int32);
  if (int32() !== correlation) throw new Error('a metadata answer to another request');
  for (let brokers = int32(); brokers > 0; brokers -= 1) {
    int32();
    string();
    int32();
    string();
  }
  int32(); // the controller
  if (int32() !== 1) throw new Error('a metadata answer without the one topic asked for');
  const error = int16();
  string();
  at += 1; // is_internal
  const partitions = Array.from({ length: int32() }, () => {
    const partitionError = int16();
    const partition = int32();
    const leader = int32();
    int32s();
    int32s();
    return { partition, error: partitionError, leader };
  });
  return { error, partitions };
}
