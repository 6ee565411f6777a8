// Exactly-once calls (docs/protocol.md, section 12): request keys, and which failures a call is
// sent again after, with the same key.

import { Code } from "./protocol.js";
import { NotSent, RouterdError, ServerError } from "./errors.js";

/**
 * How a call is sent again: before retry n (from 0) the client waits uniform [0, min(maxDelayMs,
 * baseDelayMs * 2^n)] (full jitter), until the call's deadline; one attempt waits at most
 * attemptTimeoutMs for its answer before it counts as a client-side timeout and is sent again.
 */
export interface RetryPolicy {
  baseDelayMs: number;
  maxDelayMs: number;
  attemptTimeoutMs: number;
}

export const RETRY_DEFAULT: RetryPolicy = { baseDelayMs: 20, maxDelayMs: 1000, attemptTimeoutMs: 5000 };

/** Per call: its deadline, and what makes sending it again safe. */
export interface CallOptions {
  /** The call's deadline: waiting for a slot or a session, every attempt and every backoff. */
  timeoutMs?: number;
  /** The call may run twice with no harm (a read): it is sent without a request key, and still retried. */
  idempotent?: boolean;
  /** The request key (a u64 other than 0), for a key the application keeps itself; by default every call gets a fresh random one. */
  key?: bigint;
}

/** ERROR codes after which a request may have taken effect and a retry with its key may succeed. */
const MAYBE_APPLIED = new Set<number>([Code.UNAVAILABLE, Code.TIMEOUT, Code.INTERNAL]);

/** A fresh request key: 64 random bits, never 0 (0 is "no key"). */
export function randomKey(): bigint {
  const words = new BigUint64Array(1);
  do globalThis.crypto.getRandomValues(words);
  while (words[0] === 0n);
  return words[0];
}

/**
 * Whether a failed attempt is sent again. OVERLOADED and a request never sent changed nothing, so
 * any call is; a "maybe applied" failure (UNAVAILABLE, TIMEOUT, INTERNAL, a lost connection, a
 * client-side timeout) only when the resend cannot apply twice: a keyed request, or an idempotent
 * one. Anything else (a refusal, an application code) is the call's answer.
 */
export function retryable(error: RouterdError, resendIsSafe: boolean): boolean {
  if (error instanceof NotSent) return true;
  if (error instanceof ServerError) {
    if (error.code === Code.OVERLOADED) return true;
    return resendIsSafe && MAYBE_APPLIED.has(error.code);
  }
  // ConnectionLost, Kicked, RequestTimeout, ProtocolViolation: the connection or the answer was lost.
  return resendIsSafe;
}

export function retryDelayMs(policy: RetryPolicy, retry: number, random: () => number): number {
  return random() * Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** retry);
}
