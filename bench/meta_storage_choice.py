"""Pick the storage library for the embedded metadata shards by measuring.

Compares SQLite (stdlib, WAL, synchronous=FULL) with LMDB (``lmdb`` package,
sync on commit) on the workload a shard sees:

* batched conditional inserts ("must not exist"): per batch one transaction,
  one existence check per key, insert the new ones, commit + fsync;
* ceiling lookups ("lowest key >= k") on random probes.

LMDB runs twice: copying dirty pages with pwrite (default) and with ``writemap``.

Usage: .venv/bin/python bench/meta_storage_choice.py [--keys 1000000] [--batch 1000]
Prints one ``key=value`` line per library.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import tempfile
import time

import psutil


def make_key(i: int) -> bytes:
    # Shape of a real metadata key after encoding: a few segments, hashed order.
    h = (i * 2654435761) % (1 << 32)
    return b"\x01topics\x00\x01tenant-%d\x00\x00topic-%010d" % (h % 1000, h)


VALUE = b"v" * 100


def bench_sqlite(path: str, keys: int, batch: int, probes: list[bytes]) -> dict[str, float]:
    db = sqlite3.connect(os.path.join(path, "s.db"), isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("PRAGMA cache_size=-16000")
    db.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB, vid INTEGER) WITHOUT ROWID")
    t0 = time.perf_counter()
    vid = 0
    for start in range(0, keys, batch):
        ks = [make_key(i) for i in range(start, min(keys, start + batch))]
        db.execute("BEGIN")
        found: set[bytes] = set()
        for j in range(0, len(ks), 500):
            chunk = ks[j : j + 500]
            q = "SELECT k FROM kv WHERE k IN (%s)" % ",".join("?" * len(chunk))
            found.update(r[0] for r in db.execute(q, chunk))
        rows = []
        for k in ks:
            if k not in found:
                vid += 1
                rows.append((k, VALUE, vid))
        db.executemany("INSERT INTO kv VALUES (?,?,?)", rows)
        db.execute("COMMIT")
    insert_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    q = "SELECT k, v, vid FROM kv WHERE k >= ? ORDER BY k LIMIT 1"
    for p in probes:
        db.execute(q, (p,)).fetchone()
    ceil_s = time.perf_counter() - t0
    db.close()
    return {"insert_per_s": keys / insert_s, "ceiling_per_s": len(probes) / ceil_s}


def bench_lmdb(path: str, keys: int, batch: int, probes: list[bytes], writemap: bool = False) -> dict[str, float]:
    import lmdb

    env = lmdb.open(path, map_size=8 << 30, sync=True, metasync=True, writemap=writemap)
    t0 = time.perf_counter()
    vid = 0
    for start in range(0, keys, batch):
        with env.begin(write=True) as txn:  # commit() on exit; sync=True fsyncs it
            for i in range(start, min(keys, start + batch)):
                vid += 1
                txn.put(make_key(i), VALUE + vid.to_bytes(8, "big"), overwrite=False)
    insert_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with env.begin() as txn:
        cur = txn.cursor()
        for p in probes:
            if cur.set_range(p):
                cur.item()
    ceil_s = time.perf_counter() - t0
    env.close()
    return {"insert_per_s": keys / insert_s, "ceiling_per_s": len(probes) / ceil_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--probes", type=int, default=100_000)
    ap.add_argument("--dir", default=None, help="parent directory for the databases")
    args = ap.parse_args()
    rnd = random.Random(1)
    probes = [make_key(rnd.randrange(args.keys * 2)) for _ in range(args.probes)]
    variants = (
        ("sqlite", bench_sqlite),
        ("lmdb", bench_lmdb),
        ("lmdb-writemap", lambda *a: bench_lmdb(*a, writemap=True)),
    )
    for name, fn in variants:
        d = tempfile.mkdtemp(prefix=f"meta-{name}-", dir=args.dir)
        try:
            cpu0 = time.process_time()
            res = fn(d, args.keys, args.batch, probes)
            cpu = time.process_time() - cpu0
            # Allocated blocks, not apparent size (writemap files are sparse).
            size = sum(os.stat(os.path.join(d, f)).st_blocks * 512 for f in os.listdir(d))
            rss = psutil.Process().memory_info().rss
            print(
                f"lib={name} keys={args.keys} batch={args.batch} "
                f"insert_per_s={res['insert_per_s']:.0f} ceiling_per_s={res['ceiling_per_s']:.0f} "
                f"cpu_s={cpu:.1f} disk_mb={size / 1e6:.0f} rss_mb={rss / 1e6:.0f}",
                flush=True,
            )
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
