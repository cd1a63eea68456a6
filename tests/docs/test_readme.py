"""The README's lakehouse walkthrough, run as written against a real standalone.

Blocks marked ``<!-- readme-test: lakehouse -->`` run in order from a directory laid
out like a clone after ``make run`` (``.venv`` is this interpreter's environment,
``data`` the standalone's data directory): shell blocks through bash, Python blocks
through the environment's interpreter, as a user who has not activated the
environment and has no Java (no ``JAVA_HOME``, no ``java`` on PATH) runs them. A block
marked ``... output`` lists lines the block before it must print, in order (``...``
matches anything). The only change to a block: the default ports become the test
standalone's free ports.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyiceberg")

from nereus.lakehouse import sbt  # noqa: E402
from nereus.meta import connect  # noqa: E402
from tests.lakehouse.test_java_runtime import path_without_java  # noqa: E402
from tests.standalone_process import Standalone, admin  # noqa: E402

CHECKOUT = Path(__file__).resolve().parents[2]
README = CHECKOUT / "README.md"
MARKED = re.compile(r"<!-- readme-test: (\w+)( output)? -->\n```(\w+)\n(.*?)\n```", re.S)
DEFAULT_PORTS = {"6650": "pulsar", "6648": "oxia", "8080": "http", "9092": "kafka"}
#: Bounds a hang only (Spark starts slowly on a loaded machine).
BLOCK_TIMEOUT = 600


def readme_blocks(section: str) -> list[tuple[str, str, list[str]]]:
    """``(language, code, expected output lines)`` of the README blocks marked for ``section``."""
    out: list[tuple[str, str, list[str]]] = []
    for name, is_output, language, text in MARKED.findall(README.read_text()):
        if name != section:
            continue
        if is_output:
            assert out, "an output block must follow a code block"
            out[-1][2].extend(line for line in text.splitlines() if line.strip())
        else:
            out.append((language, text, []))
    return out


def with_ports(code: str, node: Standalone) -> str:
    return re.sub(r"(localhost|127\.0\.0\.1):(6650|6648|8080|9092)\b",
                  lambda m: f"127.0.0.1:{node.ports[DEFAULT_PORTS[m.group(2)]]}", code)


def run_block(root: Path, language: str, code: str) -> str:
    venv_bin = Path(sys.prefix) / "bin"
    env = {key: value for key, value in os.environ.items() if key not in ("JAVA_HOME", "VIRTUAL_ENV")}
    env["PATH"] = str(root / "bin")  # the PATH's commands but java (see the clone fixture)
    env["XDG_CACHE_HOME"] = str(root / "cache")  # where the bundled runtime's java wrapper goes
    # As `make install` leaves it (an editable install in compat mode): the checkout on
    # sys.path, where Spark's data source lookup finds pyspark_nereus.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), os.environ.get("PYTHONPATH")) if p)
    env.pop("PYSPARK_PYTHON", None)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    if language == "sh":
        command = ["bash", "-e", "-c", code]
    elif language == "python":
        command = [str(venv_bin / "python"), "-c", code]
    else:
        raise AssertionError(f"no runner for {language} blocks")
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"README block failed ({done.returncode}):\n{code}\n---\n{output[-4000:]}"
    return done.stdout + "\n" + done.stderr


def assert_prints(output: str, expected: list[str], code: str) -> None:
    """Each expected line appears, in order, as a line of ``output``."""
    lines = iter(output.splitlines())
    for want in expected:
        pattern = re.compile(".*".join(re.escape(part) for part in want.strip().split("...")))
        if not any(pattern.fullmatch(line.strip()) for line in lines):
            raise AssertionError(f"README block did not print {want!r}:\n{code}\n---\n{output[-4000:]}")


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    root = tmp_path_factory.mktemp("clone")
    (root / ".venv").symlink_to(Path(sys.prefix))
    path_without_java(root)
    node = Standalone(root / "data")
    node.start()
    yield root, node
    node.stop()


async def _sync_table(metadata: str, objects: str, catalog, topic: str):
    meta = connect(metadata)
    try:
        return await sbt.sync(meta, catalog, objects, topic)
    finally:
        await meta.close()


def test_the_lakehouse_walkthrough_runs_as_written(clone):
    root, node = clone
    blocks = readme_blocks("lakehouse")
    assert [language for language, _, _ in blocks] == ["sh", "python", "python", "sh"]
    pyiceberg_block = blocks[2]

    # Before anything is compacted the topic's table has no snapshot: the README's
    # pyiceberg snippet shows an empty table, not an error.
    admin(node, "PUT", "/persistent/public/default/t")
    objects = (root / "data" / "objects").resolve().as_uri()
    (root / "data" / "iceberg").mkdir(exist_ok=True)
    catalog = sbt.open_catalog(f"sqlite:///{root / 'data' / 'iceberg' / 'catalog.db'}", objects + "/iceberg")
    asyncio.run(_sync_table(f"oxia://127.0.0.1:{node.ports['oxia']}", objects, catalog, "t"))
    assert catalog.load_table("public.default.t").current_snapshot() is None
    empty = run_block(root, "python", with_ports(pyiceberg_block[1], node))
    assert_prints(empty, ["[]", "{}"], pyiceberg_block[1])

    for language, code, expected in blocks:
        output = run_block(root, language, with_ports(code, node))
        assert_prints(output, expected, code)
    assert (root / "lake" / "t" / "_delta_log").is_dir()


def test_every_data_source_option_is_documented():
    read = re.compile(r'_(?:option|required|flag|positive)\(\w+, "(\w+)"')
    sources = ("spark.py", "streaming.py", "sink.py")
    options = {name for source in sources
               for name in read.findall((CHECKOUT / "nereus" / "lakehouse" / source).read_text())}
    assert {"metadata", "topic", "startingTimestamp", "serviceUrl"} <= options
    documented = set(re.findall(r"^\| ([^|]+) \|", README.read_text(), re.M))
    names = {name.strip("` ") for row in documented for name in row.split(",")}
    assert options <= names, f"options missing from the README's table: {sorted(options - names)}"
