"""Every fenced block of the README, run as written, in order, against real processes.

The blocks run from a directory laid out like a clone after ``make run`` (``.venv`` is
this interpreter's environment, ``data`` the standalone's data directory, ``docs`` and
``deploy`` the checkout's): shell blocks through bash, Python blocks through the
environment's interpreter, as a user who has not activated the environment and has no
Java (no ``JAVA_HOME``, no ``java`` on PATH) runs them. A block marked
``<!-- readme-test: ... output -->`` lists lines the block before it must print, in
order (``...`` matches anything). A block marked ``make`` holds ``make`` commands, run
as dry runs (``make -n``: ``make test`` would run this suite). A block marked
``serves`` holds long-running servers, each line in its own terminal: they replace
whatever served before (the README says to stop it first) and serve the blocks after
them. The only change to a block: the README's ports (also in the configuration file a
block names) become free ones.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyiceberg")

from nereus.lakehouse import sbt  # noqa: E402
from nereus.meta import connect  # noqa: E402
from tests.lakehouse.test_java_runtime import path_without_java  # noqa: E402
from tests.ports import free_port  # noqa: E402
from tests.standalone_process import Standalone, admin  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

CHECKOUT = Path(__file__).resolve().parents[2]
README = CHECKOUT / "README.md"
FENCED = re.compile(r"(?:<!-- readme-test: (\w+)( output)? -->\n)?```(\w+)\n(.*?)\n```", re.S)
#: The README's ports; the first four are the standalone's listeners.
STANDALONE_PORTS = {"6650": "pulsar", "6648": "oxia", "8080": "http", "9092": "kafka"}
OTHER_PORTS = ("6651", "6652", "7650", "8081", "8082", "9093", "9094")
PORT = re.compile(r"(?<=[:= ])(%s)\b" % "|".join((*STANDALONE_PORTS, *OTHER_PORTS)))
NAMED_PORT = re.compile(r"--(?:[a-z]+-)?port (\d+)")
#: Bounds a hang only (Spark starts slowly on a loaded machine).
BLOCK_TIMEOUT = 600


class Block:
    def __init__(self, kind: str | None, language: str, code: str) -> None:
        self.kind, self.language, self.code = kind, language, code
        self.expected: list[str] = []


def readme_blocks() -> list[Block]:
    """The README's fenced blocks in order, each with the output lines the next block says it prints."""
    out: list[Block] = []
    for kind, is_output, language, text in FENCED.findall(README.read_text()):
        if is_output:
            assert out, "an output block must follow a code block"
            out[-1].expected.extend(line for line in text.splitlines() if line.strip())
        elif language != "text":
            out.append(Block(kind or None, language, text))
    return out


def commands(code: str) -> list[str]:
    """A shell block's commands, one a line (continuations joined), without comments."""
    joined = code.replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


class Clone:
    """The directory the blocks run in, the ports they are given, and what serves them."""

    def __init__(self, root: Path, node: Standalone) -> None:
        self.root = root
        self.node = node
        self.ports = {port: str(node.ports[name]) for port, name in STANDALONE_PORTS.items()}
        self.ports.update((port, str(free_port())) for port in OTHER_PORTS)
        self.servers: list[tuple[subprocess.Popen, Path]] = []

    def with_ports(self, code: str) -> str:
        return PORT.sub(lambda m: self.ports[m.group(1)], code)

    def env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key not in ("JAVA_HOME", "VIRTUAL_ENV")}
        env["PATH"] = str(self.root / "bin")  # the PATH's commands but java and nereus (see the fixture)
        env["XDG_CACHE_HOME"] = str(self.root / "cache")  # where the bundled runtime's java wrapper goes
        env["HOME"] = str(self.root / "home")  # no client.conf of the user running the tests
        # As `make install` leaves it (an editable install in compat mode): the checkout on
        # sys.path, where Spark's data source lookup finds pyspark_nereus.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), os.environ.get("PYTHONPATH")) if p)
        for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "XDG_CONFIG_HOME", "PULSAR_CLIENT_CONF",
                     "PULSAR_ADMIN_URL", "NEREUS_ADMIN_TOKEN"):
            env.pop(name, None)
        env["NEREUS_ADMIN_URL"] = self.with_ports("http://localhost:8080")  # `nereus admin`'s default URL
        return env

    def run(self, language: str, code: str) -> str:
        code = self.with_ports(code)
        if language == "sh":
            command = ["bash", "-e", "-o", "pipefail", "-c", code]
        elif language == "python":
            command = [str(Path(sys.prefix) / "bin" / "python"), "-c", code]
        else:
            raise AssertionError(f"no runner for {language} blocks")
        done = subprocess.run(command, cwd=self.root, env=self.env(), capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT)
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"README block failed ({done.returncode}):\n{code}\n---\n{output[-4000:]}"
        return done.stdout + "\n" + done.stderr

    def serve(self, code: str) -> None:
        """Stop what serves now, then start each line of ``code`` and wait for the ports it names."""
        self.stop_servers()
        started = []
        for number, line in enumerate(commands(self.with_ports(code))):
            log = self.root / f"server-{len(self.servers)}.log"
            proc = subprocess.Popen(["bash", "-c", "exec " + line], cwd=self.root, env=self.env(),
                                    stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
            self.servers.append((proc, log))
            started.append((proc, log, NAMED_PORT.findall(line)))
        for proc, log, ports in started:
            for port in ports:
                wait_until(lambda p=port, pr=proc, lg=log: _accepts(int(p), pr, lg), f"port {port} of a server")

    def stop_servers(self) -> None:
        if self.node.alive():
            assert self.node.stop() == 0, self.node.log.read_text()[-3000:]
        for proc, log in reversed(self.servers):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
        self.servers.clear()


def _accepts(port: int, proc: subprocess.Popen, log: Path) -> bool:
    assert proc.poll() is None, f"a README server exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def dry_run_make(code: str) -> None:
    """Each ``make`` line of the block, as ``make -n -B``: it must name real targets and pass its flags on."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for line in commands(code):
        words = shlex.split(line, comments=True)
        assert words[0] == "make", line
        done = subprocess.run(["make", "-n", "-B", "--no-print-directory", "-C", str(CHECKOUT), *words[1:]],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{line}: {done.stderr}"


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
    (root / "docs").symlink_to(CHECKOUT / "docs")
    (root / "home").mkdir()
    path_without_java(root)
    (root / "bin" / "nereus").unlink(missing_ok=True)  # as in a shell without the environment activated
    node = Standalone(root / "data")
    node.start()
    clone = Clone(root, node)
    (root / "deploy").mkdir()
    conf = (CHECKOUT / "deploy" / "standalone.conf").read_text()
    (root / "deploy" / "standalone.conf").write_text(clone.with_ports(conf))
    yield clone
    clone.stop_servers()


async def _sync_table(metadata: str, objects: str, catalog, topic: str):
    meta = connect(metadata)
    try:
        return await sbt.sync(meta, catalog, objects, topic)
    finally:
        await meta.close()


def _empty_table_first(clone: Clone, pyiceberg_block: Block) -> None:
    """Before anything is compacted the topic's table has no snapshot: the README's pyiceberg
    snippet shows an empty table, not an error."""
    root, node = clone.root, clone.node
    admin(node, "PUT", "/persistent/public/default/t")
    objects = (root / "data" / "objects").resolve().as_uri()
    (root / "data" / "iceberg").mkdir(exist_ok=True)
    catalog = sbt.open_catalog(f"sqlite:///{root / 'data' / 'iceberg' / 'catalog.db'}", objects + "/iceberg")
    asyncio.run(_sync_table(f"oxia://127.0.0.1:{node.ports['oxia']}", objects, catalog, "t"))
    assert catalog.load_table("public.default.t").current_snapshot() is None
    assert_prints(clone.run("python", pyiceberg_block.code), ["[]", "{}"], pyiceberg_block.code)


def test_every_readme_block_runs_as_written_in_order(clone):
    blocks = readme_blocks()
    lakehouse = [block for block in blocks if block.kind == "lakehouse"]
    assert [block.language for block in lakehouse] == ["sh", "python", "python", "sh"]
    assert sum(block.kind == "serves" for block in blocks) == 2  # the configuration file's standalone, the cluster
    _empty_table_first(clone, lakehouse[2])

    for block in blocks:
        if block.kind == "make":
            dry_run_make(block.code)
        elif block.kind == "serves":
            clone.serve(block.code)
        else:
            assert_prints(clone.run(block.language, block.code), block.expected, block.code)

    root = clone.root
    assert (root / "data" / "lake" / "t" / "_delta_log").is_dir()
    assert (root / "data" / "secret.key").stat().st_mode & 0o777 == 0o600
    # The cluster kept to its own directory: nothing of it beside the checkout's files, no
    # standalone's topics in its metadata.
    assert not (root / "lake").exists() and not (root / "logs").exists()
    assert (root / "cluster" / "meta").is_dir() and (root / "cluster" / "objects").is_dir()
    for _proc, log in clone.servers:
        assert "made by `nereus standalone`" not in log.read_text()


def test_every_data_source_option_is_documented():
    read = re.compile(r'(?<![\w.])(?:option|required|flag|positive)\(\w+, "(\w+)"')
    sources = ("options.py", "spark.py", "streaming.py", "sink.py")
    options = {name for source in sources
               for name in read.findall((CHECKOUT / "nereus" / "lakehouse" / source).read_text())}
    assert {"metadata", "topic", "startingTimestamp", "serviceUrl"} <= options
    documented = set(re.findall(r"^\| ([^|]+) \|", README.read_text(), re.M))
    names = {name.strip("` ") for row in documented for name in row.split(",")}
    assert options <= names, f"options missing from the README's table: {sorted(options - names)}"
