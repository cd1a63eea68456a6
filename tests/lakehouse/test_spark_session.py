"""Spark sessions outside the test process: Python workers run the project's interpreter
without its environment being activated, and ``format("nereus")`` needs no registration."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

#: Run by this environment's interpreter, by absolute path, with a PATH whose python3 is
#: another interpreter (the system's, which lacks the project's dependencies).
SCRIPT = textwrap.dedent("""
    import sys
    from nereus.lakehouse.session import local_session

    spark = local_session("workers-interpreter")
    workers = spark.sparkContext.parallelize(range(4), 2).map(
        lambda _: (__import__("sys").executable, __import__("crc32c").__name__)).distinct().collect()
    print("workers:", workers)
    assert workers == [(sys.executable, "crc32c")], workers
    spark.stop()

    # A session of the user's own: only the interpreter set, nothing registered.
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").config("spark.pyspark.python", sys.executable)
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        spark.read.format("nereus").load().collect()
    except Exception as exc:
        message = str(exc)
    else:
        message = "no error"
    print("nereus:", message.splitlines()[0] if message else message)
    assert "needs the 'metadata' option" in message, message
    spark.stop()
""")


def test_workers_use_this_interpreter_and_the_source_is_found_without_registering(tmp_path):
    other = tmp_path / "bin"
    other.mkdir()
    (other / "python3").symlink_to("/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable)
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = f"{other}{os.pathsep}{path}"
    # The checkout on sys.path, as the editable install (compat mode) of `make install` puts it.
    checkout = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (checkout, os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)  # bounds a hang only
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert "workers: [(" in done.stdout and "nereus: " in done.stdout
