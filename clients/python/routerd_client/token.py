"""Login tokens (docs/protocol.md, section 2): for tests and tools that
hold the server's secret. A game client only carries a token its login
service minted."""

from __future__ import annotations

import hashlib
import hmac
import time


def mint_token(secret: bytes | str, player_id: int, expiry_unix_s: int) -> str:
    """`v1.<player_id>.<expiry>.<mac>`, valid while now < `expiry_unix_s`."""
    if player_id <= 0 or player_id >= 1 << 64:
        raise ValueError(f"player id {player_id} is not a u64 other than 0")
    if expiry_unix_s < 0 or expiry_unix_s >= 1 << 64:
        raise ValueError(f"expiry {expiry_unix_s} is not a u64")
    key = secret.encode() if isinstance(secret, str) else secret
    signed = f"v1.{player_id}.{expiry_unix_s}"
    mac = hmac.new(key, signed.encode(), hashlib.sha256).hexdigest()
    return f"{signed}.{mac}"


def token_for(secret: bytes | str, player_id: int, ttl_s: int = 3600) -> str:
    """A token for `player_id` valid for `ttl_s` seconds from now."""
    return mint_token(secret, player_id, int(time.time()) + ttl_s)
