"""Writes to the embedded engine forever, printing each acknowledged write.

Run as ``python crash_writer.py DATA_DIR RUN``; the durability test SIGKILLs it.
Each line ``ack KEY VERSION_ID`` is printed only after the put returned.
"""

from __future__ import annotations

import asyncio
import sys

from nereus.meta import EXPECT_ABSENT, open_engine


async def main(data_dir: str, run: str) -> None:
    engine = open_engine(data_dir, shards=3)
    client = engine.client()
    print("ready", flush=True)

    async def writer(task: int) -> None:
        i = 0
        while True:
            key = f"/crash/{run}/{task}/{i:06d}"
            # Half of the writers share one partition (one shard, ordered version ids).
            pk = "tail" if task % 2 == 0 else None
            r = await client.put(key, key.encode(), expected_version_id=EXPECT_ABSENT, partition_key=pk)
            sys.stdout.write(f"ack {key} {pk or '-'} {r.version.version_id}\n")
            sys.stdout.flush()
            i += 1

    await asyncio.gather(*(writer(t) for t in range(16)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
