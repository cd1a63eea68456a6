"""A standalone with a short compaction schedule, shared by the schedule's test modules, and waits on
what its worker did (the topics' built-in Iceberg tables, its processes).

The node runs in a session of its own so a test can send SIGINT to its whole process
group, as a terminal does on Ctrl-C.
"""

from __future__ import annotations

import functools
import subprocess
import time

import psutil
import pytest

from nereus.lakehouse import sbt
from tests import standalone_process
from tests.standalone_process import Standalone

#: Bounds a hang only: a loaded 2-core machine needs tens of seconds to start Spark.
DEADLINE = 200.0


def run_scheduled_node(tmp_path_factory):
    """A started standalone compacting every 2 s, stopped after the module (``yield from`` it)."""
    node = Standalone(tmp_path_factory.mktemp("schedule") / "data",
                      ["--compaction-interval", "2", "--compaction-max-age", "2", "--compaction-min-mb", "100",
                       "--log-level", "INFO"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(standalone_process.subprocess, "Popen",
                      functools.partial(subprocess.Popen, start_new_session=True))
        node.start()
    yield node
    node.stop()


def load_table(node: Standalone, topic: str):
    """The topic's SBT table, or None while the worker has not created it."""
    catalog_db = node.data_dir / "iceberg" / "catalog.db"
    if not catalog_db.exists():
        return None
    objects = (node.data_dir / "objects").resolve().as_uri()
    try:
        return sbt.open_catalog(f"sqlite:///{catalog_db}", objects + "/iceberg").load_table(sbt.identifier(topic))
    except Exception:  # noqa: BLE001 - no table (or no catalog schema) yet
        return None


def table_values(node: Standalone, topic: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every row of the topic's SBT table (none yet: [])."""
    table = load_table(node, topic)
    if table is None:
        return []
    rows = table.scan().to_arrow()
    return sorted(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(),
                      rows.column("value").to_pylist()))


def wait_for(condition, what: str, node: Standalone, tick=None):
    """Poll ``condition`` until it returns something true; ``tick`` runs between polls."""
    deadline = time.monotonic() + DEADLINE
    while True:
        result = condition()
        if result:
            return result
        assert node.alive(), f"the node died:\n{node.log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE:.0f} s\n{node.log.read_text()[-4000:]}"
        if tick is not None:
            tick()  # steady traffic: a stream's newest slices reach the index with its next write
        time.sleep(0.5)


def covers(node: Standalone, topic: str, expected: set[bytes]) -> bool:
    """The table holds every expected value exactly once, at dense offsets per partition."""
    rows = table_values(node, topic)
    values = [v for _, _, v in rows]
    if not expected <= set(values):
        return False
    assert all(values.count(v) == 1 for v in expected), rows
    for partition in {p for p, _, _ in rows}:
        offsets = [o for p, o, _ in rows if p == partition]
        assert offsets == list(range(len(offsets))), (partition, offsets)
    return True


def workers(node: Standalone) -> list[psutil.Process]:
    """The node's compaction worker processes (children running ``nereus.cli ... compact``)."""
    try:
        children = psutil.Process(node.proc.pid).children()
    except psutil.NoSuchProcess:
        return []
    out = []
    for child in children:
        try:
            if "compact" in child.cmdline():
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out
