"""S3 backend specifics: conditional put on the real (moto) server, failing loudly without it."""

from __future__ import annotations

import pytest
from obstore.exceptions import AlreadyExistsError, BaseError, GenericError
from obstore.store import S3Store

from nereus.objstore import ObjectExists, ObjectNotFound, ObjectStoreError
from nereus.objstore import s3 as s3_module
from nereus.objstore.s3 import S3ObjectStore


async def test_moto_honours_if_none_match(make_s3) -> None:
    st = make_s3()
    # Straight through obstore: the server itself must refuse the second create.
    await st._client.put_async("raw", b"one", mode="create")
    with pytest.raises(AlreadyExistsError):
        await st._client.put_async("raw", b"two", mode="create")
    assert bytes(await (await st._client.get_async("raw")).bytes_async()) == b"one"
    assert await st.verify_conditional_put() is True
    await st.close()


async def test_prefixes_isolate_stores(make_s3) -> None:
    one, two, whole = make_s3("iso/one"), make_s3("iso/two"), make_s3("")
    await one.put_if_absent("k", b"1")
    await two.put_if_absent("k", b"2")
    assert (await one.get("k"), await two.get("k")) == (b"1", b"2")
    assert await whole.get("iso/one/k") == b"1"
    with pytest.raises(ObjectNotFound):
        await whole.head("k")
    for st in (one, two, whole):
        await st.close()


class OverwritingClient:
    """Stands in for an S3-compatible server that ignores If-None-Match."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    async def put_async(self, key, data, **_ignored) -> dict:
        self.objects[key] = bytes(data)
        return {"e_tag": None, "version": None}

    async def delete_async(self, key) -> None:
        self.objects.pop(key, None)


async def test_refuses_to_write_when_server_ignores_conditional_put() -> None:
    client = OverwritingClient()
    st = S3ObjectStore("bkt", client=client)
    assert await st.verify_conditional_put() is False
    for _ in range(2):  # the verdict is cached, and stays a refusal
        with pytest.raises(ObjectStoreError, match="If-None-Match"):
            await st.put_if_absent("k", b"data")
    assert client.objects == {}  # probe removed, nothing written


class ConflictingClient:
    """Answers the first PUTs with S3's 409 ConditionalRequestConflict."""

    def __init__(self, conflicts: int, then_exists: bool = False) -> None:
        self.conflicts, self.then_exists, self.calls = conflicts, then_exists, 0

    async def put_async(self, key, data, **kwargs) -> dict:
        assert kwargs["mode"] == "create" and kwargs["use_multipart"] is False
        self.calls += 1
        if self.calls <= self.conflicts:
            raise GenericError("409 Conflict: <Code>ConditionalRequestConflict</Code>")
        if self.then_exists:
            raise AlreadyExistsError("412 Precondition Failed")
        return {"e_tag": None, "version": None}


async def test_conditional_conflict_is_retried(monkeypatch) -> None:
    monkeypatch.setattr(s3_module, "_CONFLICT_BACKOFF", 0.001)
    client = ConflictingClient(conflicts=2)
    await S3ObjectStore("bkt", client=client, verify_conditional_put=False).put_if_absent("k", b"x")
    assert client.calls == 3

    client = ConflictingClient(conflicts=1, then_exists=True)
    with pytest.raises(ObjectExists):
        await S3ObjectStore("bkt", client=client, verify_conditional_put=False).put_if_absent("k", b"x")

    client = ConflictingClient(conflicts=100)
    with pytest.raises(ObjectStoreError, match="ConditionalRequestConflict"):
        await S3ObjectStore("bkt", client=client, verify_conditional_put=False).put_if_absent("k", b"x")
    assert client.calls == 6


async def test_transport_errors_become_store_errors() -> None:
    client = S3Store(
        "bkt", endpoint="http://127.0.0.1:1", region="us-east-1", access_key_id="a",
        secret_access_key="b", client_options={"allow_http": True}, retry_config={"max_retries": 0},
    )
    st = S3ObjectStore("bkt", client=client)
    for call in (st.head("k"), st.get("k"), st.put_if_absent("k", b"x")):
        with pytest.raises(ObjectStoreError) as err:
            await call
        assert not isinstance(err.value, ObjectNotFound) and isinstance(err.value.__cause__, BaseError)
