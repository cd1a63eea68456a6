"""Fixtures: one store per backend, and a real moto S3 server process for the s3 leg."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from nereus.objstore import ObjectStore, open_object_store
from tests.moto_server import BUCKET, CREDENTIALS, serve_for_session


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a moto S3 server subprocess with bucket ``BUCKET``."""
    yield from serve_for_session(tmp_path_factory.mktemp("moto") / "moto.log")


def open_s3(endpoint: str, prefix: str | None = None, **options) -> ObjectStore:
    """An S3 store on the moto bucket under a fresh (or given) prefix."""
    prefix = prefix if prefix is not None else f"t-{uuid.uuid4().hex}"
    return open_object_store(f"s3://{BUCKET}/{prefix}", endpoint=endpoint, **CREDENTIALS, **options)


@pytest.fixture(params=["memory", "file", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[ObjectStore]:
    """The same contract, once per backend."""
    if request.param == "memory":
        st = open_object_store("memory://")
    elif request.param == "file":
        st = open_object_store(tmp_path.as_uri())
    else:
        # Looked up lazily so that deselecting the s3 leg never starts moto.
        st = open_s3(request.getfixturevalue("moto_endpoint"))
    yield st
    await st.close()


@pytest.fixture
def make_s3(moto_endpoint: str):
    """Factory for S3 stores on the moto bucket: ``make_s3(prefix=None, **options)``."""

    def make(prefix: str | None = None, **options) -> ObjectStore:
        return open_s3(moto_endpoint, prefix, **options)

    return make
