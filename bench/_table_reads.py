"""The same topic read as an Iceberg (SBT, zero-copy), Delta and Hudi (delivered) table with each
format's pyarrow-based reader, against plain pyarrow reading the SBT's Parquet files.

Used by ``bench/compaction.py --tables``: the topic is compacted first (the SBT's files),
then delivered into a Delta and a Hudi table (``nereus lakehouse deliver``'s code), then each
table is read whole into Arrow, best of ``repeats``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path


async def _deliver_and_sync(metadata: str, objects: str, topic: str, workdir: Path, catalog) -> dict:
    from nereus.lakehouse import sbt
    from nereus.lakehouse.deliver import Delivery
    from nereus.lakehouse.delta_target import DeltaTarget
    from nereus.lakehouse.hudi_target import HudiTarget
    from nereus.meta import connect
    from nereus.objstore import open_object_store

    meta = connect(metadata)
    store = open_object_store(objects)
    try:
        await sbt.sync(meta, catalog, objects, topic)
        seconds = {}
        for name, target in (("delta", DeltaTarget(str(workdir / "delta"))), ("hudi", HudiTarget(str(workdir / "hudi")))):
            job = Delivery(meta, store, topic, target, batch_records=200_000)
            started = time.perf_counter()
            try:
                await job.deliver_once()
            finally:
                job.close()
            seconds[name] = time.perf_counter() - started
        return seconds
    finally:
        await store.close()
        await meta.close()


def _best(read, repeats: int) -> tuple[float, int]:
    best, rows = float("inf"), 0
    for _ in range(repeats):
        started = time.perf_counter()
        rows = read().num_rows
        best = min(best, time.perf_counter() - started)
    return best, rows


def table_reads(metadata: str, objects: str, topic: str, workdir: Path, repeats: int = 3) -> dict:
    import deltalake
    import hudi
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nereus.lakehouse import sbt, table_format

    workdir.mkdir(parents=True, exist_ok=True)
    catalog = sbt.open_catalog(f"sqlite:///{workdir / 'catalog.db'}", (workdir / "warehouse").as_uri())
    delivered = asyncio.run(_deliver_and_sync(metadata, objects, topic, workdir, catalog))
    table = catalog.load_table(sbt.identifier(topic))
    paths = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
    columns = list(table_format.RECORD_COLUMNS)

    readers = {
        "pyarrow": lambda: pa.concat_tables([pq.read_table(p, columns=columns) for p in paths]),
        "iceberg": lambda: catalog.load_table(sbt.identifier(topic)).scan().to_arrow(),
        "delta": lambda: deltalake.DeltaTable(str(workdir / "delta")).to_pyarrow_table(),
        "hudi": lambda: pa.Table.from_batches(hudi.HudiTableBuilder.from_base_uri(str(workdir / "hudi")).build().read()),
    }
    out = {f"deliver_{name}_s": round(s, 2) for name, s in delivered.items()}
    timings = {}
    for name, read in readers.items():
        timings[name], rows = _best(read, repeats)
        out[f"{name}_rows"] = rows
        out[f"{name}_mrows_s"] = round(rows / timings[name] / 1e6, 2)
    for name in ("iceberg", "delta", "hudi"):
        out[f"{name}_vs_pyarrow"] = round(timings["pyarrow"] / timings[name], 2)
    return out
