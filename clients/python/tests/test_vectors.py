"""Every test vector of docs/protocol.md, through the client's encoder and
decoder, and token minting."""

from __future__ import annotations

import unittest

from routerd_client import protocol as p
from routerd_client.token import mint_token

from vectors import encode_fields, hex_bytes, vectors

KINDS = {"REQUEST": 1, "RESPONSE": 2, "PUSH": 3, "ERROR": 4}


class Vectors(unittest.TestCase):
    def test_every_frame_vector_encodes_and_decodes(self) -> None:
        checked = 0
        for vector in vectors():
            if "frame" not in vector:
                continue
            with self.subTest(vector["name"]):
                kind = KINDS[vector["kind"]]
                route = int(vector["route"].split()[0])
                seq = int(vector["seq"])
                body = hex_bytes(vector["body"])
                frame = hex_bytes(vector["frame"])
                self.assertEqual(encode_fields(vector["fields"]), body)
                if vector.get("version") == "2":
                    # A version-2 REQUEST: the key before the route's body
                    # (section 12).
                    key = int(vector["request_key"])
                    self.assertEqual(p.encode_keyed_request(route, seq, key, body), frame)
                    self.assertEqual(int.from_bytes(frame[16:24], "little"), key)
                    self.assertEqual(frame[24:], body)
                else:
                    self.assertEqual(p.encode_frame(kind, route, seq, body), frame)
                if kind == p.Kind.REQUEST:
                    # A server-to-client decoder refuses REQUEST frames:
                    # check the header by hand instead.
                    self.assertEqual(frame[-len(body) :] if body else b"", body)
                else:
                    decoder = p.FrameDecoder()
                    # Fed a byte at a time: a frame cut anywhere decodes once whole.
                    for i in range(len(frame) - 1):
                        decoder.feed(frame[i : i + 1])
                        self.assertIsNone(decoder.next_frame())
                    decoder.feed(frame[-1:])
                    self.assertEqual(decoder.frames(), [p.Frame(kind, route, seq, body)])
                    self.assertEqual(decoder.buffered(), 0)
                self._check_typed(vector, route, body)
                checked += 1
        self.assertGreaterEqual(checked, 10)

    def _check_typed(self, vector: dict[str, str], route: int, body: bytes) -> None:
        """The typed body codecs agree with the vector's fields."""
        if vector["kind"] == "ERROR":
            code, reason = p.decode_error(body)
            self.assertEqual(code, int(vector["code"].split()[0]))
            self.assertEqual(reason, vector["reason"])
            self.assertEqual(p.encode_error(code, reason), body)
        elif route == p.Route.ROOM_MESSAGE:
            message = p.decode_room_message(body)
            self.assertEqual(p.encode_room_message(message), body)
        elif route == p.Route.SYS_REDIRECT:
            redirect = p.decode_redirect(body)
            self.assertEqual(redirect.grace_ms, 5000)
            self.assertEqual(p.encode_redirect(redirect), body)
        elif route == p.Route.ROOM_SAY:
            room_id = int.from_bytes(body[:8], "little")
            self.assertEqual(p.encode_say(room_id, body[8:].decode()), body)
        elif route in (p.Route.PLAYER_INCR,) and vector["kind"] == "REQUEST":
            self.assertEqual(p.encode_i64(int(vector["fields"].split()[1])), body)
        elif route in (p.Route.PLAYER_INCR, p.Route.PLAYER_GET):
            self.assertEqual(p.encode_i64(p.decode_i64(body)), body)
        elif route == p.Route.SYS_SESSION:
            session = p.decode_session(body)
            self.assertEqual(session.window_ms, 30000)
            self.assertEqual(p.encode_session(session), body)
        elif route == p.Route.AUTH_RESUME and vector["kind"] == "REQUEST":
            self.assertEqual(p.encode_resume(body[:16], 5), body)
        elif route in (p.Route.AUTH_LOGIN, p.Route.AUTH_RESUME) and vector["kind"] == "RESPONSE":
            self.assertEqual(p.decode_u64(body), 42)

    def test_token_vector(self) -> None:
        (vector,) = [v for v in vectors() if "token" in v]
        token = mint_token(vector["secret"], int(vector["player_id"]), int(vector["expiry"]))
        self.assertEqual(token, vector["token"])
        self.assertTrue(token.startswith(vector["signed"] + "."))
        with self.assertRaises(ValueError):
            mint_token(vector["secret"], 0, 1)


class Decoder(unittest.TestCase):
    def test_three_frames_in_one_read_and_a_cut_fourth(self) -> None:
        one = p.encode_frame(p.Kind.RESPONSE, 11, 2, p.encode_i64(42))
        decoder = p.FrameDecoder()
        decoder.feed(one * 3 + one[:5])
        self.assertEqual(len(decoder.frames()), 3)
        decoder.feed(one[5:])
        self.assertEqual(len(decoder.frames()), 1)

    def test_unknown_kind_version_magic_and_long_body_are_violations(self) -> None:
        good = bytearray(p.encode_frame(p.Kind.PUSH, 100, 0, b"x" * 16))
        for offset, value, why in [(3, 5, "kind 5"), (3, 1, "kind 1"), (2, 2, "version"), (0, 0x41, "magic")]:
            bad = bytearray(good)
            bad[offset] = value
            decoder = p.FrameDecoder()
            decoder.feed(bytes(bad))
            with self.subTest(why), self.assertRaises(p.FrameError):
                decoder.next_frame()
        decoder = p.FrameDecoder(max_body=15)
        decoder.feed(bytes(good[:16]))
        with self.assertRaises(p.FrameError):
            decoder.next_frame()

    def test_say_text_bound(self) -> None:
        p.encode_say(1, "x" * p.SAY_TEXT_MAX)
        with self.assertRaises(ValueError):
            p.encode_say(1, "x" * (p.SAY_TEXT_MAX + 1))


if __name__ == "__main__":
    unittest.main()
