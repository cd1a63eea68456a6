"""Cluster-wide workers: one broker at a time runs each, under a lease in metadata.

The lease is an ephemeral record ``/nereus/cluster/leases/{worker}`` put only if
absent. Its holder runs the worker; every other broker checks the record every
``poll_seconds`` and takes the lease once it is gone (its holder stopped or its
session expired). The holder checks too: when its metadata session's lease ran out
on its side (which happens before the server expires it) or its record is gone or
replaced, it stops the worker at once, so two brokers never keep running the same
worker for longer than one poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Awaitable, Callable

from ...meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from ...meta.errors import MetadataError

log = logging.getLogger(__name__)

LEASES = "/nereus/cluster/leases/"


async def run_under_lease(meta: MetadataStore, worker: str, holder: str, run: Callable[[], Awaitable[None]], *,
                          poll_seconds: float = 2.0, status: dict | None = None) -> None:
    """Until cancelled: run ``run()`` whenever this broker holds ``worker``'s lease.

    ``status`` (optional) gets ``{worker: holder-or-None}`` kept current, for admin and tests.
    """
    key = LEASES + worker
    value = json.dumps({"holder": holder}).encode()
    while True:
        version = None
        try:
            result = await meta.put(key, value, expected_version_id=EXPECT_ABSENT, ephemeral=True)
            version = result.version.version_id
        except UnexpectedVersion:
            pass
        except MetadataError as exc:
            log.warning("lease %s: %s", worker, exc)
        if version is None:
            if status is not None:
                status[worker] = None
            await asyncio.sleep(poll_seconds)
            continue
        log.info("lease %s taken: this broker runs it", worker)
        if status is not None:
            status[worker] = holder
        task = asyncio.ensure_future(run())
        try:
            await _hold(meta, key, version, task, poll_seconds)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            if status is not None:
                status[worker] = None
            with contextlib.suppress(MetadataError, asyncio.CancelledError):
                await meta.delete(key, expected_version_id=version)
        log.warning("lease %s lost or its worker ended; competing for it again", worker)
        await asyncio.sleep(poll_seconds)  # a worker that ends at once must not spin


async def _hold(meta: MetadataStore, key: str, version: int, task: asyncio.Future, poll_seconds: float) -> None:
    """Return when ``task`` ends or the lease record is no longer ours."""
    while not task.done():
        await asyncio.wait([task], timeout=poll_seconds)
        if task.done():
            if not task.cancelled() and task.exception() is not None:
                log.error("a leased worker failed", exc_info=task.exception())
            return
        if not getattr(meta, "sessions_healthy", True):
            return  # our session's lease ran out: the record may be gone, another broker may take it
        try:
            rec = await meta.get(key, include_value=False)
        except MetadataError:
            continue  # unknown: keep running until the metadata plane answers
        if rec is None or rec.version.version_id != version:
            return


__all__ = ["LEASES", "run_under_lease"]
