"""A local Spark session for the pipeline's command-line jobs."""

from __future__ import annotations

import os
import sys

from .java_runtime import ensure_java_home


def local_session(app_name: str, master: str = "local[2]"):
    """A Spark session whose Python workers use this interpreter (the one Nereus is installed in).

    Spark starts its Python workers with ``spark.pyspark.python`` (else ``PYSPARK_PYTHON``,
    else ``python3`` from PATH); this interpreter is set explicitly so that workers import
    Nereus and its dependencies without the virtual environment being activated.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    ensure_java_home()
    from pyspark.sql import SparkSession

    from .spark import register

    session = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.pyspark.python", sys.executable)
               .config("spark.pyspark.driver.python", sys.executable)
               .config("spark.ui.enabled", "false")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def default_catalog_uri(objects_url: str) -> str | None:
    """The SBT catalog beside a local object store (``table_store.default_catalog_uri``), its directory made."""
    from .table_store import default_catalog_uri as beside

    uri = beside(objects_url)
    if uri is not None:
        os.makedirs(os.path.dirname(uri[len("sqlite:///"):]), exist_ok=True)
    return uri
