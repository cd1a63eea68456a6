"""Fixtures of the Pulsar transaction tests: a standalone per module, a raw transaction client."""

from __future__ import annotations

import pytest

from tests.pulsar_txn.txn_client import TxnClient
from tests.standalone_process import running


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    with running(tmp_path_factory.mktemp("txn") / "data") as server:
        yield server


@pytest.fixture
def txn(standalone):
    """A client connected to the standalone's transaction coordinator 0 (one coordinator)."""
    client = TxnClient(standalone.pulsar_port)
    assert client.connect_coordinator() == 1
    yield client
    client.close()
