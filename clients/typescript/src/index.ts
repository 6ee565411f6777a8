// routerd-client: the browser-safe API (no Node.js modules, no dependencies).
// Node.js adds TCP and TLS from "routerd-client/node".

export * from "./protocol.js";
export * from "./errors.js";
export { mintToken, tokenFor } from "./token.js";
export { Address, webSocketTransport } from "./transport.js";
export type { Transport, TransportFactory, Scheme } from "./transport.js";
export { Client, TOKEN_EXPIRED, SESSION_KICKED, BACKOFF_DEFAULT } from "./client.js";
export type { Backoff, ClientOptions, ClientEvents, TokenSource } from "./client.js";
export { RETRY_DEFAULT, randomKey } from "./retry.js";
export type { CallOptions, RetryPolicy } from "./retry.js";
