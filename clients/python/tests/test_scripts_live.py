"""call_json against a real node (ROUTERD_BIN) running the example scripts
(examples/scripts/): a JSON value in, the handler's answer decoded, the same
object read back by its key field, a script's refusal as BadRequest, and a
string answer as its text."""

from __future__ import annotations

import json
import unittest
from pathlib import Path

from routerd_client import BadRequest, Client, token_for

import nodes
from case import AsyncTestCase
from nodes import SECRET
from test_live import need_binary

#: The repository's example scripts (clients/python/tests -> the root).
SCRIPTS = Path(__file__).resolve().parents[3] / "examples" / "scripts"

#: examples/scripts/counter.luau's routes.
COUNTER_ADD = 2001
COUNTER_GET = 2002
COUNTER_RAW = 2003


class Scripts(AsyncTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        need_binary()
        cls.cluster = nodes.Cluster()
        cls.node = cls.cluster.start(1, extra=f"[scripts]\ndir = {json.dumps(str(SCRIPTS))}\n")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.cluster.close()

    async def test_call_json_reaches_a_scripted_type_and_decodes_its_answer(self) -> None:
        async with await Client.connect(self.node.url(), token_for(SECRET, 701)) as client:
            self.assertEqual(await client.call_json(COUNTER_ADD, {"by": 5}), {"n": 5})
            self.assertEqual(await client.callJson(COUNTER_ADD, {"by": 2}), {"n": 7})
            self.assertEqual(await client.call_json(COUNTER_GET, {"id": 701}), {"n": 7})
            with self.assertRaises(BadRequest) as refused:
                await client.call_json(COUNTER_ADD, {"by": 2000000})
            self.assertEqual(refused.exception.reason, "counter would pass 1000000")
            self.assertEqual(await client.call_json(COUNTER_GET, {"id": 701}), {"n": 7}, "the refusal changed nothing")
            # A raw route gets the JSON text as bytes; its answer is a string.
            self.assertEqual(await client.call_json(COUNTER_RAW, [1, 2]), "got 5 bytes")
