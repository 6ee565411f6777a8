// The test vectors of docs/protocol.md (section 10), read out of the document itself.

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join, dirname } from "node:path";

// dist/test/vectors.js -> the repository's root, four levels up.
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
export const DOC = process.env.ROUTERD_PROTOCOL_DOC ?? join(root, "docs", "protocol.md");

export type Vector = Record<string, string>;

export function vectors(): Vector[] {
  const text = readFileSync(DOC, "utf8");
  const out: Vector[] = [];
  for (const match of text.matchAll(/```vector\n([\s\S]*?)```/g)) {
    const fields: Vector = {};
    let last: string | null = null;
    for (const line of match[1].split("\n")) {
      if (!line.trim()) continue;
      if (line.startsWith(" ") && last !== null) {
        fields[last] += " " + line.trim();
        continue;
      }
      const colon = line.indexOf(":");
      last = line.slice(0, colon).trim();
      fields[last] = line.slice(colon + 1).trim();
    }
    out.push(fields);
  }
  if (out.length < 10) throw new Error(`only ${out.length} vectors in ${DOC}`);
  return out;
}

export function hexBytes(text: string): Uint8Array {
  const hex = text.replace(/[|\s]/g, "");
  return Uint8Array.from(hex.match(/../g) ?? [], (pair) => parseInt(pair, 16));
}

/** `u16 3 + utf8 "login first"` (and `hex 1011…` for raw bytes) as bytes. */
export function encodeFields(text: string): Uint8Array {
  const parts: number[] = [];
  for (const m of text.matchAll(/(u16|u32|u64|i64) (-?\d+)|utf8 "((?:[^"\\]|\\.)*)"|hex ([0-9a-f]+)/g)) {
    if (m[4]) parts.push(...hexBytes(m[4]));
    else if (m[1]) {
      const size = { u16: 2, u32: 4, u64: 8, i64: 8 }[m[1] as "u16"];
      const view = new DataView(new ArrayBuffer(size));
      if (m[1] === "u16") view.setUint16(0, Number(m[2]), true);
      else if (m[1] === "u32") view.setUint32(0, Number(m[2]), true);
      else if (m[1] === "u64") view.setBigUint64(0, BigInt(m[2]), true);
      else view.setBigInt64(0, BigInt(m[2]), true);
      parts.push(...new Uint8Array(view.buffer));
    } else parts.push(...new TextEncoder().encode(m[3]));
  }
  return Uint8Array.from(parts);
}
