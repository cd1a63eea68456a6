"""Client processes for the fault tests (run as ``python -m tests.oxia.workers MODE ...``).

``writer ADDRESS NAMESPACE``: must-not-exist puts from 16 tasks until killed; prints
``ack KEY VERSION_ID`` after each acknowledged write and ``err`` after each failure.

``history ADDRESS NAMESPACE WORKER SECONDS SEED``: random reads, writes and CAS on a
few registers; prints one JSON operation per line (``ret`` null: outcome unknown).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time

from nereus.meta import EXPECT_ABSENT, MetadataUnavailable, UnexpectedVersion
from nereus.meta.oxia.client import OxiaMetadataStore

KEYS = ["/lin/a", "/lin/b", "/lin/c"]


async def writer(address: str, namespace: str) -> None:
    client = OxiaMetadataStore(address, namespace, retry_timeout=60)
    out = sys.stdout
    out.write("ready\n")
    out.flush()

    async def task(t: int) -> None:
        i = 0
        while True:
            key = f"/crash/{t}/{i:07d}"
            pk = "tail" if t % 2 == 0 else None
            try:
                r = await client.put(key, key.encode(), expected_version_id=EXPECT_ABSENT, partition_key=pk)
                out.write(f"ack {key} {pk or '-'} {r.version.version_id}\n")
            except MetadataUnavailable:
                out.write("err\n")
                await asyncio.sleep(0.05)
            except UnexpectedVersion:  # an earlier attempt of this key did land
                out.write("dup\n")
            out.flush()
            i += 1

    await asyncio.gather(*(task(t) for t in range(16)))


async def history(address: str, namespace: str, worker: int, seconds: float, seed: int) -> None:
    rnd = random.Random(seed)
    client = OxiaMetadataStore(address, namespace, retry_timeout=20)
    seen: dict[str, tuple[str | None, int]] = {}  # last read: value, version id (-1: absent)
    end = time.monotonic() + seconds
    n = 0
    print("ready", flush=True)
    while time.monotonic() < end:
        key = rnd.choice(KEYS)
        kind = rnd.choice(["read", "read", "write", "cas"])
        n += 1
        value = f"{worker}-{n}"
        rec: dict = {"key": key, "kind": kind, "call": time.monotonic()}
        try:
            if kind == "read":
                r = await client.get(key)
                rec["result"] = None if r is None else r.value.decode()
                seen[key] = (rec["result"], -1 if r is None else r.version.version_id)
            elif kind == "write":
                rec["arg"] = value
                await client.put(key, value.encode())
            else:
                expected, vid = seen.get(key, (None, -1))
                rec["arg"] = [expected, value]
                try:
                    await client.put(key, value.encode(), expected_version_id=vid)
                    rec["result"] = True
                except UnexpectedVersion:
                    rec["result"] = False
            rec["ret"] = time.monotonic()
        except MetadataUnavailable:
            if kind == "read":
                continue  # a failed read has no effect: leave it out
            rec["ret"] = None
        print(json.dumps(rec), flush=True)
    await client.close()


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "writer":
        asyncio.run(writer(*args))
    else:
        asyncio.run(history(args[0], args[1], int(args[2]), float(args[3]), int(args[4])))
