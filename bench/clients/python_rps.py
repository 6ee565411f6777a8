"""Requests a second through the Python client: CONNECTIONS sessions, each
keeping PIPELINE `player.incr` in flight, for DURATION_S after WARMUP_S.
Usage: python_rps.py HOST:PORT SECRET CONNECTIONS PIPELINE WARMUP_S DURATION_S
Prints `rps <figure>`."""

import asyncio
import sys
import time

from routerd_client import Client, token_for


async def main() -> None:
    address, secret = sys.argv[1], sys.argv[2]
    connections, pipeline = int(sys.argv[3]), int(sys.argv[4])
    warmup_s, duration_s = float(sys.argv[5]), float(sys.argv[6])
    clients = [await Client.connect(f"tcp://{address}", token_for(secret, 100_000 + i)) for i in range(connections)]
    counting = False
    done = 0
    stop = False

    async def worker(client: Client) -> None:
        nonlocal done
        while not stop:
            await client.player_incr(1)
            if counting:
                done += 1

    tasks = [asyncio.create_task(worker(c)) for c in clients for _ in range(pipeline)]
    await asyncio.sleep(warmup_s)
    counting = True
    started = time.monotonic()
    await asyncio.sleep(duration_s)
    counting = False
    elapsed = time.monotonic() - started
    stop = True
    await asyncio.gather(*tasks)
    for client in clients:
        await client.close()
    print(f"rps {done / elapsed:.0f}")


asyncio.run(main())
