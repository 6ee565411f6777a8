// The client: one session on one gateway at a time, moved by sys.redirect
// and reconnected after a lost connection. With exactlyOnce (the default) it
// speaks protocol version 2 when the server does: keyed calls retried until
// their deadline, and a lost session resumed (docs/protocol.md, section 12).

import * as p from "./protocol.js";
import { ConnectionLost, Kicked, NotSent, ProtocolViolation, RequestTimeout, RouterdError, ServerError } from "./errors.js";
import { Address, Scheme, Transport, TransportFactory, webSocketTransport } from "./transport.js";
import { CallOptions, RETRY_DEFAULT, RetryPolicy, randomKey, retryDelayMs, retryable } from "./retry.js";

/** A token, or a function returning one (called at every login, so a reconnect or redirect can use a fresh one). */
export type TokenSource = string | (() => string | Promise<string>);

/**
 * The sys.kicked reason of a session whose token expired (docs/protocol.md, section 2), and the
 * reason an auth.resume is refused for such a session kicked while its connection was lost.
 */
export const TOKEN_EXPIRED = "token expired";

/**
 * The reason an auth.resume is refused for a session kicked while its connection was lost (a newer
 * login of the player under kick_old, an operator): the sys.kicked the client never read (section 12).
 */
export const SESSION_KICKED = "session kicked";

/** Reconnect with full jitter: before attempt n (from 0) wait uniform [0, min(maxDelayMs, baseDelayMs * 2^n)]. */
export interface Backoff {
  baseDelayMs: number;
  maxDelayMs: number;
  attemptsMax: number;
}

export const BACKOFF_DEFAULT: Backoff = { baseDelayMs: 50, maxDelayMs: 2000, attemptsMax: 20 };

export interface ClientOptions {
  requestTimeoutMs?: number;
  connectTimeoutMs?: number;
  /** Requests in flight at most; more wait for a slot (the server's gateway.max_inflight, 1024 by default). */
  inflightMax?: number;
  maxBody?: number;
  /** Reconnects after a lost connection; null: none. Default: BACKOFF_DEFAULT with exactlyOnce, none without. */
  reconnect?: Backoff | null;
  /**
   * Protocol version 2 when the server speaks it (default true): request keys, retries of "maybe
   * applied" failures with the same key until the call's deadline, and resuming a lost session.
   * false: version 1 exactly, every failure returned to the caller.
   */
  exactlyOnce?: boolean;
  /** How exactlyOnce retries a call. */
  retry?: RetryPolicy;
  /** Gateways to try when a redirect names none, or after a reconnect to the current one fails. */
  fallbackAddresses?: string[];
  /** Transports by scheme; ws and wss are built in, Node.js adds tcp and tls (routerd-client/node). */
  transports?: Partial<Record<Scheme, TransportFactory>>;
  random?: () => number;
}

export interface ClientEvents {
  room_message: (message: p.RoomMessage) => void;
  /** The session was kicked: its sys.kicked reason, or "session kicked" / "token expired" when the kick was learnt from a refused resume. */
  kicked: (reason: string) => void;
  redirect: (redirect: p.Redirect) => void;
  /** Every PUSH, unknown routes included. */
  push: (frame: p.Frame) => void;
  disconnected: (error: RouterdError) => void;
  /** After every reconnect, a resumed session's or a fresh login's. */
  reconnected: (address: string) => void;
  /** The lost session was resumed: every push it missed arrives, once and in order. */
  resumed: (address: string) => void;
  /**
   * The server refused to resume (its reason, e.g. "resume window expired"): the client logged in
   * afresh, and pushes may have been lost. A refusal that says the session was kicked is a kick
   * instead (the kicked event).
   */
  resume_failed: (reason: string) => void;
  closed: (error: RouterdError | null) => void;
}

interface Pending {
  resolve: (body: Uint8Array) => void;
  reject: (error: Error) => void;
  timer: ReturnType<typeof setTimeout> | null;
  /** The caller was answered or gave up; the entry stays until the server's answer, so its seq is not reused. */
  done: boolean;
}

class Connection {
  readonly decoder: p.FrameDecoder;
  readonly pending = new Map<number, Pending>();
  nextSeq = 1;
  kicked: string | null = null;
  retired = false;
  movingTo: Address | null = null;
  violation: string | null = null;
  /** The session was resumed on this connection rather than logged in. */
  resumed = false;
  /** Its login (or resume) went out on it while it was open. */
  loginSent = false;
  /** A frame came on it other than a frame-level refusal (route 0, section 1). */
  heard = false;
  /**
   * Before any other frame, the refusal section 1 gives an unsupported version: ERROR on route 0,
   * BAD_REQUEST. At a version-2 login it says the server does not speak version 2.
   */
  versionRefused = false;

  constructor(
    readonly address: Address,
    readonly transport: Transport,
    maxBody: number,
    /** The protocol version of its login: 2 sends keys, 1 none. */
    readonly version: 1 | 2,
  ) {
    this.decoder = new p.FrameDecoder(maxBody);
  }

  takeSeq(): number {
    // Unique among this connection's requests in flight; bounded by inflightMax, so the scan ends.
    for (;;) {
      const seq = this.nextSeq;
      this.nextSeq = (this.nextSeq + 1) >>> 0;
      if (!this.pending.has(seq)) return seq;
    }
  }
}

/** What the attempts of one call sent. */
interface Sent {
  /** One went out with the request key: the call is never sent without it, which could apply it twice. */
  keyed: boolean;
  /** Sending it again could apply it twice: one went out without its key (a version-1 server), or could not go with it. */
  resendUnsafe: boolean;
}

const KEY_NOT_CARRIED =
  "not sent again: an earlier attempt went out with the request key, and the connection now speaks protocol version 1, " +
  "which cannot carry it (the call may or may not have taken effect)";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A version-2 connection the server closed right after its login went out, with no frame back but
 * a frame-level refusal, on a client the server never answered in version 2; or, whatever the
 * server answered before, with that refusal being section 1's for an unsupported version (a
 * cluster rolled back to a build without version 2). What a server that does not speak version 2
 * does (section 12).
 */
class ClosedAtVersion2 extends ConnectionLost {}

export class Client {
  readonly requestTimeoutMs: number;
  readonly inflightMax: number;
  playerId: bigint | null = null;
  redirectsFollowed = 0;
  reconnects = 0;

  private readonly home: Address;
  private readonly fallbacks: Address[];
  private readonly connectTimeoutMs: number;
  private readonly maxBody: number;
  private readonly backoff: Backoff | null;
  private readonly transports: Partial<Record<Scheme, TransportFactory>>;
  private readonly random: () => number;
  private readonly exactlyOnce: boolean;
  private readonly retry: RetryPolicy;
  /**
   * 2 once the server answered on a version-2 connection: from then on a connection lost at a login
   * is a lost connection, not a sign the server does not speak version 2 (a node at its session
   * cap closes a new connection at once, as one that does not closes at a version-2 login), unless
   * the server said so: the route-0 refusal of an unsupported version (section 1) right at the
   * login, as after the cluster was rolled back to a build without version 2. 1 once a version-2
   * login was closed so and a version-1 one taken: kept until the client is closed.
   */
  private serverVersion: 1 | 2 | null = null;
  /** The resumable session's sys.session, and the highest push sequence number delivered from it. */
  private session: p.Session | null = null;
  private lastPushSeq = 0;
  private conn: Connection | null = null;
  private ready = false;
  private closedError: RouterdError | null = null;
  private free: number;
  /** Callers waiting for a session that takes requests, or for a slot: retried in order. */
  private waiters: Array<() => void> = [];
  private handlers: { [E in keyof ClientEvents]: Array<ClientEvents[E]> } = {
    room_message: [],
    kicked: [],
    redirect: [],
    push: [],
    disconnected: [],
    reconnected: [],
    resumed: [],
    resume_failed: [],
    closed: [],
  };

  private constructor(
    address: string,
    private readonly token: TokenSource,
    options: ClientOptions,
  ) {
    this.home = Address.parse(address);
    this.fallbacks = (options.fallbackAddresses ?? []).map((a) => Address.parse(a));
    this.requestTimeoutMs = options.requestTimeoutMs ?? 10_000;
    this.connectTimeoutMs = options.connectTimeoutMs ?? 5_000;
    this.inflightMax = options.inflightMax ?? p.INFLIGHT_MAX_DEFAULT;
    if (this.inflightMax < 1) throw new RangeError("inflightMax must be at least 1");
    this.free = this.inflightMax;
    this.maxBody = options.maxBody ?? p.MAX_BODY_DEFAULT;
    this.exactlyOnce = options.exactlyOnce ?? true;
    this.retry = options.retry ?? RETRY_DEFAULT;
    this.backoff = options.reconnect === undefined ? (this.exactlyOnce ? BACKOFF_DEFAULT : null) : options.reconnect;
    this.transports = { ws: webSocketTransport, wss: webSocketTransport, ...options.transports };
    this.random = options.random ?? Math.random;
  }

  /** Connects to address (ws://, wss://, and in Node.js tcp://, tls://) and logs in; rejects with AUTH_FAILED and the like. */
  static async connect(address: string, token: TokenSource, options: ClientOptions = {}): Promise<Client> {
    const client = new Client(address, token, options);
    client.adopt(await client.open(client.home));
    return client;
  }

  /** The gateway the session is on now. */
  get address(): string {
    return (this.conn?.address ?? this.home).toString();
  }

  inflight(): number {
    return this.conn?.pending.size ?? 0;
  }

  on<E extends keyof ClientEvents>(event: E, handler: ClientEvents[E]): void {
    this.handlers[event].push(handler);
  }

  private emit<E extends keyof ClientEvents>(event: E, ...args: Parameters<ClientEvents[E]>): void {
    for (const handler of this.handlers[event]) {
      try {
        (handler as (...a: unknown[]) => void)(...args);
      } catch (error) {
        // A handler's fault must not end the session.
        console.error(`routerd-client: handler of ${event} failed`, error);
      }
    }
  }

  /** The protocol version the client speaks: 2 when exactlyOnce and the server takes it, else 1. */
  get protocolVersion(): 1 | 2 {
    return this.conn?.version ?? (this.exactlyOnce && this.serverVersion !== 1 ? 2 : 1);
  }

  /**
   * One request on any route (a user object type's included): the RESPONSE body, or the ERROR as a
   * ServerError. The timeout covers waiting for a slot, a redirect or a reconnect, and the answer.
   * With exactlyOnce it also covers the retries: the call is sent with a request key (unless
   * options.idempotent), and sent again with that key and body after a "maybe applied" failure
   * or OVERLOADED, after a backoff, until the deadline; the caller sees one result.
   */
  call(routeId: number, body: Uint8Array = new Uint8Array(), options: CallOptions = {}): Promise<Uint8Array> {
    const keyed = this.exactlyOnce && !options.idempotent;
    const room = this.maxBody - (keyed ? p.KEY_LEN : 0);
    if (body.length > room) return Promise.reject(new RangeError(`body of ${body.length} bytes exceeds max_body ${this.maxBody}${keyed ? " with its key" : ""}`));
    if (options.key === 0n) return Promise.reject(new RangeError("request key 0 means no key: use idempotent"));
    const timeoutMs = options.timeoutMs ?? this.requestTimeoutMs;
    if (!this.exactlyOnce) return this.attempt(routeId, body, 0n, timeoutMs, { keyed: false, resendUnsafe: false });
    return this.callWithRetries(routeId, body, keyed ? (options.key ?? randomKey()) : 0n, options.idempotent ?? false, timeoutMs);
  }

  private async callWithRetries(routeId: number, body: Uint8Array, key: bigint, idempotent: boolean, timeoutMs: number): Promise<Uint8Array> {
    const deadline = Date.now() + timeoutMs;
    const sent: Sent = { keyed: false, resendUnsafe: false };
    // A failure not retried is the call's answer. One retried until the deadline (or until the
    // client closed) is reported as: the last failure, but a maybe-applied one over one that was
    // not (a later attempt not sent, or refused before it ran, does not undo an earlier one that
    // was), and a failure the server gave over the deadline's own timeout of the last attempt.
    let maybeApplied: RouterdError | null = null;
    let last: RouterdError | null = null;
    for (let retry = 0; ; retry++) {
      const allowanceMs = Math.min(deadline - Date.now(), this.retry.attemptTimeoutMs);
      try {
        // The first attempt is sent before call() returns, as without exactlyOnce.
        return await this.attempt(routeId, body, key, allowanceMs, sent);
      } catch (error) {
        if (!(error instanceof RouterdError)) throw error;
        const deadlineCut = allowanceMs < this.retry.attemptTimeoutMs && (error instanceof RequestTimeout || error instanceof NotSent);
        if (!error.retrySafe && !(deadlineCut && maybeApplied !== null)) maybeApplied = error;
        if (!deadlineCut || last === null) last = error;
        if (!retryable(error, idempotent || !sent.resendUnsafe)) throw error;
        const failure = maybeApplied ?? last;
        if (this.closedError !== null) throw failure;
        const delay = retryDelayMs(this.retry, retry, this.random);
        if (Date.now() + delay >= deadline) throw failure;
        await sleep(delay);
      }
    }
  }

  /** One send of a call and its answer, within timeoutMs. */
  private attempt(routeId: number, body: Uint8Array, key: bigint, timeoutMs: number, sent: Sent): Promise<Uint8Array> {
    return new Promise((resolve, reject) => {
      let entry: Pending | null = null;
      let gaveUp = false;
      const timer = setTimeout(() => {
        gaveUp = true;
        if (entry === null) return reject(new NotSent(`no slot or no session within ${timeoutMs} ms`));
        entry.done = true;
        reject(new RequestTimeout(`no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      const attempt = (): void => {
        if (gaveUp) return;
        if (this.closedError !== null) {
          clearTimeout(timer);
          return reject(new NotSent(`client closed: ${this.closedError.message}`));
        }
        if (!this.ready || this.conn === null || this.free === 0) {
          this.waiters.push(attempt);
          return;
        }
        if (key !== 0n && this.conn.version === 2) sent.keyed = true;
        else if (key !== 0n) {
          // A version-1 connection carries no key.
          sent.resendUnsafe = true;
          if (sent.keyed) {
            // Sent with its key before: sent without it, it would run again if that one ran.
            clearTimeout(timer);
            return reject(new ConnectionLost(KEY_NOT_CARRIED));
          }
        }
        entry = { resolve, reject, timer, done: false };
        this.send(this.conn, routeId, body, entry, key);
      };
      attempt();
    });
  }

  /**
   * One request on a JSON route (a scripted type's, docs/scripts.md): `value` sent as UTF-8 JSON, the
   * RESPONSE decoded from JSON (`undefined` for an empty one; a body that is not JSON as its text).
   */
  async callJson(routeId: number, value: unknown, options: CallOptions = {}): Promise<unknown> {
    const body = new TextEncoder().encode(JSON.stringify(value ?? null));
    const answer = await this.call(routeId, body, options);
    if (answer.length === 0) return undefined;
    const text = new TextDecoder().decode(answer);
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  }

  /** Sends a request on conn, keyed when key is not 0 and conn speaks version 2; false if the transport refused it. */
  private send(conn: Connection, routeId: number, body: Uint8Array, entry: Pending, key = 0n, version2 = false): boolean {
    this.free -= 1;
    const seq = conn.takeSeq();
    conn.pending.set(seq, entry);
    const keyed = (key !== 0n || version2) && conn.version === 2;
    try {
      conn.transport.send(keyed ? p.encodeKeyedRequest(routeId, seq, key, body) : p.encodeFrame(p.Kind.REQUEST, routeId, seq, body));
      return true;
    } catch {
      // The transport reports the same end through onClose, which fails what is pending.
      return false;
    }
  }

  private setReady(): void {
    this.ready = true;
    this.pump();
  }

  /** Runs waiting callers while the session takes requests and slots are free. */
  private pump(): void {
    while (this.waiters.length > 0 && ((this.ready && this.free > 0) || this.closedError !== null)) {
      this.waiters.shift()!();
    }
  }

  // Typed calls of the built-in routes (docs/protocol.md, section 5). The ones section 4 says may
  // run again whatever happened (ping, playerGet, roomJoin, roomLeave) are idempotent: sent
  // without a key; playerIncr and roomSay get one.

  ping(data: Uint8Array = new Uint8Array(), options?: CallOptions): Promise<Uint8Array> {
    return this.call(p.Route.SYS_PING, data, { idempotent: true, ...options });
  }

  async playerGet(options?: CallOptions): Promise<bigint> {
    return p.decodeI64(await this.call(p.Route.PLAYER_GET, new Uint8Array(), { idempotent: true, ...options }));
  }

  async playerIncr(delta: bigint | number, options?: CallOptions): Promise<bigint> {
    return p.decodeI64(await this.call(p.Route.PLAYER_INCR, p.encodeI64(delta), options));
  }

  async roomJoin(roomId: bigint | number, options?: CallOptions): Promise<number> {
    return p.decodeU32(await this.call(p.Route.ROOM_JOIN, p.encodeU64(roomId), { idempotent: true, ...options }));
  }

  async roomLeave(roomId: bigint | number, options?: CallOptions): Promise<void> {
    await this.call(p.Route.ROOM_LEAVE, p.encodeU64(roomId), { idempotent: true, ...options });
  }

  async roomSay(roomId: bigint | number, text: string, options?: CallOptions): Promise<number> {
    return p.decodeU32(await this.call(p.Route.ROOM_SAY, p.encodeSay(roomId, text), options));
  }

  // Connections.

  private async freshToken(): Promise<string> {
    return typeof this.token === "string" ? this.token : await this.token();
  }

  /**
   * A new connection to address, its session resumed or logged in. With exactlyOnce the login is
   * a version-2 REQUEST; a server that closes at it does not speak version 2 (section 12), and
   * the client logs in again, in version 1, on a new connection. Only that close counts
   * (ClosedAtVersion2): a refused connect, or a connection lost before the login went out, is a
   * lost connection, and the next attempt is version 2. Once the server answered version 2, a close
   * at the login counts only after section 1's refusal of an unsupported version (the cluster was
   * rolled back to a build without version 2); a bare close (a node at its session cap) or one
   * after any other frame is a lost connection. A call sent with its key is never sent again
   * without it (attempt()).
   */
  private async open(address: Address): Promise<Connection> {
    if (!this.exactlyOnce || this.serverVersion === 1) return this.openWith(address, 1);
    try {
      const conn = await this.openWith(address, 2);
      this.serverVersion = 2;
      return conn;
    } catch (error) {
      if (!(error instanceof ClosedAtVersion2)) throw error;
      const conn = await this.openWith(address, 1);
      this.serverVersion = 1;
      if (this.session !== null) this.forgetSession("the server does not speak protocol version 2");
      return conn;
    }
  }

  private async openWith(address: Address, version: 1 | 2): Promise<Connection> {
    const factory = this.transports[address.scheme];
    if (!factory) throw new Error(`no ${address.scheme} transport here (Node.js: import from routerd-client/node)`);
    const transport = await factory(address, this.connectTimeoutMs);
    const conn = new Connection(address, transport, this.maxBody, version);
    transport.onData = (data) => this.onData(conn, data);
    transport.onClose = (why) => this.onEnd(conn, why);
    try {
      if (version === 2 && this.session !== null) await this.resume(conn, this.session);
      if (!conn.resumed) {
        const token = await this.freshToken();
        this.playerId = p.decodeU64(await this.handshake(conn, p.Route.AUTH_LOGIN, p.utf8(token)));
      }
    } catch (error) {
      conn.retired = true;
      transport.close();
      const refused =
        version === 2 &&
        error instanceof ConnectionLost &&
        conn.loginSent &&
        !conn.heard &&
        (this.serverVersion === null || conn.versionRefused);
      throw refused ? new ClosedAtVersion2(error.reason) : error;
    }
    return conn;
  }

  /**
   * auth.resume on conn; an ERROR (the window passed, say) forgets the session and leaves conn to
   * log in. A refusal saying the session was kicked is the sys.kicked the client missed: a kick, so
   * it throws Kicked (no login), but for an expired token when a fresh one can be had.
   */
  private async resume(conn: Connection, session: p.Session): Promise<void> {
    try {
      const body = await this.handshake(conn, p.Route.AUTH_RESUME, p.encodeResume(session.token, this.lastPushSeq));
      this.playerId = p.decodeU64(body);
      conn.resumed = true;
    } catch (error) {
      // A lost connection keeps the session for the next attempt; a refusal ends it.
      if (!(error instanceof ServerError)) throw error;
      if (error.code === p.Code.AUTH_FAILED && (error.reason === SESSION_KICKED || error.reason === TOKEN_EXPIRED)) {
        this.session = null;
        this.lastPushSeq = 0;
        this.emit("kicked", error.reason);
        if (!this.mayLogInAfterKick(error.reason)) throw new Kicked(error.reason);
        return;
      }
      this.forgetSession(error.reason || error.codeName);
    }
  }

  /**
   * A kick is final: two clients of one player would kick each other forever. But for an expired
   * token, when reconnecting is on and a fresh token can be had (section 2).
   */
  private mayLogInAfterKick(reason: string): boolean {
    return this.backoff !== null && reason === TOKEN_EXPIRED && typeof this.token !== "string";
  }

  private forgetSession(reason: string): void {
    this.session = null;
    this.lastPushSeq = 0;
    this.emit("resume_failed", reason);
  }

  /** One login-time request on a connection not yet the session's (version 2 on a version-2 one), within connectTimeoutMs. */
  private handshake(conn: Connection, routeId: number, body: Uint8Array): Promise<Uint8Array> {
    return new Promise<Uint8Array>((resolve, reject) => {
      // Ended already (while a token was fetched, say): nothing would answer it.
      if (conn.retired) return reject(new ConnectionLost(`the connection closed before route ${routeId} was sent`));
      const entry: Pending = { resolve, reject, timer: null, done: false };
      entry.timer = setTimeout(() => {
        entry.done = true;
        reject(new RequestTimeout(`no answer to route ${routeId} within ${this.connectTimeoutMs} ms`));
      }, this.connectTimeoutMs);
      if (this.send(conn, routeId, body, entry, 0n, true)) conn.loginSent = true;
    });
  }

  private onData(conn: Connection, data: Uint8Array): void {
    try {
      conn.decoder.feed(data);
      for (let frame = conn.decoder.next(); frame !== null; frame = conn.decoder.next()) this.onFrame(conn, frame);
    } catch (error) {
      if (!(error instanceof p.FrameError)) throw error;
      conn.violation = error.message;
      conn.transport.close();
      this.onEnd(conn, error.message, new ProtocolViolation(error.message));
    }
  }

  private onFrame(conn: Connection, frame: p.Frame): void {
    if (frame.kind !== p.Kind.ERROR || frame.routeId !== 0) conn.heard = true;
    if (frame.kind === p.Kind.PUSH) return this.onPush(conn, frame);
    const entry = conn.pending.get(frame.seq);
    if (entry === undefined) {
      // Route 0 answers no request: a frame-level refusal before the server closes (section 1).
      if (frame.kind === p.Kind.ERROR) {
        const { code, reason } = p.decodeError(frame.body);
        conn.violation = new ServerError(code, reason).message;
        // As a server refuses a version it does not speak; the reason is for people (section 4).
        if (frame.routeId === 0 && code === p.Code.BAD_REQUEST && !conn.heard) conn.versionRefused = true;
      }
      return;
    }
    conn.pending.delete(frame.seq);
    // An answer on a version-2 connection (a login's, refused or not, included): the server speaks version 2.
    if (conn.version === 2) this.serverVersion = 2;
    this.free += 1;
    if (!entry.done) {
      entry.done = true;
      if (entry.timer !== null) clearTimeout(entry.timer);
      if (frame.kind === p.Kind.RESPONSE) entry.resolve(frame.body);
      else {
        const { code, reason } = p.decodeError(frame.body);
        entry.reject(new ServerError(code, reason));
      }
    }
    if (conn.movingTo !== null && conn.pending.size === 0 && conn === this.conn) void this.move(conn);
    else this.pump();
  }

  private onPush(conn: Connection, frame: p.Frame): void {
    if (frame.routeId === p.Route.SYS_SESSION && conn.version === 2) {
      // The resume token is a secret of the session: kept, never handed to handlers.
      this.session = p.decodeSession(frame.body);
      this.lastPushSeq = 0;
      return;
    }
    if (frame.seq !== 0 && this.session !== null) {
      // A resumable session's pushes are numbered: one at or below the last delivered came before
      // the connection was lost and is delivered again by the resume.
      if (frame.seq <= this.lastPushSeq) return;
      this.lastPushSeq = frame.seq;
    }
    this.emit("push", frame);
    if (frame.routeId === p.Route.ROOM_MESSAGE) this.emit("room_message", p.decodeRoomMessage(frame.body));
    else if (frame.routeId === p.Route.SYS_KICKED) {
      // A kick ends the session: a reconnect after one (a fresh token's) logs in, never resumes.
      this.session = null;
      conn.kicked = p.fromUtf8(frame.body);
      this.emit("kicked", conn.kicked);
    } else if (frame.routeId === p.Route.SYS_REDIRECT) {
      const redirect = p.decodeRedirect(frame.body);
      this.emit("redirect", redirect);
      this.redirect(conn, redirect);
    }
    // Other PUSH routes are a newer server's: ignored (section 7).
  }

  private redirect(conn: Connection, redirect: p.Redirect): void {
    // A connection still logging in is not this.conn yet: a node that places sessions on their
    // player's node redirects right after the login answer, and adopt() moves it once open() returns.
    if (conn.retired || conn.movingTo !== null || this.closedError !== null) return;
    let target: Address;
    if (redirect.gateway) target = conn.address.withGateway(redirect.gateway);
    else {
      const others = this.fallbacks.filter((a) => a.toString() !== conn.address.toString());
      if (others.length === 0) return;
      target = others[Math.floor(this.random() * others.length)];
    }
    // Stop sending here; once the answers owed here are in, move.
    conn.movingTo = target;
    if (conn !== this.conn) return;
    this.ready = false;
    if (conn.pending.size === 0) void this.move(conn);
  }

  /** Makes a connection open() returned the session's: ready, or moving on at once if it was redirected while it logged in. */
  private adopt(conn: Connection): void {
    this.conn = conn;
    if (conn.movingTo !== null) void this.move(conn);
    else this.setReady();
  }

  private async move(conn: Connection): Promise<void> {
    if (conn.retired || conn.movingTo === null) return;
    conn.retired = true;
    const target = conn.movingTo;
    conn.transport.close();
    let opened: Connection;
    try {
      opened = await this.open(target);
    } catch (error) {
      this.conn = null;
      // Its resume told the session was kicked: final, as after sys.kicked.
      const lost = error instanceof Kicked ? error : new ConnectionLost(`redirect to ${target} failed: ${(error as Error).message}`);
      this.emit("disconnected", lost);
      if (this.backoff === null || error instanceof Kicked) return this.closeForGood(lost);
      return this.reconnectLoop([target, conn.address, ...this.fallbacks]);
    }
    this.redirectsFollowed += 1;
    this.adopt(opened);
    if (opened.resumed) this.emit("resumed", target.toString());
  }

  private onEnd(conn: Connection, why: string, error?: RouterdError): void {
    if (conn.retired) return this.failPending(conn, new ConnectionLost("the connection was left"));
    const lost = conn.kicked !== null ? new Kicked(conn.kicked) : (error ?? new ConnectionLost(conn.violation ?? why));
    conn.retired = true;
    this.failPending(conn, lost);
    if (conn !== this.conn || this.closedError !== null) return;
    this.conn = null;
    this.ready = false;
    this.emit("disconnected", lost);
    const mayReconnect = conn.kicked === null ? this.backoff !== null : this.mayLogInAfterKick(conn.kicked);
    if (!mayReconnect) return this.closeForGood(lost);
    void this.reconnectLoop([conn.address, ...this.fallbacks]);
  }

  private failPending(conn: Connection, error: RouterdError): void {
    const pending = [...conn.pending.values()];
    conn.pending.clear();
    for (const entry of pending) {
      this.free += 1;
      if (entry.done) continue;
      entry.done = true;
      if (entry.timer !== null) clearTimeout(entry.timer);
      const Type = error.constructor as new (reason: string) => RouterdError;
      entry.reject(new Type(error.reason));
    }
  }

  private async reconnectLoop(addresses: Address[]): Promise<void> {
    const backoff = this.backoff!;
    for (let attempt = 0; attempt < backoff.attemptsMax; attempt++) {
      await sleep(this.random() * Math.min(backoff.maxDelayMs, backoff.baseDelayMs * 2 ** attempt));
      if (this.closedError !== null) return;
      const address = addresses[attempt % addresses.length];
      let opened: Connection;
      try {
        opened = await this.open(address);
      } catch (error) {
        // Its resume told the session was kicked while the connection was lost: final, as after sys.kicked.
        if (error instanceof Kicked) return this.closeForGood(error);
        continue;
      }
      this.reconnects += 1;
      this.adopt(opened);
      if (opened.resumed) this.emit("resumed", address.toString());
      this.emit("reconnected", address.toString());
      return;
    }
    this.closeForGood(new ConnectionLost(`${backoff.attemptsMax} reconnects failed`));
  }

  private closeForGood(error: RouterdError | null): void {
    if (this.closedError !== null) return;
    this.closedError = error ?? new NotSent("closed by the client");
    this.pump();
    this.emit("closed", error);
  }

  /** Closes the session: requests in flight fail with ConnectionLost, those waiting with NotSent. */
  close(): void {
    this.closeForGood(null);
    const conn = this.conn;
    this.conn = null;
    if (conn !== null) {
      conn.retired = true;
      conn.transport.close();
      this.failPending(conn, new ConnectionLost("closed by the client"));
    }
  }
}
