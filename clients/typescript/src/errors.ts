// Typed failures, each marked retry-safe or not as docs/protocol.md's table
// "Which failures are safe to retry" (section 4) says.

import { Code } from "./protocol.js";

const NAMES: Record<number, string> = Object.fromEntries(Object.entries(Code).map(([name, code]) => [code, name]));

/** Codes after which the request changed nothing. */
const NOT_APPLIED = new Set<number>([
  Code.UNKNOWN_ROUTE,
  Code.DIRECTION_REJECTED,
  Code.AUTH_REQUIRED,
  Code.AUTH_FAILED,
  Code.BAD_REQUEST,
  Code.OVERLOADED,
]);

/**
 * A failed request or connection. retrySafe is true only when the request
 * certainly did not take effect; false is "maybe applied".
 */
export class RouterdError extends Error {
  readonly code: number | null = null;
  readonly retrySafe: boolean = false;
  constructor(
    readonly codeName: string,
    readonly reason: string,
  ) {
    super(reason ? `${codeName}: ${reason}` : codeName);
    this.name = new.target.name;
  }
}

/** An ERROR frame: the protocol's code and reason. */
export class ServerError extends RouterdError {
  override readonly code: number;
  override readonly retrySafe: boolean;
  constructor(code: number, reason: string) {
    super(NAMES[code] ?? `CODE_${code}`, reason);
    this.code = code;
    this.retrySafe = NOT_APPLIED.has(code);
  }
}

/** The connection closed before the answer: maybe applied. */
export class ConnectionLost extends RouterdError {
  constructor(reason: string) {
    super("CONNECTION_LOST", reason);
  }
}

/** No answer within the client's own timeout: maybe applied. */
export class RequestTimeout extends RouterdError {
  constructor(reason: string) {
    super("CLIENT_TIMEOUT", reason);
  }
}

/** Refused before it was sent: not applied. */
export class NotSent extends RouterdError {
  override readonly retrySafe = true;
  constructor(reason: string) {
    super("NOT_SENT", reason);
  }
}

/** sys.kicked, then the server closed ("token expired" when the login's token expired). */
export class Kicked extends RouterdError {
  constructor(reason: string) {
    super("KICKED", reason);
  }
}

/** The server broke the framing rules; the client closed the connection. */
export class ProtocolViolation extends RouterdError {
  constructor(reason: string) {
    super("PROTOCOL_VIOLATION", reason);
  }
}
