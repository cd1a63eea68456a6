"""Fixtures of the Pulsar transaction tests: a standalone per module, a raw transaction client."""

from __future__ import annotations

import pytest

from tests.pulsar_txn.txn_client import TxnClient
from tests.standalone_fixtures import shared_standalone


standalone = shared_standalone("standalone", "txn")


@pytest.fixture
def txn(standalone):
    """A client connected to the standalone's transaction coordinator 0 (one coordinator)."""
    client = TxnClient(standalone.pulsar_port)
    assert client.connect_coordinator() == 1
    yield client
    client.close()
