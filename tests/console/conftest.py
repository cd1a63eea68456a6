"""A real ``nereus standalone`` process for the console tests, and its JSON."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.standalone_process import Standalone


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    standalone = Standalone(tmp_path_factory.mktemp("console") / "data")
    standalone.start()
    yield standalone
    standalone.stop()


def get_json(node: Standalone, path: str) -> tuple[int, object]:
    """(status, JSON body) of a GET on the node's HTTP port; error statuses are returned, not raised."""
    try:
        with urllib.request.urlopen(node.http + path, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def compact_now(node, topic: str) -> None:
    """What the compaction worker does for one topic, without Spark: compact its stream, sync its table."""
    from nereus.lakehouse import compaction as jobs
    from nereus.lakehouse import sbt
    from nereus.meta import connect
    from nereus.lakehouse.session import default_catalog_uri
    from nereus.storage import compaction, view

    metadata_url = f"oxia://127.0.0.1:{node.ports['oxia']}"
    objects_url = (node.data_dir / "objects").as_uri()
    meta = connect(metadata_url)
    try:
        stream_id = await view.stream_id(meta, topic)
        plans = await compaction.plan(meta, stream_id, min_bytes=1)
        assert plans
        for plan in plans:
            result = await jobs.run_task_async(metadata_url, objects_url, jobs.CompactionTask(topic, -1, plan))
            assert "object" in result
        # The catalog where the broker's compaction worker keeps it (`nereus compact` without --catalog).
        catalog = sbt.open_catalog(default_catalog_uri(objects_url), objects_url + "/iceberg")
        await sbt.sync(meta, catalog, objects_url, topic)
    finally:
        await meta.close()
