"""Which process made a metadata service's topics: a standalone marks its metadata.

``nereus standalone`` records ``STANDALONE`` (its data directory and pid) in the
metadata it serves. A ``nereus broker`` that joins metadata so marked, and finds topics
there, logs one warning: a cluster started over a standalone's ``meta`` directory (or
its Oxia port) serves, and writes to, the standalone's topics. The standalone's own
``--brokers N`` children (whose parent is the marking process) do not warn.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from ...meta import MetadataStore
from ...storage.records import name_from_key, names_range

log = logging.getLogger(__name__)

STANDALONE = "/nereus/cluster/standalone"
#: Topics counted at most (the warning says "at least" past it).
COUNT_LIMIT = 10_000
_INTERNAL = "internal://"


async def mark_standalone(meta: MetadataStore, data_dir: Path) -> None:
    """Record that a standalone on ``data_dir`` serves this metadata (replacing an earlier mark)."""
    value = {"data_dir": str(data_dir.resolve()), "pid": os.getpid(), "since": int(time.time() * 1000)}
    await meta.put(STANDALONE, json.dumps(value).encode())


async def standalone_topics(meta: MetadataStore) -> tuple[dict, int] | None:
    """The standalone's mark and how many topics (streams that are not internal) the metadata holds;
    None when no standalone marked it."""
    record = await meta.get(STANDALONE)
    if record is None:
        return None
    count = 0
    async for key in meta.list(*names_range()):
        if not name_from_key(key).startswith(_INTERNAL):
            count += 1
            if count >= COUNT_LIMIT:
                break
    return json.loads(record.value), count


async def warn_if_joining_a_standalone(meta: MetadataStore, metadata_url: str) -> bool:
    """Log one warning when this broker joins a standalone's metadata that holds topics; True if it did."""
    found = await standalone_topics(meta)
    if found is None:
        return False
    mark, count = found
    if count == 0 or mark.get("pid") == os.getppid():
        return False
    many = "at least " if count >= COUNT_LIMIT else ""
    log.warning("the metadata service %s holds %s%d topics made by `nereus standalone` (data dir %s): this broker "
                "serves and writes them too; give a new cluster its own metadata directory and object store",
                metadata_url, many, count, mark.get("data_dir", "?"))
    return True


__all__ = ["STANDALONE", "mark_standalone", "standalone_topics", "warn_if_joining_a_standalone"]
