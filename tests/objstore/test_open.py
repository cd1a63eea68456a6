"""open_object_store: URL schemes, options, environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nereus.objstore import (
    LocalObjectStore,
    MemoryObjectStore,
    ObjectNotFound,
    UnsupportedStoreUrl,
    open_object_store,
)
from nereus.objstore.memory import drop_named_bucket


def test_plain_paths_and_file_urls(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for url, root in [
        (str(tmp_path / "a"), tmp_path / "a"),
        ("rel/dir", tmp_path / "rel/dir"),
        ((tmp_path / "b c").as_uri(), tmp_path / "b c"),  # percent-encoded space
        (f"file://localhost{tmp_path}/d", tmp_path / "d"),
    ]:
        st = open_object_store(url)
        assert isinstance(st, LocalObjectStore) and st.root == str(root)


@pytest.mark.parametrize(
    "url,needle",
    [
        ("gs://bucket/x", "scheme 'gs'"),
        ("", "non-empty"),
        ("file://host/dir", "absolute directory"),
        ("file://", "absolute directory"),
        ("file:///tmp/x?io_threads=2", "no query"),
        ("s3:///no-bucket", "no bucket"),
        ("s3://b?colour=blue", "unknown option"),
        ("s3://b?allow_http=maybe", "not a boolean"),
    ],
)
def test_bad_urls_are_explained(url: str, needle: str) -> None:
    with pytest.raises(UnsupportedStoreUrl, match=needle):
        open_object_store(url)


def test_unknown_keyword_options(tmp_path) -> None:
    with pytest.raises(UnsupportedStoreUrl, match="unknown option"):
        open_object_store(str(tmp_path), bucket="x")
    with pytest.raises(UnsupportedStoreUrl, match="unknown option"):
        open_object_store("memory://", io_threads=2)
    st = open_object_store(tmp_path.as_uri(), io_threads=2, temp_max_age=5)
    assert isinstance(st, LocalObjectStore)


async def test_memory_names() -> None:
    a, b = open_object_store("memory://"), open_object_store("memory:///")
    await a.put_if_absent("k", b"v")
    with pytest.raises(ObjectNotFound):
        await b.head("k")  # unnamed stores are private
    shared1, shared2 = open_object_store("memory://shared-test"), open_object_store("memory://shared-test")
    assert isinstance(shared1, MemoryObjectStore)
    await shared1.put_if_absent("k", b"v")
    await shared1.close()
    assert await shared2.get("k") == b"v"  # same name, same bucket, even after close
    drop_named_bucket("shared-test")
    with pytest.raises(ObjectNotFound):
        await open_object_store("memory://shared-test").head("k")


def _s3_settings(st) -> tuple[dict, dict]:
    return st._client.config, st._client.client_options


def test_s3_url_options_and_precedence(monkeypatch) -> None:
    for var in list(os.environ):
        if var.startswith("AWS_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://env.example")

    st = open_object_store("s3://bkt/some/prefix/")
    assert (st.bucket, st.prefix) == ("bkt", "some/prefix")
    config, client = _s3_settings(st)
    assert config["region"] == "eu-west-1" and config["access_key_id"] == "env-key"
    assert config["endpoint"] == "https://env.example" and client["allow_http"] == "false"

    # query beats env, keyword beats query; an http:// endpoint implies allow_http
    st = open_object_store(
        "s3://bkt?region=us-west-2&endpoint=http://127.0.0.1:9000&access_key_id=q-key",
        access_key_id="kw-key",
    )
    config, client = _s3_settings(st)
    assert config["region"] == "us-west-2" and config["access_key_id"] == "kw-key"
    assert config["endpoint"] == "http://127.0.0.1:9000" and client["allow_http"] == "true"
    assert st.prefix == ""

    st = open_object_store("s3://bkt?endpoint=http://h:1&allow_http=false")
    assert _s3_settings(st)[1]["allow_http"] == "false"


def test_sdk_is_imported_only_for_s3() -> None:
    code = "import sys, nereus.objstore as o; o.open_object_store('memory://'); print('obstore' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"
