"""Read-modify-write of records with optimistic concurrency: the project's only CAS loop.

``update`` applies a pure function to one record. ``retry`` runs a whole read-decide-write
step again whenever its conditional write loses (``UnexpectedVersion``) or it asks to read
again (``ReadAgain``), for steps that do more than one pure change (allocate an id,
complete what they found first).
"""

from __future__ import annotations

import asyncio
import random
from typing import Awaitable, Callable, TypeVar

from .api import EXPECT_ABSENT, MetadataStore, Record
from .errors import UnexpectedVersion

DEFAULT_MAX_ATTEMPTS = 100
T = TypeVar("T")


class ReadAgain(Exception):
    """Raised by a ``retry`` step to run again from a fresh read (it moved the record on itself)."""


async def retry(step: Callable[[], Awaitable[T]], *, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                exhausted: Callable[[], Exception] | None = None) -> T:
    """``await step()`` again until it neither loses a conditional write nor asks to read again.

    After ``max_attempts`` runs raises ``exhausted()`` (default: ``UnexpectedVersion``).
    Under contention the runs back off a little, randomised.
    """
    for attempt in range(max_attempts):
        try:
            return await step()
        except (UnexpectedVersion, ReadAgain):
            if attempt >= 3:
                await asyncio.sleep(random.uniform(0, 0.001 * min(attempt, 20)))
    raise exhausted() if exhausted is not None else UnexpectedVersion(f"lost {max_attempts} races in a row")


async def update(
    store: MetadataStore,
    key: str,
    fn: Callable[[bytes | None], bytes | None],
    *,
    partition_key: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    likely_absent: bool = False,
) -> Record | None:
    """Apply the pure function ``fn`` to the record at ``key`` until the write wins.

    ``fn(old_value_or_None)`` returns the new value, or None for "no change" (then
    the current record is returned without writing; None if the key is absent).
    The write is conditional on the version read (``EXPECT_ABSENT`` when absent)
    and the whole cycle is retried on ``UnexpectedVersion``, so ``fn`` may run
    several times. Raises ``UnexpectedVersion`` after ``max_attempts`` losses.
    Returns the resulting record.

    ``likely_absent``: the first attempt writes ``fn(None)`` as a create without
    reading first (one round trip instead of two for a record that is usually new);
    if the record exists, that write fails and the cycle goes on as above.
    """
    first = [likely_absent]

    async def step() -> Record | None:
        if first[0]:
            first[0] = False
            new = fn(None)
            if new is not None:
                try:
                    res = await store.put(key, new, expected_version_id=EXPECT_ABSENT, partition_key=partition_key)
                except UnexpectedVersion:
                    pass
                else:
                    return Record(res.key, new, res.version)
        current = await store.get(key, partition_key=partition_key)
        old = None if current is None else current.value
        new = fn(old)
        if new is None:
            return current
        expected = EXPECT_ABSENT if current is None else current.version.version_id
        res = await store.put(key, new, expected_version_id=expected, partition_key=partition_key)
        return Record(res.key, new, res.version)

    return await retry(step, max_attempts=max_attempts,
                       exhausted=lambda: UnexpectedVersion(f"update of {key!r} lost {max_attempts} races in a row"))
