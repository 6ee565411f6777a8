// Login tokens (docs/protocol.md, section 2), for tests and tools that hold
// the server's secret; a game client only carries a token its login service
// minted. WebCrypto, so it works in browsers and Node.js alike.

const U64_MAX = (1n << 64n) - 1n;

/** v1.<player_id>.<expiry>.<mac>, valid while now < expiryUnixS. */
export async function mintToken(secret: string | Uint8Array, playerId: bigint | number, expiryUnixS: bigint | number): Promise<string> {
  const player = BigInt(playerId);
  const expiry = BigInt(expiryUnixS);
  if (player <= 0n || player > U64_MAX) throw new RangeError(`player id ${player} is not a u64 other than 0`);
  if (expiry < 0n || expiry > U64_MAX) throw new RangeError(`expiry ${expiry} is not a u64`);
  const key = typeof secret === "string" ? new TextEncoder().encode(secret) : new Uint8Array(secret);
  const signed = `v1.${player}.${expiry}`;
  const subtle = globalThis.crypto.subtle;
  const hmac = await subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await subtle.sign("HMAC", hmac, new TextEncoder().encode(signed)));
  return `${signed}.${Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** A token for playerId valid for ttlS seconds from now. */
export function tokenFor(secret: string | Uint8Array, playerId: bigint | number, ttlS = 3600): Promise<string> {
  return mintToken(secret, playerId, Math.floor(Date.now() / 1000) + ttlS);
}
