"""Suite-wide settings.

Property-based tests draw the same inputs on every run, so that a CI run cannot fail
on a draw that the run before it never made; ``bench/fuzz.py`` explores at random
(set ``NEREUS_RANDOM_PROPERTIES=1`` to do the same here).
"""

import os

import pytest
from hypothesis import settings

from nereus.meta import open_engine

settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("explore", database=None)
settings.load_profile("explore" if os.environ.get("NEREUS_RANDOM_PROPERTIES") else "suite")


@pytest.fixture
async def memory_meta():
    """A client of an in-memory metadata engine (two shards), closed after the test."""
    engine = open_engine(None, shards=2)
    client = engine.client(namespace="default")
    yield client
    await client.close()
    await engine.close()
