// Byte transports. Every one carries the protocol's frames as a byte
// stream; over WebSocket each binary message holds whole frames.

export interface Transport {
  send(data: Uint8Array): void;
  close(): void;
  /** Set by the client: bytes as they arrive. */
  onData: (data: Uint8Array) => void;
  /** Set by the client: the connection ended (once). */
  onClose: (why: string) => void;
}

export type TransportFactory = (address: Address, timeoutMs: number) => Promise<Transport>;

export const SCHEMES = ["tcp", "tls", "ws", "wss"] as const;
export type Scheme = (typeof SCHEMES)[number];

export class Address {
  constructor(
    readonly scheme: Scheme,
    readonly host: string,
    readonly port: number,
    readonly path = "/",
  ) {}

  /** tcp://host:port, tls://…, ws://host:port/path, wss://…, or host:port (TCP). */
  static parse(text: string): Address {
    const match = /^(?:([a-z]+):\/\/)?(\[[^\]]+\]|[^:/]+):(\d+)(\/.*)?$/.exec(text);
    if (!match) throw new RangeError(`address ${JSON.stringify(text)} is not scheme://host:port`);
    const scheme = (match[1] ?? "tcp") as Scheme;
    if (!SCHEMES.includes(scheme)) throw new RangeError(`scheme ${scheme} is not one of ${SCHEMES.join(", ")}`);
    return new Address(scheme, match[2].replace(/^\[|\]$/g, ""), Number(match[3]), match[4] ?? "/");
  }

  /** The gateway a sys.redirect names, on this address's transport. */
  withGateway(hostPort: string): Address {
    const moved = Address.parse(`${this.scheme}://${hostPort}`);
    return new Address(this.scheme, moved.host, moved.port, this.path);
  }

  toString(): string {
    const host = this.host.includes(":") ? `[${this.host}]` : this.host;
    const tail = this.scheme === "ws" || this.scheme === "wss" ? this.path : "";
    return `${this.scheme}://${host}:${this.port}${tail}`;
  }
}

/** WebSocket, with the platform's WebSocket (browsers; Node.js 22, or 20 with --experimental-websocket). */
export const webSocketTransport: TransportFactory = (address, timeoutMs) =>
  new Promise((resolve, reject) => {
    const Ws = (globalThis as { WebSocket?: typeof WebSocket }).WebSocket;
    if (!Ws) return reject(new Error("no WebSocket in this runtime (Node.js 20 needs --experimental-websocket)"));
    const socket = new Ws(address.toString());
    socket.binaryType = "arraybuffer";
    let open = false;
    let closed = false;
    const timer = setTimeout(() => {
      socket.close();
      reject(new Error(`no WebSocket to ${address} within ${timeoutMs} ms`));
    }, timeoutMs);
    const transport: Transport = {
      send: (data) => socket.send(data),
      close: () => socket.close(),
      onData: () => {},
      onClose: () => {},
    };
    socket.onopen = () => {
      open = true;
      clearTimeout(timer);
      resolve(transport);
    };
    socket.onmessage = (event: MessageEvent) => {
      if (typeof event.data === "string") {
        // The server sends binary messages only.
        transport.onClose("text message on a routerd WebSocket");
        closed = true;
        socket.close();
        return;
      }
      transport.onData(new Uint8Array(event.data as ArrayBuffer));
    };
    socket.onclose = (event: CloseEvent) => {
      clearTimeout(timer);
      if (!open) return reject(new Error(`WebSocket to ${address} closed: ${event.code}`));
      if (!closed) {
        closed = true;
        transport.onClose(`WebSocket closed (${event.code})`);
      }
    };
  });
