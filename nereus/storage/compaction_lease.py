"""The stream's compaction lease: one compactor per stream at a time.

A range compaction (``compaction.py``, from planning to the end of its plans) and a
key-view build (``key_view.py``) both hold it. The lease is an ephemeral record
``.../compaction`` of the compactor's metadata session, so it vanishes when the
compactor dies (after its session timeout); work that runs apart from the holder
(a job's task) checks it again just before its switch (``check_lease``).
"""

from __future__ import annotations

import time

from ..meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from . import records
from .errors import CompactionConflict


async def check_lease(meta: MetadataStore, stream_id: int, owner: str) -> None:
    """Raise CompactionConflict unless ``owner`` holds the stream's compaction lease."""
    rec = await meta.get(records.compaction_lease_key(stream_id), partition_key=records.stream_partition(stream_id))
    if rec is None or records.decode(rec.value).get("owner") != owner:
        raise CompactionConflict(f"stream {stream_id}: the compaction lease of {owner} is lost")


class lease:
    """The stream's compaction lease: an ephemeral record of the compactor's metadata
    session, so it vanishes when the compactor dies (after its session timeout)."""

    def __init__(self, meta: MetadataStore, stream_id: int, owner: str):
        self.meta, self.stream_id, self.owner = meta, stream_id, owner
        self.key = records.compaction_lease_key(stream_id)
        self.partition = records.stream_partition(stream_id)
        self.version: int | None = None

    async def __aenter__(self) -> None:
        try:
            result = await self.meta.put(self.key, records.encode({"owner": self.owner, "since": time.time()}),
                                         expected_version_id=EXPECT_ABSENT, ephemeral=True,
                                         partition_key=self.partition)
        except UnexpectedVersion:
            rec = await self.meta.get(self.key, partition_key=self.partition)
            holder = records.decode(rec.value).get("owner") if rec is not None else "?"
            raise CompactionConflict(f"stream {self.stream_id} is being compacted by {holder}") from None
        self.version = result.version.version_id

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.meta.delete(self.key, expected_version_id=self.version, partition_key=self.partition)
        except UnexpectedVersion:
            pass


__all__ = ["check_lease", "lease"]
