"""One local Spark session and one standalone for the lakehouse suite (per test process: starting
either costs seconds). Modules use topics and namespaces of their own."""

from __future__ import annotations

import os
import sys

import pytest

from tests.standalone_process import Standalone


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from nereus.lakehouse.spark import register

    session = (SparkSession.builder.master("local[2]").appName("nereus-test")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory):
    node = Standalone(tmp_path_factory.mktemp("lakehouse") / "data")
    node.start()
    yield node
    node.stop()
