"""A writer process for the crash test: appends forever, prints every acknowledgement.

Usage: python -m tests.storage.crash_writer DATA_DIR RUN_ID STREAMS
Each entry is ``payload(stream, seq)``; after each ack one line
``ACK stream seq base count`` is written and flushed.
"""

import asyncio
import hashlib
import sys
from pathlib import Path

from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.storage import StorageOptions, StreamStorage, WalOptions


def payload(stream: int, seq: int) -> bytes:
    head = b"%d:%d:" % (stream, seq)
    body = hashlib.sha256(head).digest() * (1 + seq % 40)
    return head + body


def record_count(seq: int) -> int:
    return 1 + seq % 7


async def main(data_dir: Path, run_id: int, streams: int) -> None:
    engine = open_engine(str(data_dir / "meta"), shards=4)
    meta = engine.client()
    storage = StreamStorage(meta, open_object_store((data_dir / "objects").resolve().as_uri()),
                            options=StorageOptions(wal=WalOptions(flush_interval=0.003)))
    handles = [await storage.open_stream(f"stream-{i}", create=True) for i in range(streams)]
    print("READY", flush=True)

    async def appender(stream: int, lane: int) -> None:
        seq = run_id * 10_000_000 + lane * 1_000_000
        while True:
            result = await handles[stream].append(payload(stream, seq), record_count(seq))
            sys.stdout.write(f"ACK {stream} {seq} {result.base_offset} {record_count(seq)}\n")
            sys.stdout.flush()
            seq += 1

    await asyncio.gather(*(appender(s, lane) for s in range(streams) for lane in range(3)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
