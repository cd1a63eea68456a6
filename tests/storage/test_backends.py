"""StreamStorage end to end on every object-store backend (S3 through a real server process)."""

import os
import uuid

import pytest

from nereus.objstore import open_object_store
from nereus.storage import StreamStorage
from tests.objstore.conftest import moto_endpoint, open_s3  # noqa: F401  (session fixture)

from .conftest import FAST


@pytest.fixture(params=["memory", "file", "s3"])
def backend(request, tmp_path):
    if request.param == "s3":
        return lambda: open_s3(request.getfixturevalue("moto_endpoint"), prefix=f"t-{uuid.uuid4().hex[:8]}")
    url = "memory://" if request.param == "memory" else tmp_path.as_uri()
    shared = open_object_store(url)
    return lambda: shared


async def test_append_restart_and_catch_up_on_each_backend(meta, backend):
    objects = backend()
    writer = StreamStorage(meta, objects, options=FAST)
    payloads = [os.urandom(300 + i) for i in range(20)]
    streams = [await writer.open_stream(f"b{i}", create=True) for i in range(3)]
    for i, p in enumerate(payloads):
        assert (await streams[i % 3].append(p, 1)).base_offset == i // 3
    await writer.close()
    reader = StreamStorage(meta, objects, options=FAST)
    for i in range(3):
        handle = await reader.open_stream(f"b{i}")
        await handle.refresh()
        got = (await handle.fetch(0, max_bytes=1 << 20)).entries
        assert [bytes(e.data) for e in got] == payloads[i::3]
    await reader.close()
