// The frame codec of docs/protocol.md, sans-IO: bytes in, frames out.

export const MAGIC0 = 0x52; // "R"
export const MAGIC1 = 0x54; // "T"
export const VERSION = 1;
/** The version of a keyed REQUEST (section 12): a u64 request key before the route's body. */
export const VERSION_KEYED = 2;
/** The bytes a request key adds to a body. */
export const KEY_LEN = 8;
/** A resume token's bytes (section 12). */
export const RESUME_TOKEN_LEN = 16;
export const HEADER_LEN = 16;
/** The largest body accepted by default: the server's default gateway.max_body. */
export const MAX_BODY_DEFAULT = 65536;
/** The server's default gateway.max_inflight (section 3). */
export const INFLIGHT_MAX_DEFAULT = 1024;
/** room.say text, in bytes (section 8). */
export const SAY_TEXT_MAX = 1024;

export const Kind = { REQUEST: 1, RESPONSE: 2, PUSH: 3, ERROR: 4 } as const;

export const Route = {
  SYS_PING: 1,
  AUTH_LOGIN: 2,
  AUTH_RESUME: 3,
  PLAYER_GET: 10,
  PLAYER_INCR: 11,
  ROOM_JOIN: 20,
  ROOM_LEAVE: 21,
  ROOM_SAY: 22,
  ROOM_MESSAGE: 100,
  SYS_KICKED: 101,
  SYS_REDIRECT: 102,
  SYS_SESSION: 103,
} as const;

export const Code = {
  UNKNOWN_ROUTE: 1,
  DIRECTION_REJECTED: 2,
  AUTH_REQUIRED: 3,
  AUTH_FAILED: 4,
  BAD_REQUEST: 5,
  OVERLOADED: 6,
  UNAVAILABLE: 7,
  TIMEOUT: 8,
  INTERNAL: 9,
} as const;

export interface Frame {
  kind: number;
  routeId: number;
  seq: number;
  body: Uint8Array;
}

/** The peer broke the framing rules: the connection must close. */
export class FrameError extends Error {}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8");

export function encodeFrame(kind: number, routeId: number, seq: number, body: Uint8Array = new Uint8Array()): Uint8Array {
  const frame = new Uint8Array(HEADER_LEN + body.length);
  const view = new DataView(frame.buffer);
  frame[0] = MAGIC0;
  frame[1] = MAGIC1;
  frame[2] = VERSION;
  frame[3] = kind;
  view.setUint32(4, routeId, true);
  view.setUint32(8, seq >>> 0, true);
  view.setUint32(12, body.length, true);
  frame.set(body, HEADER_LEN);
  return frame;
}

/**
 * A version-2 REQUEST (section 12): the u64 request key (0 = no key), then the route's body;
 * body_len counts both.
 */
export function encodeKeyedRequest(routeId: number, seq: number, key: bigint, body: Uint8Array = new Uint8Array()): Uint8Array {
  const frame = encodeFrame(Kind.REQUEST, routeId, seq, concat(encodeU64(key), body));
  frame[2] = VERSION_KEYED;
  return frame;
}

/**
 * The stream decoder of section 1 for frames a server sends. A frame whose
 * magic, version or kind is not version 1's, or whose body is longer than
 * maxBody, throws FrameError: an unknown frame is a violation, never skipped.
 */
export class FrameDecoder {
  private buffer = new Uint8Array(0);
  private start = 0;
  private end = 0;

  constructor(private readonly maxBody: number = MAX_BODY_DEFAULT) {}

  feed(data: Uint8Array): void {
    if (this.end + data.length > this.buffer.length) {
      const held = this.end - this.start;
      const size = Math.max(held + data.length, this.buffer.length * 2, 4096);
      const grown = new Uint8Array(size);
      grown.set(this.buffer.subarray(this.start, this.end));
      this.buffer = grown;
      this.start = 0;
      this.end = held;
    }
    this.buffer.set(data, this.end);
    this.end += data.length;
  }

  buffered(): number {
    return this.end - this.start;
  }

  next(): Frame | null {
    const held = this.end - this.start;
    if (held < HEADER_LEN) return null;
    const b = this.buffer;
    const at = this.start;
    const view = new DataView(b.buffer, b.byteOffset + at, HEADER_LEN);
    if (b[at] !== MAGIC0 || b[at + 1] !== MAGIC1) throw new FrameError(`bad magic ${b[at]} ${b[at + 1]}`);
    if (b[at + 2] !== VERSION) throw new FrameError(`unsupported version ${b[at + 2]}`);
    const kind = b[at + 3];
    if (kind !== Kind.RESPONSE && kind !== Kind.PUSH && kind !== Kind.ERROR) {
      throw new FrameError(`kind ${kind} is not one a server sends`);
    }
    const bodyLen = view.getUint32(12, true);
    if (bodyLen > this.maxBody) throw new FrameError(`body_len ${bodyLen} exceeds max_body ${this.maxBody}`);
    if (held < HEADER_LEN + bodyLen) return null;
    const body = b.slice(at + HEADER_LEN, at + HEADER_LEN + bodyLen);
    this.start += HEADER_LEN + bodyLen;
    if (this.start === this.end) this.start = this.end = 0;
    return { kind, routeId: view.getUint32(4, true), seq: view.getUint32(8, true), body };
  }

  frames(): Frame[] {
    const out: Frame[] = [];
    for (let frame = this.next(); frame !== null; frame = this.next()) out.push(frame);
    return out;
  }
}

// Bodies of the built-in routes (sections 5 and 6).

function exact(body: Uint8Array, size: number): DataView {
  if (body.length !== size) throw new FrameError(`body of ${body.length} bytes where ${size} were due`);
  return new DataView(body.buffer, body.byteOffset, body.length);
}

export function encodeI64(value: bigint | number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigInt64(0, BigInt(value), true);
  return out;
}

export function encodeU64(value: bigint | number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(value), true);
  return out;
}

export const decodeI64 = (body: Uint8Array): bigint => exact(body, 8).getBigInt64(0, true);
export const decodeU64 = (body: Uint8Array): bigint => exact(body, 8).getBigUint64(0, true);
export const decodeU32 = (body: Uint8Array): number => exact(body, 4).getUint32(0, true);

export const utf8 = (text: string): Uint8Array => encoder.encode(text);
export const fromUtf8 = (bytes: Uint8Array): string => decoder.decode(bytes);

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, part) => n + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

export function encodeSay(roomId: bigint | number, text: string): Uint8Array {
  const bytes = utf8(text);
  if (bytes.length > SAY_TEXT_MAX) throw new RangeError(`room.say text is ${bytes.length} bytes, more than ${SAY_TEXT_MAX}`);
  return concat(encodeU64(roomId), bytes);
}

export function encodeError(code: number, reason = ""): Uint8Array {
  const head = new Uint8Array(2);
  new DataView(head.buffer).setUint16(0, code, true);
  return concat(head, utf8(reason));
}

export function decodeError(body: Uint8Array): { code: number; reason: string } {
  if (body.length < 2) throw new FrameError(`ERROR body of ${body.length} bytes has no code`);
  const code = new DataView(body.buffer, body.byteOffset, 2).getUint16(0, true);
  return { code, reason: fromUtf8(body.subarray(2)) };
}

export interface RoomMessage {
  roomId: bigint;
  fromPlayerId: bigint;
  text: string;
}

export function decodeRoomMessage(body: Uint8Array): RoomMessage {
  if (body.length < 16) throw new FrameError(`room.message body of ${body.length} bytes`);
  const view = new DataView(body.buffer, body.byteOffset, 16);
  return { roomId: view.getBigUint64(0, true), fromPlayerId: view.getBigUint64(8, true), text: fromUtf8(body.subarray(16)) };
}

export function encodeRoomMessage(message: RoomMessage): Uint8Array {
  return concat(encodeU64(message.roomId), encodeU64(message.fromPlayerId), utf8(message.text));
}

export interface Redirect {
  graceMs: number;
  /** host:port of another gateway, or "" when the server named none. */
  gateway: string;
}

export function decodeRedirect(body: Uint8Array): Redirect {
  if (body.length < 4) throw new FrameError(`sys.redirect body of ${body.length} bytes`);
  const graceMs = new DataView(body.buffer, body.byteOffset, 4).getUint32(0, true);
  return { graceMs, gateway: fromUtf8(body.subarray(4)) };
}

export function encodeRedirect(redirect: Redirect): Uint8Array {
  const head = new Uint8Array(4);
  new DataView(head.buffer).setUint32(0, redirect.graceMs, true);
  return concat(head, utf8(redirect.gateway));
}

// Version 2 (section 12).

/** sys.session: the session's resume token and how long after a lost connection it resumes. */
export interface Session {
  token: Uint8Array;
  windowMs: number;
}

export function decodeSession(body: Uint8Array): Session {
  const view = exact(body, RESUME_TOKEN_LEN + 4);
  return { token: body.slice(0, RESUME_TOKEN_LEN), windowMs: view.getUint32(RESUME_TOKEN_LEN, true) };
}

export function encodeSession(session: Session): Uint8Array {
  const window = new Uint8Array(4);
  new DataView(window.buffer).setUint32(0, session.windowMs, true);
  return concat(session.token, window);
}

/** auth.resume's body: the resume token, then the highest push sequence number received. */
export function encodeResume(token: Uint8Array, lastPushSeq: number): Uint8Array {
  if (token.length !== RESUME_TOKEN_LEN) throw new RangeError(`a resume token is ${RESUME_TOKEN_LEN} bytes, not ${token.length}`);
  const seq = new Uint8Array(4);
  new DataView(seq.buffer).setUint32(0, lastPushSeq >>> 0, true);
  return concat(token, seq);
}
