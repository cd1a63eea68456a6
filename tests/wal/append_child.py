"""A writer for the kill -9 test: appends forever, printing each key once the store acknowledged it.

Eight lanes append concurrently (so group commits carry several records), each to blocks of its
own, and drop their block before last as they move on (so segments are deleted while it runs).
"""

import asyncio
import random
import sys

from nereus.wal import WalStore

PER_BLOCK = 40


def payload(key: str) -> bytes:
    rng = random.Random(key)
    return rng.randbytes(rng.randrange(100, 20_000))


async def main(directory: str, run: str) -> None:
    store = await WalStore.open(directory, segment_bytes=256 << 10)
    print("READY", flush=True)

    async def lane(number: int) -> None:
        for i in range(10**9):
            block = f"r{run}-l{number}-b{i // PER_BLOCK}"
            if i % PER_BLOCK == 0 and i >= 2 * PER_BLOCK:
                old = f"r{run}-l{number}-b{i // PER_BLOCK - 2}"
                await store.drop(old)
                sys.stdout.write(f"DROPPED {old}\n")
            key = f"{block}-{i}"
            await store.append(block, key, payload(key))
            sys.stdout.write(f"ACK {block} {key}\n")
            sys.stdout.flush()

    await asyncio.gather(*(lane(number) for number in range(8)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
