"""The suites' test case: `unittest.IsolatedAsyncioTestCase` without
asyncio's debug mode."""

from __future__ import annotations

import asyncio
import unittest


class AsyncTestCase(unittest.IsolatedAsyncioTestCase):
    """IsolatedAsyncioTestCase runs every test in asyncio's debug mode,
    whatever PYTHONASYNCIODEBUG says: it records a stack trace at every
    callback, future and task, about three times the CPU of the code under
    test. On a loaded machine (CI's two cores, after a long build) that
    starves the client's own timers and the test's proxy, so the suites turn
    it off. A subclass's `asyncSetUp` calls this one first."""

    async def asyncSetUp(self) -> None:
        asyncio.get_running_loop().set_debug(False)
