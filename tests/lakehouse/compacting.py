"""What the compaction worker does for one topic, without Spark (a Spark job costs seconds to start)."""

from __future__ import annotations

from nereus.lakehouse import sbt
from nereus.lakehouse.session import default_catalog_uri


def objects_url(node) -> str:
    return (node.data_dir / "objects").as_uri()


def metadata_url(node) -> str:
    return f"oxia://127.0.0.1:{node.ports['oxia']}"


def worker_catalog(node):
    """The catalog the node's compaction worker syncs into (SQLite beside the object store)."""
    url = objects_url(node)
    return sbt.open_catalog(default_catalog_uri(url), url + "/iceberg")


async def compact_and_sync(node, topic: str, *, sync: bool = True) -> int:
    """Compact each partition of ``topic`` as the worker does, then sync its table; the ranges compacted."""
    from nereus.lakehouse import compaction as jobs
    from nereus.lakehouse import rows
    from nereus.lakehouse.schema_columns import latest_value_columns
    from nereus.meta import connect
    from nereus.storage import compaction, view

    meta = connect(metadata_url(node))
    try:
        planned = 0
        values = await latest_value_columns(meta, topic)  # an AVRO/JSON topic's fields become columns
        for base, partition, stream in await rows.partitions(meta, topic):
            plans = await compaction.plan(meta, await view.stream_id(meta, stream), min_bytes=1)
            planned += len(plans)
            for plan in plans:
                task = jobs.CompactionTask(base, partition, plan, values=values)
                result = await jobs.run_task_async(metadata_url(node), objects_url(node), task)
                assert "object" in result
        if sync:
            await sbt.sync(meta, worker_catalog(node), objects_url(node), topic)
        return planned
    finally:
        await meta.close()
