"""A range scan over several shards reports the error of the shard that failed."""

import asyncio

import pytest

from nereus.meta import MetadataUnavailable

from .conftest import OxiaBackend


async def test_a_failing_shard_scan_raises_its_own_error_not_a_closing_error():
    client = OxiaBackend().client()
    try:
        await client.put("/scan/a", b"1")
        calls = []

        async def shard_scan(shard, lo, hi, with_values, index=None):
            calls.append(shard.id)
            if len(calls) == 1:
                raise MetadataUnavailable("shard unreachable")
            await asyncio.sleep(0.05)  # still running when the first one fails
            return
            yield  # an async generator

        client._shard_scan = shard_scan
        with pytest.raises(MetadataUnavailable, match="shard unreachable"):
            async for _ in client.range_scan("/scan/", "/scan/~"):
                pass
        assert len(calls) > 1
    finally:
        await client.close()
