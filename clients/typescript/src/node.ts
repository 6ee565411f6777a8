// Node.js: the browser API plus plain TCP and TLS transports.

import * as net from "node:net";
import * as tls from "node:tls";

import { Client, ClientOptions, TokenSource } from "./client.js";
import { Address, Transport, TransportFactory, webSocketTransport } from "./transport.js";

export * from "./index.js";

/** Options of the TLS transport (a CA for a test certificate, say). */
export type TlsOptions = tls.ConnectionOptions;

function streamTransport(socket: net.Socket): Transport {
  let ended = false;
  const transport: Transport = {
    send: (data) => {
      socket.write(data);
    },
    close: () => socket.destroy(),
    onData: () => {},
    onClose: () => {},
  };
  socket.on("data", (chunk: Buffer) => transport.onData(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length)));
  const end = (why: string) => {
    if (ended) return;
    ended = true;
    transport.onClose(why);
  };
  socket.on("error", (error) => end(error.message));
  socket.on("close", () => end("the server closed the connection"));
  return transport;
}

function connectStream(open: () => net.Socket, event: "connect" | "secureConnect", address: Address, timeoutMs: number): Promise<Transport> {
  return new Promise((resolve, reject) => {
    const socket = open();
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no connection to ${address} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    socket.once(event, () => {
      clearTimeout(timer);
      socket.removeAllListeners("error");
      socket.setNoDelay(true);
      resolve(streamTransport(socket));
    });
  });
}

export const tcpTransport: TransportFactory = (address, timeoutMs) =>
  connectStream(() => net.connect({ host: address.host, port: address.port }), "connect", address, timeoutMs);

export function tlsTransport(options: TlsOptions = {}): TransportFactory {
  return (address, timeoutMs) =>
    connectStream(
      () => tls.connect({ host: address.host, port: address.port, servername: net.isIP(address.host) ? undefined : address.host, ...options }),
      "secureConnect",
      address,
      timeoutMs,
    );
}

/**
 * wss:// in Node.js. Its WebSocket checks the certificate against Node's default CAs (with
 * NODE_EXTRA_CA_CERTS) and takes no TLS options, and a certificate it refuses shows only as a
 * closed socket. So a TLS handshake with exactly that trust goes first: a refused certificate
 * fails the connect at once with the certificate error and what to do about it.
 */
export function secureWebSocketTransport(tlsOptionsGiven: boolean): TransportFactory {
  return async (address, timeoutMs) => {
    const started = Date.now();
    try {
      const probe = await connectStream(
        () => tls.connect({ host: address.host, port: address.port, servername: net.isIP(address.host) ? undefined : address.host }),
        "secureConnect",
        address,
        timeoutMs,
      );
      probe.close();
    } catch (error) {
      const given = tlsOptionsGiven ? "; options.tls does not reach it" : "";
      throw new Error(
        `${address}: ${(error as Error).message} (Node.js's WebSocket trusts its default CAs only${given}: ` +
          `start node with NODE_EXTRA_CA_CERTS=<the CA's PEM file>, or connect with tls:// and options.tls)`,
      );
    }
    return webSocketTransport(address, Math.max(1, timeoutMs - (Date.now() - started)));
  };
}

/** Client.connect with the Node.js transports: tcp://, tls://, ws://, wss://. */
export function connect(address: string, token: TokenSource, options: ClientOptions & { tls?: TlsOptions } = {}): Promise<Client> {
  const { tls: tlsOptions, ...rest } = options;
  return Client.connect(address, token, {
    ...rest,
    transports: {
      tcp: tcpTransport,
      tls: tlsTransport(tlsOptions),
      wss: secureWebSocketTransport(tlsOptions !== undefined),
      ...rest.transports,
    },
  });
}
