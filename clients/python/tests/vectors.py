"""The test vectors of docs/protocol.md (section 10), read out of the
document itself so the client is held to the text a user reads."""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

DOC = Path(os.environ.get("ROUTERD_PROTOCOL_DOC", Path(__file__).resolve().parents[3] / "docs" / "protocol.md"))


def vectors() -> list[dict[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```vector\n(.*?)```", text, flags=re.S)
    out = []
    for block in blocks:
        fields: dict[str, str] = {}
        last = None
        for line in block.splitlines():
            if not line.strip():
                continue
            if line.startswith(" ") and last is not None:
                fields[last] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            last = key.strip()
            fields[last] = value.strip()
        out.append(fields)
    if len(out) < 10:
        raise AssertionError(f"only {len(out)} vectors in {DOC}")
    return out


def hex_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace("|", " ").replace(" ", ""))


def encode_fields(text: str) -> bytes:
    """`u16 3 + utf8 "login first"` (and `hex 1011…` for raw bytes) as bytes."""
    out = b""
    for part in re.findall(r'(u16|u32|u64|i64) (-?\d+)|utf8 "((?:[^"\\]|\\.)*)"|hex ([0-9a-f]+)', text):
        width, number, utf8, raw = part
        if raw:
            out += bytes.fromhex(raw)
        elif width:
            fmt = {"u16": "<H", "u32": "<I", "u64": "<Q", "i64": "<q"}[width]
            out += struct.pack(fmt, int(number))
        else:
            out += utf8.encode("utf-8")
    return out
