"""FaultInjectingObjectStore."""

from __future__ import annotations

import time

import pytest

from nereus.objstore import ObjectExists, ObjectNotFound, ObjectStoreError, open_object_store
from nereus.objstore.faults import FaultInjectingObjectStore, InjectedFault


def wrapped() -> FaultInjectingObjectStore:
    return FaultInjectingObjectStore(open_object_store("memory://"))


async def test_fail_nth_put() -> None:
    st = wrapped()
    st.fail_put(2)
    await st.put_if_absent("a", b"1")
    with pytest.raises(InjectedFault):
        await st.put_if_absent("b", b"2")
    await st.put_if_absent("c", b"3")
    with pytest.raises(ObjectNotFound):
        await st.inner.head("b")  # failed before reaching the store
    assert st.calls["put_if_absent"] == 3


async def test_fail_matching_puts_with_chosen_exception() -> None:
    st = wrapped()
    st.fail_puts(lambda key: key.startswith("wal/"), TimeoutError)
    for i in range(3):
        with pytest.raises(TimeoutError):
            await st.put_if_absent(f"wal/{i}", b"x")
    await st.put_if_absent("other", b"x")
    boom = ConnectionResetError("reset")
    st.fail_put(5, boom)
    with pytest.raises(ConnectionResetError) as err:
        await st.put_if_absent("other2", b"x")
    assert err.value is boom


async def test_fail_after_put_landed() -> None:
    st = wrapped()
    st.fail_puts(lambda key: True, after=True)
    with pytest.raises(ObjectStoreError):
        await st.put_if_absent("k", b"landed")
    assert await st.get("k") == b"landed"  # the caller saw an error, yet the write happened
    st.clear_faults()
    with pytest.raises(ObjectExists):
        await st.put_if_absent("k", b"retry")


async def test_delays_and_counts() -> None:
    st = wrapped()
    st.delay(puts=0.05, gets=0.05)
    t0 = time.monotonic()
    await st.put_if_absent("k", b"v")
    assert await st.get("k", 1) == b""
    assert time.monotonic() - t0 >= 0.1
    await st.head("k")
    assert await st.delete("k") is True
    assert dict(st.calls) == {"put_if_absent": 1, "get": 1, "head": 1, "delete": 1}
    st.clear_faults()
    assert (st.put_delay, st.get_delay) == (0.0, 0.0)
    await st.close()
